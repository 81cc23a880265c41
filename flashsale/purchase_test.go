package flashsale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/spool"
)

func TestReservedEncodesLikeEncodingJSON(t *testing.T) {
	for _, r := range []Reserved{
		{Status: "reserved", OrderID: NewOrderID(), Shard: 0},
		{Status: "reserved", OrderID: "a-b_C9", Shard: 63},
	} {
		want, _ := json.Marshal(r)
		if got := r.encode(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("encode %+v = %s, want %s", r, got, want)
		}
	}
}

// outageReserver answers every purchase ErrUnavailable, in doubt about
// shard 2, and records what was abandoned; an abandon answers held and err.
type outageReserver struct {
	benchReserver
	abandoned []string
	held      int
	err       error
}

func (r *outageReserver) ReserveRetryable(context.Context, *shardstock.Product, string, string, time.Time, uint64) (int, error) {
	return -1, &shardstock.InDoubt{Shards: 1 << 2, Err: shardstock.ErrUnavailable}
}

func (r *outageReserver) Abandon(_ context.Context, _ *shardstock.Product, _, id string, _ uint64) (int, error) {
	r.abandoned = append(r.abandoned, id)
	return r.held, r.err
}

type recordingSpool struct {
	entries []spool.Entry
	full    bool
}

func (s *recordingSpool) Pending(product, user string) int {
	n := 0
	for _, e := range s.entries {
		if e.ProductID == product && e.UserID == user {
			n++
		}
	}
	return n
}

func (s *recordingSpool) Append(e spool.Entry) error {
	if s.full {
		return errors.New("spool full")
	}
	s.entries = append(s.entries, e)
	return nil
}

func (s *recordingSpool) Ticket(string) (spool.Entry, spool.Result, bool) {
	return spool.Entry{}, spool.Result{}, false
}

// A purchase no shard could take is spooled (202) with its claim kept for
// the replay; one whose buyer hung up, or that the spool refuses, is not,
// and its claim is abandoned (given back unless a unit may exist).
func TestUnavailablePurchaseIsSpooledOnlyForABuyerWhoWaits(t *testing.T) {
	cases := []struct {
		name         string
		hungUp, full bool
		wantStatus   int
		wantSpooled  int
		wantAbandon  int
	}{
		{"buyer waits", false, false, 202, 1, 0},
		{"buyer hung up", true, false, 0, 0, 1},
		{"spool full", false, true, 503, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, sp := &outageReserver{held: -1}, &recordingSpool{full: tc.full}
			h := NewHandler(Config{Products: benchCatalog{&shardstock.Product{ID: "lamp", Stock: 10, PerUserLimit: 1}},
				Reserver: res, Identity: HeaderIdentity, Spool: sp})
			ctx, cancel := context.WithCancel(context.Background())
			if tc.hungUp {
				cancel()
			}
			defer cancel()
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://t/api/v1/products/lamp/purchase", nil)
			r.Header.Set("X-User-ID", "alice")
			w := &discard{h: http.Header{}}
			h.Purchases(http.NotFoundHandler()).ServeHTTP(w, r)
			if !tc.hungUp && w.status != tc.wantStatus {
				t.Fatalf("status %d, want %d", w.status, tc.wantStatus)
			}
			if len(sp.entries) != tc.wantSpooled || len(res.abandoned) != tc.wantAbandon {
				t.Fatalf("spooled %d, abandoned %d; want %d, %d", len(sp.entries), len(res.abandoned), tc.wantSpooled, tc.wantAbandon)
			}
			for _, e := range sp.entries {
				if e.Doubt != 1<<2 {
					t.Fatalf("spooled with doubts %b, want the reserver's 100 (the replay resolves them first)", e.Doubt)
				}
			}
		})
	}
}

// soldOutReserver answers every replay sold out: the walk found no unit
// and no hold anywhere.
type soldOutReserver struct{ benchReserver }

func (soldOutReserver) ReserveRetryable(context.Context, *shardstock.Product, string, string, time.Time, uint64) (int, error) {
	return -1, shardstock.ErrSoldOut
}

