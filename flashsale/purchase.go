// Package flashsale is the buyer's purchase path: identity, input checks,
// rate limits, admission control, the sale window, and one reservation on
// the shard set per accepted request, answered as api/openapi.yaml says;
// a purchase no shard could take goes to the spool; and the sale pages.
// Its ports (Products, Reserver, Spool) are interfaces; it imports the
// domain, api and spool.
package flashsale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"
	"golang.org/x/time/rate"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/spool"
)

// Products finds a product's definition (inventory.Catalog).
type Products interface {
	Product(ctx context.Context, id string) (*shardstock.Product, error)
}

// ProductCache says whether Products has product id without a read
// (inventory.Catalog).
type ProductCache interface {
	Cached(id string) (*shardstock.Product, bool)
}

// Reserver holds one unit for a buyer (shard.Purchases) and returns the shard.
// ReserveRetryable is Reserve for a purchase the spool will try again with
// the same id if it ends ErrUnavailable (its per-user claim stays for the
// retry), with the sale window checked at asOf (zero: now) and the shards a
// former try left in doubt (shardstock.InDoubt) resolved first; Abandon gives
// such a purchase's claim back when it will not be tried after all (held:
// the shard that holds its unit after all, -1 when given back; an error
// when some shard could not answer).
// KnownSoldOut reports, without a Redis call, that every shard recently
// answered empty for the product (the sold-out fast path).
type Reserver interface {
	Reserve(ctx context.Context, p *shardstock.Product, user, id string) (int, error)
	ReserveRetryable(ctx context.Context, p *shardstock.Product, user, id string, asOf time.Time, doubt uint64) (int, error)
	Abandon(ctx context.Context, p *shardstock.Product, user, id string, doubt uint64) (held int, err error)
	KnownSoldOut(p *shardstock.Product) bool
}

// HeaderIdentity trusts the X-User-ID header. Use it only behind a gateway
// that authenticates buyers and sets the header itself.
func HeaderIdentity(r *http.Request) (string, error) {
	u := r.Header.Get(api.UserIDHeader) // canonical: Get needs no copy
	if !shardstock.ValidID(u) {
		return "", unauthorized("X-User-ID must be 1-64 characters of [A-Za-z0-9_-]")
	}
	return u, nil
}

// NewOrderID returns a ULID: time-ordered, with 80 random bits per
// millisecond, so ids minted by any number of coordinator processes do not
// collide without any coordination between them.
func NewOrderID() string { return ulid.Make().String() }

// Gate admits a purchase of a product sold through a waiting room
// (waitroom.Room): nil, or the answer (not admitted, revoked). It reads
// memory only: no store or Redis call on the purchase path.
type Gate interface {
	Admit(product, user, token string, now time.Time) error
}

// Config wires a Handler. Products, Reserver and Identity are required.
type Config struct {
	Products Products
	// Cache, if set, is Products' cache: with buyer limits set, a purchase
	// of a product not in it (a new or made-up id) first costs the buyer
	// their own tokens, before Products reads the catalog. Nil: no purchase
	// is limited before the catalog read.
	Cache    ProductCache
	Reserver Reserver
	Identity api.Identity
	Now      func() time.Time // default time.Now
	// NowKnown, if set, says whether Now is the sale's clock: false while
	// no shard has answered its clock since the start. A purchase is then
	// not queued, which would carry a time from the coordinator's own
	// clock (behind, it stamps a purchase after the end inside the window,
	// to be sold on replay: the model test's fast mode).
	NowKnown func() bool
	NewID    func() string // default NewOrderID
	// Observe, if set, is told every purchase's product id ("" when it is
	// not a catalog product), outcome ("reserved", "queued" or the error
	// code) and how long it took (metrics, the sale report).
	Observe func(product, outcome string, took time.Duration)
	// Spool, if set, takes purchases no shard could: they are answered
	// 202 with a ticket and replayed later. Nil: such purchases get 503.
	Spool  Spool
	Logger *slog.Logger
	// Limits are the buyer-side rate limits; the zero value limits nothing.
	Limits Limits
	// OnLimited, if set, is told each request a limit refused (metrics).
	OnLimited func(scope string)
	// ProductIDs lists the catalog (for the edge limits); nil: no product lines.
	ProductIDs func(ctx context.Context) ([]string, error)
	// RealIP finds a request's client address (per-IP limits); nil: echo's
	// X-Forwarded-For extractor with its default trust.
	RealIP echo.IPExtractor
	// MaxInFlight bounds the purchases that may be at the shards at once
	// in this process, and QueueBudget how long one waits for a place
	// (admission control): past it the purchase is answered 503 with
	// Retry-After before it touches Redis — an overloaded coordinator
	// sheds load instead of letting deadlines expire against healthy
	// shards (which would open breakers and spool). Zero:
	// DefaultMaxInFlight and 50ms.
	MaxInFlight int
	QueueBudget time.Duration
	// OrderOf, if set, reads an order row (nil when there is none): a
	// replay whose shard in doubt lost its data since asks it before it
	// answers rejected.
	OrderOf func(ctx context.Context, id string) (*shardstock.Order, error)
	// EdgeQueues, if set, adds lines to /edge/limits for the waiting rooms
	// ("queue ID N": places up to N are admitted by now or within a second).
	EdgeQueues func(now time.Time) string
	// Gate, if set, admits purchases of queued products (the buyer's place
	// in X-Queue-Token); nil: every purchase is admitted.
	Gate Gate
}

