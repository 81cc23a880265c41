// Package order is the order service: it turns reservations into order
// rows (idempotently), runs the order state machine (awaiting payment ->
// paid | cancelled, or failed), cancels unpaid orders after the payment
// timeout, applies payment results, and publishes each final state as a
// settlement for the shard that holds the unit. The order row is the
// source of truth. Its ports — the order table (Store), the settlement
// transport, the shards' holds, claims and budget — are interfaces here;
// it imports the domain (package shardstock), api and ha, no adapter.
package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/time/rate"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/ha"
)

// ErrUnknownProduct: a reservation names a product the catalog does not
// have (another deployment shares the broker, or the catalog was reset).
// No process can write it; the message is kept for an operator: it is
// shardstock.Refused.
var ErrUnknownProduct = shardstock.Refused(errors.New("product not in the catalog"))

// OrderStore is the order table (sqlstore.Orders). Insert writes a reservation's row and returns the
// status written, or shardstock.ErrOrderExists; InsertBatch writes several
// in one commit (nil error: all decided) and returns their statuses;
// Transition moves an order out of awaiting_payment and reports whether
// this call did; RecordTransaction puts a payment's transaction id on
// record and returns the order it was on record for before ("" if none).
type OrderStore interface {
	Order(ctx context.Context, id string) (*shardstock.Order, error)
	Insert(ctx context.Context, ev shardstock.ReservationEvent, limit int64, status shardstock.OrderStatus, now, payBy time.Time) (shardstock.OrderStatus, error)
	InsertBatch(ctx context.Context, rows []shardstock.NewOrder, now, payBy time.Time) ([]shardstock.OrderStatus, error)
	Transition(ctx context.Context, id, user string, status shardstock.OrderStatus, now time.Time) (bool, error)
	CancelExpired(ctx context.Context, cutoff, now time.Time) (int64, error)
	Unsettled(ctx context.Context, limit int, skip []int) ([]shardstock.Order, error)
	MarkSettled(ctx context.Context, id string, status shardstock.OrderStatus) error
	ClaimsPending(ctx context.Context, after string, limit int) ([]shardstock.Order, error)
	MarkClaimReturned(ctx context.Context, id string) error
	RecordTransaction(ctx context.Context, transaction, id string) (string, error)
}

// Catalog is what the service reads of the product catalog
// (sqlstore.Catalog): a product's definition (its limit, its shards), and
// every product's id (a reservation without its order row is looked for on
// them).
type Catalog interface {
	ProductDefinition(ctx context.Context, id string) (string, error)
	ProductIDs(ctx context.Context) ([]string, error)
}

// Settler publishes a settlement to the shard that holds the unit.
type Settler interface {
	Publish(ctx context.Context, s shardstock.Settlement) error
}

// HoldFinder finds a reservation's hold on the shards when it has no order
// row yet (status pending).
type HoldFinder interface {
	FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error)
}

// Budget is the cluster's bucket of order-creation tokens (shard.Set):
// TakeBudget takes up to want at rate a second with burst, as many as it
// has now.
type Budget interface {
	TakeBudget(ctx context.Context, rate float64, burst, want int) (int, error)
}

// ClaimReturner gives a buyer's per-user limit claim back at the buyer's
// home shard (shard.Purchases); an error means it must be tried again.
type ClaimReturner interface {
	GiveBack(ctx context.Context, p *shardstock.Product, user, id string) error
	// HomeOf is the index of user's home shard for p (an error: this
	// coordinator cannot reach it).
	HomeOf(p *shardstock.Product, user string) (int, error)
}

// LateHolds puts back, on its shard, the hold of a reservation whose order
// row is written after its shard was brought back in line with SQL
// without it (inventory.Resync.HoldLate): a reservation relayed to the
// broker (or read from the outbox) just before its shard lost its last
// second lands in SQL after the resync read the live orders. It never
// fails: what it cannot do now it does later.
type LateHolds interface {
	// written: when o's row was written (the resync time read before
	// does not judge it).
	HoldLate(ctx context.Context, o shardstock.Order, reserved, written time.Time)
	// Admit is the status such a reservation's order is written with, once
	// its claim and hold are back on the shards: awaiting payment, or
	// failed (a sale lost with the shard's last writes). Any other
	// reservation: awaiting payment. An error decides nothing: offer the
	// reservation again later.
	Admit(ctx context.Context, ev shardstock.ReservationEvent) (shardstock.OrderStatus, error)
}