// replayHandler replays with res, and reads an order table that holds a
// row on shard 1 for any order when row is set (asked records a read).
func replayHandler(p *shardstock.Product, res Reserver, row bool, asked *bool) *Handler {
	return NewHandler(Config{Products: benchCatalog{p}, Reserver: res, Identity: HeaderIdentity, Spool: &recordingSpool{},
		OrderOf: func(_ context.Context, id string) (*shardstock.Order, error) {
			*asked = true
			if !row {
				return nil, nil
			}
			return &shardstock.Order{ID: id, Shard: 1, Status: shardstock.StatusAwaitingPayment}, nil
		}})
}

// A replayed ticket whose shard was in doubt when it was spooled may have
// been reserved there, become an order row, and then lost the hold with the
// shard's data (a crash or wipe): the walk finds nothing, and the order
// table is the truth. The ticket answers reserved when the row exists and
// rejected when it does not; without a doubt the table is not asked.
func TestReplayInDoubtAnswersFromTheOrderTable(t *testing.T) {
	cases := []struct {
		name       string
		doubt      uint64
		row        bool
		wantStatus string
		wantAsked  bool
	}{
		{"in doubt, order written", 1 << 1, true, "reserved", true},
		{"in doubt, no order", 1 << 1, false, "rejected", true},
		{"no doubt", 0, true, "rejected", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			h := replayHandler(&shardstock.Product{ID: "lamp", Stock: 10, PerUserLimit: 1}, soldOutReserver{}, tc.row, &asked)
			r, err := h.Replay(context.Background(), spool.Entry{Ticket: "T1", ProductID: "lamp", UserID: "alice", OrderID: "o1", Doubt: tc.doubt})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.wantStatus || asked != tc.wantAsked {
				t.Fatalf("replay answered %+v (order table asked: %v), want %s (asked: %v)", r, asked, tc.wantStatus, tc.wantAsked)
			}
			if r.Status == "reserved" && (r.OrderID != "o1" || r.Shard != 1) {
				t.Fatalf("reserved %+v, want order o1 on shard 1", r)
			}
			if r.Status == "rejected" && r.Error != "sold_out" {
				t.Fatalf("rejected with %q, want sold_out", r.Error)
			}
		})
	}
}

// A purchase the spool will not take (the buyer is at their allowance, or
// the spool is full) is refused only when its claim was given back: when
// the abandon finds its unit held on a shard (a step whose answer was
// lost), the buyer is told 200 with that reservation; when a shard cannot
// answer, 503 (not known), never limit_reached (invariant 7).
func TestAbandonedPurchaseIsRefusedOnlyWhenNothingIsHeld(t *testing.T) {
	cases := []struct {
		name       string
		full       bool
		held       int
		err        error
		wantStatus int
		wantCode   string
	}{
		{"at allowance, given back", false, -1, nil, 409, "limit_reached"},
		{"at allowance, held on shard 1", false, 1, nil, 200, ""},
		{"at allowance, a shard silent", false, -1, shardstock.ErrUnavailable, 503, "unavailable"},
		{"spool full, given back", true, -1, nil, 503, "unavailable"},
		{"spool full, held on shard 0", true, 0, nil, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := &outageReserver{held: tc.held, err: tc.err}
			sp := &recordingSpool{full: tc.full}
			if !tc.full { // alice already waits in the spool for her one unit
				sp.entries = append(sp.entries, spool.Entry{ProductID: "lamp", UserID: "alice"})
			}
			h := NewHandler(Config{Products: benchCatalog{&shardstock.Product{ID: "lamp", Stock: 10, PerUserLimit: 1}},
				Reserver: res, Identity: HeaderIdentity, Spool: sp})
			r, _ := http.NewRequest(http.MethodPost, "http://t/api/v1/products/lamp/purchase", nil)
			r.Header.Set("X-User-ID", "alice")
			w := httptest.NewRecorder()
			h.Purchases(http.NotFoundHandler()).ServeHTTP(w, r)
			var body map[string]any
			json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != tc.wantStatus || (tc.wantCode != "" && body["error"] != tc.wantCode) {
				t.Fatalf("answered %d %s, want %d %s", w.Code, w.Body.String(), tc.wantStatus, tc.wantCode)
			}
			if len(res.abandoned) != 1 {
				t.Fatalf("abandoned %v, want the one purchase", res.abandoned)
			}
			if tc.wantStatus == 200 && (body["order_id"] != res.abandoned[0] || int(body["shard"].(float64)) != tc.held) {
				t.Fatalf("answered %v, want order %s on shard %d", body, res.abandoned[0], tc.held)
			}
		})
	}
}