// errOverloaded answers a purchase admission control turned away.
var errOverloaded = &shardstock.Error{Code: shardstock.ErrUnavailable.Code, Message: "this coordinator is at its limit of purchases in flight; retry in a second"}

// Spool is the disk spool (spool.Spool).
type Spool interface {
	Append(e spool.Entry) error
	Ticket(ticket string) (spool.Entry, spool.Result, bool)
	// Pending counts user's purchases of product waiting in the spool.
	Pending(product, user string) int
}

// Handler serves the buyer API.
type Handler struct {
	cfg       Config
	limiter   *limiter
	requestID func() string
	realIP    echo.IPExtractor
	inflight  chan struct{} // admission control: a place per purchase at the shards
	looks     keyedLimits   // each buyer's looks at their place (LimitLooks)
	edgeMu    sync.Mutex    // guards edgeBody and edgeAt
	edgeBody  string        // the last /edge/limits answer
	edgeAt    time.Time
}

// NewHandler returns a Handler; see Config for defaults.
// DefaultMaxInFlight is the purchases at the shards at once in a process
// by default (SHARDSTOCK_MAX_INFLIGHT).
const DefaultMaxInFlight = 1024

func NewHandler(cfg Config) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = NewOrderID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.QueueBudget <= 0 {
		cfg.QueueBudget = 50 * time.Millisecond
	}
	h := &Handler{cfg: cfg, limiter: newLimiter(cfg.Limits), requestID: api.RequestIDs(), realIP: cfg.RealIP,
		inflight: make(chan struct{}, cfg.MaxInFlight)}
	if h.realIP == nil {
		h.realIP = echo.ExtractIPFromXFFHeader()
	}
	return h
}

// PostPurchase is the purchase as an echo handler. Purchases are served by
// Purchases, in front of echo, and reach it only when that is not mounted:
// the route keeps the router (and the contract's route list) complete.
func (h *Handler) PostPurchase(c echo.Context) error {
	h.ServePurchase(c.Response(), c.Request(), c.Param("id"))
	return nil
}

// GetEdgeLimits publishes the limits for an nginx edge (deploy/nginx/limiter.lua),
// one per line: "global N" and "product ID N", in requests per second, and
// "queue ID N" for the waiting rooms (Config.EdgeQueues).
// The answer is kept for a second: the edge asks about once a second per
// worker, and the endpoint must not cost a catalog read per call.
func (h *Handler) GetEdgeLimits(c echo.Context) error {
	now := h.cfg.Now()
	h.edgeMu.Lock()
	defer h.edgeMu.Unlock()
	if now.Sub(h.edgeAt) < time.Second && h.edgeBody != "" {
		return c.String(http.StatusOK, h.edgeBody)
	}
	var b strings.Builder
	if h.cfg.Limits.Global > 0 {
		fmt.Fprintf(&b, "global %g\n", h.cfg.Limits.Global)
	}
	if h.cfg.ProductIDs != nil && h.cfg.Limits.Product != 0 {
		ctx := c.Request().Context()
		ids, err := h.cfg.ProductIDs(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
		}
		for _, id := range ids {
			if p, err := h.cfg.Products.Product(ctx, id); err == nil {
				fmt.Fprintf(&b, "product %s %g\n", id, h.limiter.productRate(p.Stock))
			}
		}
	}
	if h.cfg.EdgeQueues != nil {
		b.WriteString(h.cfg.EdgeQueues(now))
	}
	h.edgeBody, h.edgeAt = b.String(), now
	return c.String(http.StatusOK, h.edgeBody)
}