// Config sets up a Service; zero values mean the defaults.
type Config struct {
	Store   OrderStore // the orders (required)
	Catalog Catalog    // the products (required to write orders)
	Settler Settler    // where settlements go (required to settle)
	// Holds, if set, finds a reservation's hold on the shards when it has
	// no order row yet; nil: no pending lookups.
	Holds HoldFinder
	// Claims, if set, gets the claims of cancelled and failed orders back
	// (the sweep retries each until it succeeds); nil: claims are kept.
	Claims ClaimReturner
	// LateHolds, if set, checks the hold of every order written awaiting
	// payment (and of every repeat of one) against its shard's last
	// resync; nil: no check (a service tested alone).
	LateHolds   LateHolds
	PayTimeout  time.Duration // unpaid orders are cancelled after this; default DefaultPayTimeout
	FailFastAge time.Duration // older reservations become failed orders; default DefaultFailFastAge
	Rate        float64       // order creations per second; default DefaultRate
	SweepEvery  time.Duration // timeout and settlement sweeps; default 250ms
	Now         func() time.Time
	Logger      *slog.Logger
	OnIngest    func(status shardstock.OrderStatus) // optional: an order row was written (metrics)
	// Budget, if set, is the order-creation rate shared by every
	// coordinator (Rate orders per second for the cluster, not per
	// process); nil, or while it cannot answer: Rate for this process alone.
	Budget Budget
	// PaySecret signs payment results (the callback's X-Signature, a
	// message's signature); empty: unsigned results are accepted (dev).
	PaySecret []byte
	// PayPrevious, while a payment secret is rotated, is the one going
	// out: results signed with it are accepted too, so every coordinator
	// of a rolling deploy accepts what the payment centre signs, before
	// and after it switches (a result refused for its signature is
	// dead-lettered, its money taken and its order left unpaid).
	PayPrevious []byte
}

// The defaults of Config, and of the settings that set it
// (SHARDSTOCK_PAY_TIMEOUT, SHARDSTOCK_FAIL_FAST_AGE, SHARDSTOCK_ORDER_RATE).
const (
	DefaultPayTimeout  = 15 * time.Minute
	DefaultFailFastAge = 30 * time.Minute
	// DefaultRate guards the database, not the pipeline: make bench
	// measures what the pipeline can do.
	DefaultRate = 10000
)