// countingReserver answers every replay sold out and counts the walks.
type countingReserver struct {
	benchReserver
	walks int
}

func (r *countingReserver) ReserveRetryable(context.Context, *shardstock.Product, string, string, time.Time, uint64) (int, error) {
	r.walks++
	return -1, shardstock.ErrSoldOut
}

// The kill switch stops the spool's replay too: a paused sale's ticket
// waits, queued, without a walk (the replay answers unavailable, which the
// spool retries). An archived sale's ticket is rejected ended without a
// walk (one would write its deleted keys again), unless a shard in doubt
// made it an order.
func TestReplayObeysPauseAndArchive(t *testing.T) {
	cases := []struct {
		name             string
		paused, archived bool
		doubt            uint64
		row              bool
		wantErr          bool
		wantStatus, code string
		wantWalks        int
	}{
		{"open", false, false, 0, false, false, "rejected", "sold_out", 1},
		{"paused", true, false, 0, false, true, "", "", 0},
		{"archived", false, true, 0, false, false, "rejected", "ended", 0},
		{"archived, in doubt, order written", false, true, 1, true, false, "reserved", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := &countingReserver{}
			h := replayHandler(&shardstock.Product{ID: "lamp", Stock: 10, PerUserLimit: 1, Paused: tc.paused, Archived: tc.archived}, res, tc.row, new(bool))
			r, err := h.Replay(context.Background(), spool.Entry{Ticket: "T1", ProductID: "lamp", UserID: "alice", OrderID: "o1", Doubt: tc.doubt})
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, shardstock.ErrUnavailable)) {
				t.Fatalf("replay error %v, want an error: %v (unavailable)", err, tc.wantErr)
			}
			if r.Status != tc.wantStatus || r.Error != tc.code || res.walks != tc.wantWalks {
				t.Fatalf("replay %+v after %d walks, want %s %s after %d", r, res.walks, tc.wantStatus, tc.code, tc.wantWalks)
			}
		})
	}
}

// missingCatalog defines no product and counts its reads.
type missingCatalog struct{ reads int }

func (c *missingCatalog) Product(context.Context, string) (*shardstock.Product, error) {
	c.reads++
	return nil, shardstock.ErrNotFound
}

// emptyCache holds nothing.
type emptyCache struct{}

func (emptyCache) Cached(string) (*shardstock.Product, bool) { return nil, false }

// With a ProductCache, a purchase of a product not in it costs the buyer
// their own tokens before the catalog is read: one buyer's flood of made-up
// ids reaches the catalog only as often as their limit allows. Without
// one, every purchase reads the catalog.
func TestUncachedProductsCostTheBuyerBeforeTheCatalog(t *testing.T) {
	cases := []struct {
		name      string
		cache     ProductCache
		wantReads int
	}{
		{"with a cache", emptyCache{}, 1},
		{"without a cache", nil, 10},
	}
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cat := &missingCatalog{}
			h := NewHandler(Config{Products: cat, Cache: tc.cache, Reserver: benchReserver{}, Identity: HeaderIdentity,
				Limits: Limits{User: 1}, Now: func() time.Time { return now }})
			for i := range 10 {
				r, _ := http.NewRequest(http.MethodPost, "http://t/api/v1/products/madeup"+string(rune('a'+i))+"/purchase", nil)
				r.Header.Set("X-User-ID", "flooder")
				h.Purchases(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), r)
			}
			if cat.reads != tc.wantReads {
				t.Fatalf("the catalog was read %d times for 10 made-up ids, want %d", cat.reads, tc.wantReads)
			}
		})
	}
}

// Purchases matches the paths of the route the router mounts.
func TestPurchasesMatchesThePurchasePath(t *testing.T) {
	if got := purchasePrefix + ":id" + purchaseSuffix; got != api.PurchasePath {
		t.Fatalf("Purchases matches %s, the router mounts %s", got, api.PurchasePath)
	}
}