// Queued is the 202 body of a spooled purchase.
type Queued struct {
	Status string `json:"status"`
	Ticket string `json:"ticket"`
}

// errQueued is the purchase outcome "spooled" (not an error for the buyer).
var errQueued = errors.New("queued")

// purchaseBody is the (optional) purchase body. It has no fields today; it
// is decoded strictly so that a malformed body is a 400, not ignored.
type purchaseBody struct{}

// Reserved is the 200 body of a purchase.
type Reserved struct {
	Status  string `json:"status"`
	OrderID string `json:"order_id"`
	Shard   int    `json:"shard"`
}

// api.PurchasePath's paths, as Purchases matches them.
const (
	purchasePrefix = "/api/v1/products/"
	purchaseSuffix = "/purchase"
)

// Purchases serves POST /api/v1/products/{id}/purchase itself and hands
// every other request to next (echo's router and middleware). A purchase
// is most of a sale's traffic, and after a sell-out nearly all of it is
// answered 410 from memory: it skips the router, the middleware chain and
// echo's context, and gets what they give every request — a request id, the
// request log, recovery from a panic — from ServePurchase.
func (h *Handler) Purchases(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		id, ok := purchaseID(r.URL.Path)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		h.ServePurchase(w, r, id)
	})
}

// purchaseID is the product id of a purchase path ("" when the segment is
// empty); ok is false for any other path.
func purchaseID(path string) (string, bool) {
	if len(path) < len(purchasePrefix)+len(purchaseSuffix) ||
		!strings.HasPrefix(path, purchasePrefix) || !strings.HasSuffix(path, purchaseSuffix) {
		return "", false
	}
	id := path[len(purchasePrefix) : len(path)-len(purchaseSuffix)]
	return id, strings.IndexByte(id, '/') < 0
}

// ServePurchase answers one purchase of product id, as api/openapi.yaml says.
func (h *Handler) ServePurchase(w http.ResponseWriter, r *http.Request, id string) {
	start := time.Now()
	rid := h.requestID()
	w.Header()[echo.HeaderXRequestID] = []string{rid}
	status := http.StatusInternalServerError
	defer func() {
		if p := recover(); p != nil {
			status = api.WriteError(w, r, api.PurchasePath, fmt.Errorf("panic: %v", p), h.cfg.Logger)
		}
		api.LogRequest(h.cfg.Logger, r, api.PurchasePath, status, start, rid)
	}()
	found := false // the product is in the catalog: its outcome is worth recording
	status, err := h.purchase(w, r, id, &found)
	if h.cfg.Observe != nil {
		outcome := "reserved"
		if errors.Is(err, errQueued) {
			outcome = "queued"
		} else if err != nil {
			outcome = shardstock.Public(err).Code
		}
		product := id
		if !found {
			product = "" // not a catalog product (made up, or refused before the lookup)
		}
		h.cfg.Observe(product, outcome, time.Since(start))
	}
	if err != nil && !errors.Is(err, errQueued) {
		status = api.WriteError(w, r, api.PurchasePath, err, h.cfg.Logger)
	}
}