func (c *Config) fill() {
	if c.PayTimeout <= 0 {
		c.PayTimeout = DefaultPayTimeout
	}
	if c.FailFastAge <= 0 {
		c.FailFastAge = DefaultFailFastAge
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 250 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Service is the order service. Safe for concurrent use.
type Service struct {
	store   OrderStore
	settler Settler
	holds   HoldFinder
	limiter *rate.Limiter
	cfg     Config
	kick    chan struct{} // wakes the settlement sweep
	// budgetDown: the shared budget failed last time (logged once per outage)
	budgetDown atomic.Bool
	products   sync.Map // product id -> *shardstock.Product (definitions never change)
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	cfg.fill()
	burst := max(1, int(cfg.Rate/10)) // a tenth of a second's orders at once (also the shared bucket's)
	return &Service{store: cfg.Store, settler: cfg.Settler, holds: cfg.Holds, cfg: cfg,
		limiter: rate.NewLimiter(rate.Limit(cfg.Rate), burst), kick: make(chan struct{}, 1)}
}

// Ingest turns a reservation into its order row, idempotently: a repeat of
// a reservation already written changes nothing, except that a second hold
// of the same reservation id on another shard (a reserve whose answer was
// lost before failing over) is released. A reservation older than the
// fail-fast age becomes a failed order whose unit is released. An error
// means nothing was decided (the database did not answer, say): the caller
// must not acknowledge the message and offers it again later.
func (s *Service) Ingest(ctx context.Context, ev shardstock.ReservationEvent) error {
	existing, err := s.store.Order(ctx, ev.ID)
	if err != nil {
		return err
	}
	if existing != nil {
		if existing.Shard == ev.Shard && existing.Status != shardstock.StatusPaid {
			// A repeat: its first delivery may have died before the check.
			// Or this one's check (Admit) took the claim back as the
			// order, written by another writer, was cancelled: the check
			// gives it back.
			s.holdLate(ctx, ev, time.Now())
		}
		return s.duplicate(ctx, existing, ev)
	}
	limit, err := s.limit(ctx, ev.ProductID)
	if err != nil {
		return err
	}
	status, err := s.firstStatus(ctx, ev)
	if err != nil {
		return fmt.Errorf("order %s: %w", ev.ID, err)
	}
	if status == shardstock.StatusAwaitingPayment {
		if err := s.admit(ctx, 1); err != nil {
			return err
		}
	}
	now := s.cfg.Now()
	written, err := s.store.Insert(ctx, ev, limit, status, now, now.Add(s.cfg.PayTimeout))
	if errors.Is(err, shardstock.ErrOrderExists) {
		return s.Ingest(ctx, ev)
	}
	if err != nil {
		return err
	}
	at := time.Now() // the row is in (holdLate)
	if written != shardstock.StatusAwaitingPayment {
		s.wake()
	}
	if s.cfg.OnIngest != nil {
		s.cfg.OnIngest(written)
	}
	if written == shardstock.StatusAwaitingPayment {
		s.holdLate(ctx, ev, at)
	}
	return nil
}

// holdLate has the hold of ev's order, written awaiting payment by the
// time written, put back on its shard if the shard was resynced without
// it (LateHolds).
func (s *Service) holdLate(ctx context.Context, ev shardstock.ReservationEvent, written time.Time) {
	if s.cfg.LateHolds != nil {
		s.cfg.LateHolds.HoldLate(ctx, shardstock.Order{ID: ev.ID, UserID: ev.UserID, ProductID: ev.ProductID,
			Shard: ev.Shard, Status: shardstock.StatusAwaitingPayment}, ev.At(), written)
	}
}

// IngestBatch is Ingest for several reservations with one database commit
// (Store.InsertBatch). It returns how many of evs, from the first, are
// decided; when that is fewer than len(evs), err says why the next one is
// not, as Ingest would for it alone. A batch the database refuses as a
// whole is retried reservation by reservation, so the outcome of every
// reservation is the one Ingest gives it.
func (s *Service) IngestBatch(ctx context.Context, evs []shardstock.ReservationEvent) (int, error) {
	if len(evs) < 2 {
		return s.ingestEach(ctx, evs)
	}
	rows := make([]shardstock.NewOrder, len(evs))
	fresh := 0
	for i, ev := range evs {
		limit, err := s.limit(ctx, ev.ProductID)
		if err != nil {
			return s.ingestEach(ctx, evs)
		}
		status, err := s.firstStatus(ctx, ev)
		if err != nil {
			return s.ingestEach(ctx, evs) // each as far as it is decided
		}
		rows[i] = shardstock.NewOrder{Event: ev, Limit: limit, Status: status}
		if rows[i].Status == shardstock.StatusAwaitingPayment {
			fresh++
		}
	}
	if err := s.admit(ctx, fresh); err != nil {
		return 0, err
	}
	now := s.cfg.Now()
	written, err := s.store.InsertBatch(ctx, rows, now, now.Add(s.cfg.PayTimeout))
	at := time.Now() // the rows are in (holdLate)
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		s.cfg.Logger.Debug("order batch refused; writing one by one", "orders", len(rows), "err", err)
		return s.ingestEach(ctx, evs)
	}
	wake := false
	for _, w := range written {
		if w != "" {
			wake = wake || w != shardstock.StatusAwaitingPayment
			if s.cfg.OnIngest != nil {
				s.cfg.OnIngest(w)
			}
		}
	}
	if wake {
		s.wake()
	}
	for i, w := range written {
		switch w {
		case "": // the row existed: a repeat, or a second hold elsewhere
			if err := s.Ingest(ctx, evs[i]); err != nil {
				return i, err
			}
		case shardstock.StatusAwaitingPayment:
			s.holdLate(ctx, evs[i], at)
		}
	}
	return len(evs), nil
}

// firstStatus is the status a reservation's order is written with:
// awaiting payment, or failed when the reservation is older than the
// fail-fast age (its unit goes back on sale) or was lost with its shard's
// last writes (LateHolds.Admit). An error: not decided yet.
func (s *Service) firstStatus(ctx context.Context, ev shardstock.ReservationEvent) (shardstock.OrderStatus, error) {
	if age := s.cfg.Now().Sub(ev.At()); age > s.cfg.FailFastAge {
		s.cfg.Logger.Warn("reservation too old: failing it fast", "order", ev.ID, "age", age.Round(time.Second))
		return shardstock.StatusFailed, nil
	}
	if s.cfg.LateHolds != nil {
		return s.cfg.LateHolds.Admit(ctx, ev)
	}
	return shardstock.StatusAwaitingPayment, nil
}

// admit waits until n order creations fit the order-creation rate: the
// cluster's budget when there is one, else (or while it does not answer)
// this process's own limiter.
func (s *Service) admit(ctx context.Context, n int) error {
	for n > 0 {
		if s.cfg.Budget != nil {
			got, err := s.cfg.Budget.TakeBudget(ctx, s.cfg.Rate, s.limiter.Burst(), min(n, s.limiter.Burst()))
			if err == nil {
				s.budgetDown.Store(false)
				if n -= got; n > 0 {
					// Short: wait about as long as the tokens still wanted
					// take to come (1 ms to 100 ms), not one token's worth:
					// each take is a script and, with appendfsync always,
					// an fsync on the shard, and readers taking the few
					// tokens of each millisecond were most of a busy sale's
					// fsyncs there (make bench, 2026-12-02).
					t := time.NewTimer(min(100*time.Millisecond, max(time.Millisecond, time.Duration(float64(n)*float64(time.Second)/s.cfg.Rate))))
					select {
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					case <-t.C:
					}
				}
				continue
			}
			if s.budgetDown.CompareAndSwap(false, true) {
				s.cfg.Logger.Warn("the shared order budget does not answer; this process keeps its own rate meanwhile", "err", err)
			}
		}
		step := min(n, s.limiter.Burst())
		if err := s.limiter.WaitN(ctx, step); err != nil {
			return err
		}
		n -= step // one local step, then the shared budget again
	}
	return nil
}

func (s *Service) ingestEach(ctx context.Context, evs []shardstock.ReservationEvent) (int, error) {
	for i, ev := range evs {
		if err := s.Ingest(ctx, ev); err != nil {
			return i, err
		}
	}
	return len(evs), nil
}

func (s *Service) duplicate(ctx context.Context, o *shardstock.Order, ev shardstock.ReservationEvent) error {
	if o.Shard == ev.Shard {
		return nil
	}
	s.cfg.Logger.Warn("second hold for one reservation: releasing it", "order", ev.ID, "order_shard", o.Shard, "extra_shard", ev.Shard)
	return s.settler.Publish(ctx, shardstock.Settlement{OrderID: ev.ID, ProductID: ev.ProductID,
		UserID: ev.UserID, Shard: ev.Shard, Action: shardstock.ReleaseDuplicate})
}

func (s *Service) limit(ctx context.Context, product string) (int64, error) {
	p, err := s.product(ctx, product)
	if err != nil {
		return 0, err
	}
	return max(p.PerUserLimit, 1), nil
}

// product is product's definition, cached: a definition never changes.
func (s *Service) product(ctx context.Context, product string) (*shardstock.Product, error) {
	if v, ok := s.products.Load(product); ok {
		return v.(*shardstock.Product), nil
	}
	def, err := s.cfg.Catalog.ProductDefinition(ctx, product)
	if err != nil {
		return nil, err
	}
	if def == "" {
		return nil, fmt.Errorf("reservation for %s: %w", product, ErrUnknownProduct)
	}
	var p shardstock.Product
	if err := json.Unmarshal([]byte(def), &p); err != nil {
		return nil, fmt.Errorf("product %s: %w", product, err)
	}
	s.products.Store(product, &p)
	return &p, nil
}

// Get returns order id if user owns it. Without a row yet, a hold of the
// user on some shard answers status pending. Errors: ErrNotFound (no such
// order, or another user's), ErrUnavailable.
func (s *Service) Get(ctx context.Context, id, user string) (*shardstock.Order, error) {
	o, err := s.find(ctx, id)
	if err != nil {
		return nil, err
	}
	if o == nil || o.UserID != user {
		return nil, shardstock.ErrNoOrder
	}
	return o, nil
}

// mayBePending says whether id can be a reservation that has no order row
// yet: order ids are ULIDs, which carry the time they were made, and a
// reservation is written as an order (a failed one, at worst) once it is
// older than the fail-fast age. Any other id is answered from the order
// table alone, so a random id costs one indexed read, not a look at every
// product on every shard.
func (s *Service) mayBePending(id string) bool {
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return false
	}
	age := s.cfg.Now().Sub(ulid.Time(u.Time()))
	return age > -time.Minute && age < 2*s.cfg.FailFastAge
}