// purchase runs one purchase; it writes the answer itself on success (and
// returns its status) and returns the error otherwise.
func (h *Handler) purchase(w http.ResponseWriter, r *http.Request, id string, found *bool) (int, error) {
	if !shardstock.ValidID(id) {
		return 0, shardstock.Invalid("product id must be 1-64 characters of [A-Za-z0-9_-]")
	}
	user, err := h.cfg.Identity(r)
	if err != nil {
		return 0, err
	}
	if err := api.DecodeRequest(w, r, &purchaseBody{}, true); err != nil {
		return 0, err
	}
	ctx := r.Context()
	now := h.cfg.Now()
	// A product the catalog must be read for (not cached: a new or made-up
	// id) first costs the buyer their own tokens, so a flood of random ids
	// is limited before it reaches SQL.
	var pre []*rate.Reservation
	if h.cfg.Cache != nil && h.limiter.any() {
		if _, hit := h.cfg.Cache.Cached(id); !hit {
			var err error
			if pre, err = h.admitBuyer(w, r, user, now); err != nil {
				return 0, err
			}
		}
	}
	p, err := h.cfg.Products.Product(ctx, id)
	if err != nil {
		return 0, err
	}
	*found = true
	if err := p.Open(now); err != nil {
		return 0, err
	}
	if h.cfg.Reserver.KnownSoldOut(p) {
		return 0, shardstock.ErrSoldOut // after a sell-out most traffic ends here: no limit, no Redis
	}
	if h.cfg.Gate != nil {
		if err := h.cfg.Gate.Admit(p.ID, user, r.Header.Get(api.QueueTokenHeader), now); err != nil {
			return 0, err
		}
	}
	if err := h.allow(w, r, p, user, now, pre); err != nil {
		return 0, err
	}
	if !h.admit() {
		w.Header().Set("Retry-After", "1")
		return 0, errOverloaded
	}
	defer h.release()
	orderID := h.cfg.NewID()
	if h.cfg.Spool == nil {
		shard, err := h.cfg.Reserver.Reserve(ctx, p, user, orderID)
		if err != nil {
			return 0, err
		}
		api.WriteJSON(w, http.StatusOK, Reserved{Status: "reserved", OrderID: orderID, Shard: shard}.encode())
		return http.StatusOK, nil
	}
	shard, err := h.cfg.Reserver.ReserveRetryable(ctx, p, user, orderID, time.Time{}, 0)
	if errors.Is(err, shardstock.ErrUnavailable) && ctx.Err() != nil {
		// The buyer hung up: nobody would get the ticket. Not spooled; a
		// unit a step in flight may have reserved becomes an order that
		// times out.
		h.cfg.Reserver.Abandon(ctx, p, user, orderID, shardstock.DoubtOf(err))
		return 0, err
	}
	if errors.Is(err, shardstock.ErrUnavailable) {
		return h.spool(w, r, p, user, orderID, err)
	}
	if err != nil {
		return 0, err
	}
	api.WriteJSON(w, http.StatusOK, Reserved{Status: "reserved", OrderID: orderID, Shard: shard}.encode())
	return http.StatusOK, nil
}

// admit takes a place for a purchase at the shards, waiting at most the
// queue budget; false: the coordinator is overloaded.
func (h *Handler) admit() bool {
	select {
	case h.inflight <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.cfg.QueueBudget)
	defer t.Stop()
	select {
	case h.inflight <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (h *Handler) release() { <-h.inflight }

// allow applies the buyer-side rate limits: nil, or ErrRateLimited with
// Retry-After set. pre, when set, holds the buyer's tokens admitBuyer took
// already.
func (h *Handler) allow(w http.ResponseWriter, r *http.Request, p *shardstock.Product, user string, now time.Time, pre []*rate.Reservation) error {
	if !h.limiter.any() {
		return nil
	}
	var ok bool
	var scope string
	var retry time.Duration
	if pre != nil {
		ok, scope, retry = h.limiter.allowProduct(pre, p.ID, p.Stock, now)
	} else {
		ok, scope, retry = h.limiter.allow(p.ID, p.Stock, user, h.clientIP(r), now)
	}
	if ok {
		return nil
	}
	return h.limited(w, scope, retry)
}

// LimitBuyer is echo middleware that costs a request its buyer's and its
// address's tokens of the buyer-side limits, as a purchase does, and
// answers 429 past them: a waiting room's joins are counted with the
// buyer's purchases.
func (h *Handler) LimitBuyer(next echo.HandlerFunc) echo.HandlerFunc {
	return h.perBuyer(next, func(user string, r *http.Request, now time.Time) (bool, string, time.Duration) {
		_, ok, scope, retry := h.limiter.admitBuyer(user, h.clientIP(r), now)
		return ok, scope, retry
	})
}

// A buyer's looks at their place in a waiting room, with rate limits on:
// lookRate a second, lookBurst at once. The page looks when Retry-After
// says (a second at the soonest), so an honest buyer never meets it; a
// script that looks as fast as it can is answered 429 (issue 41, finding
// 3: one connection made 3,300 looks a second).
const (
	lookRate  = 2
	lookBurst = 5
)

// LimitLooks is echo middleware that holds each buyer to lookRate looks a
// second (429 with Retry-After past it) while rate limits are on.
func (h *Handler) LimitLooks(next echo.HandlerFunc) echo.HandlerFunc {
	return h.perBuyer(next, func(user string, _ *http.Request, now time.Time) (bool, string, time.Duration) {
		r := h.looks.get(user, lookRate, lookBurst, now).ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return false, "look", d
		}
		return true, "", 0
	})
}

// perBuyer is echo middleware that, while rate limits are on, asks admit
// about each request's buyer and answers 429 (scope, Retry-After) when it
// says no.
func (h *Handler) perBuyer(next echo.HandlerFunc, admit func(user string, r *http.Request, now time.Time) (ok bool, scope string, retry time.Duration)) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !h.limiter.any() {
			return next(c)
		}
		user, err := h.cfg.Identity(c.Request())
		if err != nil {
			return err
		}
		if ok, scope, retry := admit(user, c.Request(), h.cfg.Now()); !ok {
			return h.limited(c.Response(), scope, retry)
		}
		return next(c)
	}
}

// admitBuyer takes the buyer's user and ip tokens before a catalog read.
func (h *Handler) admitBuyer(w http.ResponseWriter, r *http.Request, user string, now time.Time) ([]*rate.Reservation, error) {
	taken, ok, scope, retry := h.limiter.admitBuyer(user, h.clientIP(r), now)
	if !ok {
		return nil, h.limited(w, scope, retry)
	}
	if taken == nil {
		taken = []*rate.Reservation{} // admitted with no buyer limit: not nil, so allow takes only the rest
	}
	return taken, nil
}

func (h *Handler) clientIP(r *http.Request) string {
	if h.cfg.Limits.IP > 0 {
		return h.realIP(r)
	}
	return ""
}

func (h *Handler) limited(w http.ResponseWriter, scope string, retry time.Duration) error {
	if h.cfg.OnLimited != nil {
		h.cfg.OnLimited(scope)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
	return &shardstock.Error{Code: shardstock.ErrRateLimited.Code, Message: "too many requests (" + scope + " limit), retry later"}
}

// encode is json.Marshal of r for ids that passed shardstock.ValidID (no
// character needs escaping), without reflection: this body answers every
// successful purchase.
func (r Reserved) encode() []byte {
	b := make([]byte, 0, 96)
	b = append(b, `{"status":"`...)
	b = append(b, r.Status...)
	b = append(b, `","order_id":"`...)
	b = append(b, r.OrderID...)
	b = append(b, `","shard":`...)
	b = strconv.AppendInt(b, int64(r.Shard), 10)
	return append(b, "}\n"...)
}

// spool writes a purchase no shard could take to the disk spool and answers
// 202 with a ticket; when the spool cannot take it (full, or the buyer is
// at their allowance), the purchase is abandoned.
func (h *Handler) spool(w http.ResponseWriter, r *http.Request, p *shardstock.Product, user, orderID string, cause error) (int, error) {
	// No buyer waits in the spool for more units than they may hold: the
	// limit cannot be checked at the shards now, but it bounds the queue.
	if h.cfg.Spool.Pending(p.ID, user) >= int(p.PerUserLimit) {
		return h.abandon(w, r, p, user, orderID, cause, shardstock.ErrLimitReached)
	}
	if h.cfg.NowKnown != nil && !h.cfg.NowKnown() {
		return h.abandon(w, r, p, user, orderID, cause, fmt.Errorf("%w: no shard has told this coordinator the sale's time since it started, so it cannot queue a purchase; retry", shardstock.ErrUnavailable))
	}
	e := spool.Entry{Ticket: "T" + h.cfg.NewID(), ProductID: p.ID, UserID: user, OrderID: orderID, AtMS: h.cfg.Now().UnixMilli(),
		Doubt: shardstock.DoubtOf(cause)}
	if err := h.cfg.Spool.Append(e); err != nil {
		h.cfg.Logger.Warn("purchase not spooled", "err", err, "cause", cause)
		return h.abandon(w, r, p, user, orderID, cause, fmt.Errorf("%w: spool: %w", shardstock.ErrUnavailable, err))
	}
	body, _ := json.Marshal(Queued{Status: "queued", Ticket: e.Ticket})
	api.WriteJSON(w, http.StatusAccepted, append(body, '\n'))
	return http.StatusAccepted, errQueued
}

// abandon gives back the claim of a purchase that will not be tried again
// and answers refusal, unless the claim could not be given back (invariant
// 7: nobody is refused while a unit is held for them). A shard that holds
// the id took a unit with a step whose answer was lost: the reservation
// stands, and is answered 200 (its order comes from that shard's outbox). A
// shard that could not answer leaves the outcome unknown: 503, which tells
// the buyer to look again, never a refusal.
func (h *Handler) abandon(w http.ResponseWriter, r *http.Request, p *shardstock.Product, user, orderID string, cause, refusal error) (int, error) {
	shard, err := h.cfg.Reserver.Abandon(r.Context(), p, user, orderID, shardstock.DoubtOf(cause))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: a shard did not answer, so whether this purchase took a unit is not known yet; if it did, order %s appears in your orders: %w",
			shardstock.ErrUnavailable, orderID, err)
	case shard >= 0:
		api.WriteJSON(w, http.StatusOK, Reserved{Status: "reserved", OrderID: orderID, Shard: shard}.encode())
		return http.StatusOK, nil
	}
	return 0, refusal
}