// find returns order id whoever owns it: its row, or without one a hold on
// some shard (status pending); nil when neither exists.
func (s *Service) find(ctx context.Context, id string) (*shardstock.Order, error) {
	o, err := s.store.Order(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if o != nil || s.holds == nil || !s.mayBePending(id) {
		return o, nil
	}
	products, err := s.cfg.Catalog.ProductIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	product, holder, shard, found, err := s.holds.FindHold(ctx, products, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if !found {
		return nil, nil
	}
	return &shardstock.Order{ID: id, UserID: holder, ProductID: product, Shard: shard, Status: shardstock.StatusPending}, nil
}

// FailLost fails order id, awaiting payment, whose unit its shard lost
// with its last writes and sold again before the order was written
// (inventory.Resync.HoldLate): a lost sale. Its release (which finds no
// hold) and its claim's give-back follow as for any failed order; an order
// no longer awaiting payment is left as it is.
func (s *Service) FailLost(ctx context.Context, id, user string) error {
	changed, err := s.store.Transition(ctx, id, user, shardstock.StatusFailed, s.cfg.Now())
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if changed {
		s.wake()
	}
	return nil
}

// Pay applies the payment provider's result: success -> paid, fail ->
// cancelled. Repeats are no-ops; a result that contradicts a final state
// (success after cancel, fail after success) is ErrConflict and changes
// nothing. A pending order (no row yet) is ErrConflict: retry shortly.
func (s *Service) Pay(ctx context.Context, id, user string, success bool) (*shardstock.Order, error) {
	to := shardstock.StatusCancelled
	if success {
		to = shardstock.StatusPaid
	}
	return s.transition(ctx, id, user, to)
}

// Cancel cancels an unpaid order; see Pay for repeats and conflicts.
func (s *Service) Cancel(ctx context.Context, id, user string) (*shardstock.Order, error) {
	return s.transition(ctx, id, user, shardstock.StatusCancelled)
}

func (s *Service) transition(ctx context.Context, id, user string, to shardstock.OrderStatus) (*shardstock.Order, error) {
	o, _, err := s.transitionChanged(ctx, id, user, to)
	return o, err
}

// transitionChanged is transition that also says whether this call made
// the change (false for a repeat).
func (s *Service) transitionChanged(ctx context.Context, id, user string, to shardstock.OrderStatus) (*shardstock.Order, bool, error) {
	changed, err := s.store.Transition(ctx, id, user, to, s.cfg.Now())
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if changed {
		s.wake()
	}
	o, err := s.Get(ctx, id, user)
	if err != nil {
		return nil, changed, err
	}
	switch {
	case o.Status == shardstock.StatusPending:
		return o, false, shardstock.Conflict("the order is not written yet; retry in a moment")
	case changed || o.Status == to:
		return o, changed, nil
	case to == shardstock.StatusCancelled && o.Status == shardstock.StatusFailed:
		return o, false, nil // already released
	}
	return o, false, shardstock.Conflict(fmt.Sprintf("the order is %s", o.Status))
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run cancels expired orders and publishes settlements until ctx is done.
// After a failed sweep (database or bus down) it waits longer each time, up
// to 5s, and logs once per wait.
func (s *Service) Run(ctx context.Context) {
	backoff := ha.Backoff{Min: min(2*s.cfg.SweepEvery, 5*time.Second), Max: 5 * time.Second}
	for {
		wait := s.cfg.SweepEvery
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			wait = backoff.Next()
			s.cfg.Logger.Warn("order sweep failed; will retry", "err", err, "backoff", wait)
		} else {
			backoff.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.kick:
			t.Stop()
		}
	}
}

// sweep cancels the orders unpaid past the payment timeout, then publishes
// pending settlements.
func (s *Service) sweep(ctx context.Context) error {
	now := s.cfg.Now()
	n, err := s.store.CancelExpired(ctx, now.Add(-s.cfg.PayTimeout), now)
	if err != nil {
		return err
	}
	if n > 0 {
		s.cfg.Logger.Info("cancelled unpaid orders", "n", n, "pay_timeout", s.cfg.PayTimeout)
	}
	// Claims go back whatever the settlements did: a claim is given back
	// only once its settlement was published, so a settlement that cannot
	// be published now (its shard away) holds up its own claim and no
	// other (a sweep that stopped at the first failed settlement kept
	// every buyer whose order was released refused while one shard was
	// away: found by the model test).
	return errors.Join(s.SettleOnce(ctx), s.ReturnClaims(ctx))
}

// ReturnClaims gives back the per-user limit claims of cancelled and failed
// orders whose settlement was published, so their buyers may buy again. It
// pages through every pending claim: a home shard that does not answer
// (or a product whose shards this coordinator lacks) is tried once per
// sweep, its other claims stay marked for the next one, and the claims of
// every other home are given back meanwhile, as the settlement sweep skips
// a shard that failed. The errors are returned combined.
func (s *Service) ReturnClaims(ctx context.Context) error {
	if s.cfg.Claims == nil {
		return nil
	}
	const batchSize = 200
	var errs *multierror.Error
	failed := map[string]bool{} // homes (or products) that could not take a claim back in this sweep
	for after := ""; ; {
		batch, err := s.store.ClaimsPending(ctx, after, batchSize)
		if err != nil {
			return errors.Join(err, errs.ErrorOrNil())
		}
		if err := s.returnClaims(ctx, batch, failed, &errs); err != nil || len(batch) < batchSize {
			return errors.Join(err, errs.ErrorOrNil())
		}
		after = batch[len(batch)-1].ID
	}
}

// returnClaims gives back the claims of batch, skipping the homes in
// failed and adding to it those that fail now.
func (s *Service) returnClaims(ctx context.Context, batch []shardstock.Order, failed map[string]bool, errs **multierror.Error) error {
	for _, o := range batch {
		where := "product " + o.ProductID
		p, err := s.product(ctx, o.ProductID)
		if err == nil {
			var home int
			if home, err = s.cfg.Claims.HomeOf(p, o.UserID); err == nil {
				where = fmt.Sprintf("shard %d", home)
			}
		}
		if failed[where] {
			continue
		}
		if err == nil {
			err = s.cfg.Claims.GiveBack(ctx, p, o.UserID, o.ID)
		}
		if err != nil {
			*errs = multierror.Append(*errs, fmt.Errorf("order %s: give claim back (%s): %w", o.ID, where, err))
			failed[where] = true
			continue
		}
		if err := s.store.MarkClaimReturned(ctx, o.ID); err != nil {
			return err
		}
	}
	return nil
}

// SettleOnce publishes the settlement of every order marked for it and
// clears the marks of those published. A settlement that cannot be
// published (its shard or the broker is down) keeps its mark for the next
// sweep without holding up the others; the errors are returned combined.
func (s *Service) SettleOnce(ctx context.Context) error {
	const batchSize = 200
	var (
		errs   *multierror.Error
		failed []int // shards whose settlements failed in this sweep
	)
	for {
		batch, err := s.store.Unsettled(ctx, batchSize, failed)
		if err != nil {
			return err
		}
		for _, o := range batch {
			if slices.Contains(failed, o.Shard) {
				continue
			}
			if err := s.settler.Publish(ctx, settlementOf(o)); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("order %s: %w", o.ID, err))
				failed = append(failed, o.Shard)
				continue
			}
			if err := s.store.MarkSettled(ctx, o.ID, o.Status); err != nil {
				return err
			}
		}
		if len(batch) < batchSize {
			return errs.ErrorOrNil()
		}
	}
}

func settlementOf(o shardstock.Order) shardstock.Settlement {
	action := shardstock.Release
	if o.Status == shardstock.StatusPaid {
		action = shardstock.Confirm
	}
	return shardstock.Settlement{OrderID: o.ID, ProductID: o.ProductID, UserID: o.UserID, Shard: o.Shard, Action: action}
}