// TicketView is the body of GET /api/v1/tickets/{ticket}.
type TicketView struct {
	Status  string `json:"status"`
	OrderID string `json:"order_id,omitempty"`
	Error   string `json:"error,omitempty"`
}

// GetTicket answers a queued purchase's ticket to the buyer who holds it.
func (h *Handler) GetTicket(c echo.Context) error {
	user, err := h.cfg.Identity(c.Request())
	if err != nil {
		return err
	}
	t := c.Param("ticket")
	if h.cfg.Spool == nil || !shardstock.ValidID(t) {
		return shardstock.ErrNoTicket
	}
	e, r, ok := h.cfg.Spool.Ticket(t)
	if !ok || e.UserID != user {
		return shardstock.ErrNoTicket
	}
	return c.JSON(http.StatusOK, TicketView{Status: r.Status, OrderID: r.OrderID, Error: r.Error})
}

// Replay tries a spooled purchase again (spool.Replayer): reserved, or
// rejected with the error code a buyer would have got; an error when
// nothing can take it yet (an *shardstock.InDoubt names the shards the next
// try must resolve first: the spool keeps them). The sale window is checked
// at the time the purchase arrived, so one taken in time is not refused
// because the shards came back after the sale ended. A paused sale's tickets
// wait (the kill switch stops the replay too); an archived sale's are
// rejected ended without a shard call.
func (h *Handler) Replay(ctx context.Context, e spool.Entry) (spool.Result, error) {
	p, err := h.cfg.Products.Product(ctx, e.ProductID)
	switch {
	case err == nil && p.Archived:
		// Its shard keys are gone on purpose and every order was final
		// before the archive: a walk would only write keys again (a claim).
		// The reservation is an order row, or there is none.
		err = shardstock.ErrEnded
	case err == nil && p.Paused:
		// The kill switch stops the queue too (a mispriced sale must not go
		// on selling from it): the tickets stay queued and are replayed
		// once the sale resumes, within its window as at their arrival.
		return spool.Result{}, fmt.Errorf("%w: sales of %s are paused; queued purchases wait for the resume", shardstock.ErrUnavailable, p.ID)
	case err == nil:
		var shard int
		if shard, err = h.cfg.Reserver.ReserveRetryable(ctx, p, e.UserID, e.OrderID, time.UnixMilli(e.AtMS), e.Doubt); err == nil {
			return spool.Result{Status: "reserved", OrderID: e.OrderID, Shard: shard}, nil
		}
	}
	if errors.Is(err, shardstock.ErrUnavailable) {
		return spool.Result{}, err
	}
	if e.Doubt != 0 && h.cfg.OrderOf != nil {
		// A shard in doubt may have taken the reservation, had its outbox
		// entry become an order, and then lost its data (the hold with it):
		// the walk finds no hold there, and the order row is the truth.
		o, oerr := h.cfg.OrderOf(ctx, e.OrderID)
		if oerr != nil {
			return spool.Result{}, fmt.Errorf("%w: order table: %w", shardstock.ErrUnavailable, oerr)
		}
		if o != nil {
			return spool.Result{Status: "reserved", OrderID: e.OrderID, Shard: o.Shard}, nil
		}
	}
	return spool.Result{Status: "rejected", Error: shardstock.Public(err).Code}, nil
}
