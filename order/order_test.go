package order

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// recordingSettler is a fake settlement bus: it records what was published.
type recordingSettler struct {
	mu   sync.Mutex // guards got
	got  []shardstock.Settlement
	fail atomic.Bool
	// failShard+1, when set: the settlements of that shard fail (its
	// settle stream cannot be reached).
	failShard atomic.Int32
}

func (r *recordingSettler) Publish(_ context.Context, s shardstock.Settlement) error {
	if r.fail.Load() || int(r.failShard.Load()) == s.Shard+1 {
		return errors.New("bus down")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
	return nil
}

func (r *recordingSettler) all() []shardstock.Settlement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]shardstock.Settlement(nil), r.got...)
}

type harness struct {
	t       *testing.T
	store   *sqlstore.Store
	svc     *Service
	settler *recordingSettler
	now     atomic.Int64
}

func newHarness(t *testing.T, store *sqlstore.Store, limit int64) *harness {
	h := &harness{t: t, store: store, settler: &recordingSettler{}}
	h.now.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())
	h.svc = NewService(Config{Store: store.Orders, Catalog: store.Catalog, Settler: h.settler, PayTimeout: 15 * time.Minute, FailFastAge: 30 * time.Minute,
		Rate: 1e6, Now: func() time.Time { return time.UnixMilli(h.now.Load()) }})
	def := fmt.Sprintf(`{"id":"p","stock":100,"per_user_limit":%d}`, limit)
	if _, _, err := store.Catalog.SaveProduct(context.Background(), "p", def); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) event(id, user string, shard int) shardstock.ReservationEvent {
	return shardstock.ReservationEvent{ID: id, UserID: user, ProductID: "p", Shard: shard, AtMS: h.now.Load()}
}

func (h *harness) ingest(ev shardstock.ReservationEvent) {
	h.t.Helper()
	if err := h.svc.Ingest(context.Background(), ev); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) status(id string) shardstock.OrderStatus {
	h.t.Helper()
	o, err := h.store.Orders.Order(context.Background(), id)
	if err != nil || o == nil {
		h.t.Fatalf("order %s: %v %v", id, o, err)
	}
	return o.Status
}

func (h *harness) settle() []shardstock.Settlement {
	h.t.Helper()
	if err := h.svc.SettleOnce(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return h.settler.all()
}

func forEachStore(t *testing.T, f func(t *testing.T, s *sqlstore.Store)) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) { f(t, s) })
	}
}

func TestIngestIsIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		ev := h.event("r1", "alice", 0)
		h.ingest(ev)
		h.ingest(ev) // the same message again
		counts, _ := s.Orders.CountByStatus(context.Background(), "p")
		if counts[shardstock.StatusAwaitingPayment] != 1 || len(counts) != 1 {
			t.Fatalf("counts %v, want one awaiting order", counts)
		}
		if got := h.settle(); len(got) != 0 {
			t.Fatalf("a repeat published %v", got)
		}
		// The same reservation id from another shard: that hold is released,
		// the order stays on its shard.
		dup := ev
		dup.Shard = 2
		h.ingest(dup)
		got := h.settler.all()
		if len(got) != 1 || got[0].Shard != 2 || got[0].Action != shardstock.ReleaseDuplicate {
			t.Fatalf("duplicate hold: %v", got)
		}
		if o, _ := s.Orders.Order(context.Background(), "r1"); o.Shard != 0 {
			t.Fatalf("order moved to shard %d", o.Shard)
		}
	})
}

func TestPerUserLimitLastGuard(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 2)
		for i := 1; i <= 3; i++ {
			h.ingest(h.event(fmt.Sprintf("r%d", i), "bob", i%3))
		}
		if h.status("r1") != shardstock.StatusAwaitingPayment || h.status("r2") != shardstock.StatusAwaitingPayment || h.status("r3") != shardstock.StatusFailed {
			t.Fatalf("statuses %s %s %s, want the third failed", h.status("r1"), h.status("r2"), h.status("r3"))
		}
		got := h.settle()
		if len(got) != 1 || got[0].OrderID != "r3" || got[0].Action != shardstock.Release {
			t.Fatalf("settlements %v, want r3 released", got)
		}
		// A cancelled order frees its seq: the buyer may hold two again.
		if _, err := h.svc.Cancel(context.Background(), "r1", "bob"); err != nil {
			t.Fatal(err)
		}
		h.ingest(h.event("r4", "bob", 0))
		if h.status("r4") != shardstock.StatusAwaitingPayment {
			t.Fatalf("after a cancel the buyer's new order is %s", h.status("r4"))
		}
	})
}

func TestConcurrentOrdersOfOneBuyer(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 3)
		var wg sync.WaitGroup
		for i := 0; i < 12; i++ {
			wg.Go(func() { h.ingest(h.event(fmt.Sprintf("c%d", i), "carol", i%3)) })
		}
		wg.Wait()
		counts, _ := s.Orders.CountByStatus(context.Background(), "p")
		if counts[shardstock.StatusAwaitingPayment] != 3 || counts[shardstock.StatusFailed] != 9 {
			t.Fatalf("counts %v, want 3 awaiting and 9 failed", counts)
		}
	})
}

func TestPayCancelTransitions(t *testing.T) {
	type step struct {
		op      string // success | fail | cancel
		wantErr error
		status  shardstock.OrderStatus
	}
	cases := []struct {
		name   string
		steps  []step
		settle shardstock.Action // the one settlement action expected
	}{
		{"two successes", []step{{"success", nil, "paid"}, {"success", nil, "paid"}}, shardstock.Confirm},
		{"fail after success", []step{{"success", nil, "paid"}, {"fail", shardstock.ErrConflict, "paid"}}, shardstock.Confirm},
		{"cancel after success", []step{{"success", nil, "paid"}, {"cancel", shardstock.ErrConflict, "paid"}}, shardstock.Confirm},
		{"success after fail", []step{{"fail", nil, "cancelled"}, {"success", shardstock.ErrConflict, "cancelled"}}, shardstock.Release},
		{"two fails", []step{{"fail", nil, "cancelled"}, {"fail", nil, "cancelled"}}, shardstock.Release},
		{"cancel then fail", []step{{"cancel", nil, "cancelled"}, {"fail", nil, "cancelled"}}, shardstock.Release},
	}
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		for n, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				h := newHarness(t, s, 100)
				id := fmt.Sprintf("%s-%d", rand.Text()[:8], n)
				h.ingest(h.event(id, "dave", 1))
				for _, st := range tc.steps {
					var o *shardstock.Order
					var err error
					switch st.op {
					case "success", "fail":
						o, err = h.svc.Pay(context.Background(), id, "dave", st.op == "success")
					default:
						o, err = h.svc.Cancel(context.Background(), id, "dave")
					}
					if !errors.Is(err, st.wantErr) || o == nil || o.Status != st.status {
						t.Fatalf("%s: %v %v, want %v %s", st.op, o, err, st.wantErr, st.status)
					}
				}
				got := h.settle()
				var mine []shardstock.Settlement
				for _, g := range got {
					if g.OrderID == id {
						mine = append(mine, g)
					}
				}
				if len(mine) != 1 || mine[0].Action != tc.settle || mine[0].Shard != 1 {
					t.Fatalf("settlements %v, want one %s on shard 1", mine, tc.settle)
				}
			})
		}
	})
}

func TestCancelRacingPayEndsInOneState(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 100)
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("race%d", i)
			h.ingest(h.event(id, "erin", 0))
			var wg sync.WaitGroup
			var paid, cancelled atomic.Int32
			wg.Go(func() {
				if _, err := h.svc.Pay(context.Background(), id, "erin", true); err == nil {
					paid.Add(1)
				}
			})
			wg.Go(func() {
				if _, err := h.svc.Cancel(context.Background(), id, "erin"); err == nil {
					cancelled.Add(1)
				}
			})
			wg.Wait()
			st := h.status(id)
			if paid.Load()+cancelled.Load() != 1 || (st == "paid") != (paid.Load() == 1) {
				t.Fatalf("%s: paid %d cancelled %d, final %s", id, paid.Load(), cancelled.Load(), st)
			}
		}
		settled := map[string]int{}
		for _, g := range h.settle() {
			settled[g.OrderID]++
		}
		if len(settled) != 20 {
			t.Fatalf("%d orders settled, want 20", len(settled))
		}
	})
}

func TestOwnerOnly(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		h.ingest(h.event("mine", "frank", 0))
		if _, err := h.svc.Get(context.Background(), "mine", "mallory"); !errors.Is(err, shardstock.ErrNotFound) {
			t.Fatalf("another user's read: %v", err)
		}
		if _, err := h.svc.Pay(context.Background(), "mine", "mallory", false); !errors.Is(err, shardstock.ErrNotFound) {
			t.Fatalf("another user's pay: %v", err)
		}
		if h.status("mine") != shardstock.StatusAwaitingPayment {
			t.Fatal("another user changed the order")
		}
	})
}

func TestPaymentTimeoutAndFailFast(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 5)
		h.ingest(h.event("slow", "gina", 0))
		h.ingest(h.event("quick", "gina", 1))
		h.svc.Pay(context.Background(), "quick", "gina", true)
		h.now.Add((15*time.Minute + time.Second).Milliseconds())
		if err := h.svc.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h.status("slow") != shardstock.StatusCancelled || h.status("quick") != shardstock.StatusPaid {
			t.Fatalf("after the timeout: slow %s quick %s", h.status("slow"), h.status("quick"))
		}
		old := h.event("old", "gina", 2)
		old.AtMS -= (31 * time.Minute).Milliseconds()
		h.ingest(old)
		if h.status("old") != shardstock.StatusFailed {
			t.Fatalf("an old reservation became %s", h.status("old"))
		}
		actions := map[string]shardstock.Action{}
		for _, g := range h.settle() {
			actions[g.OrderID] = g.Action
		}
		want := map[string]shardstock.Action{"slow": shardstock.Release, "quick": shardstock.Confirm, "old": shardstock.Release}
		if fmt.Sprint(actions) != fmt.Sprint(want) {
			t.Fatalf("settlements %v, want %v", actions, want)
		}
	})
}

func TestSettlementsWaitForTheBus(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 5)
		h.ingest(h.event("w1", "hank", 0))
		h.svc.Pay(context.Background(), "w1", "hank", true)
		h.settler.fail.Store(true)
		if err := h.svc.SettleOnce(context.Background()); err == nil {
			t.Fatal("a failed publish was not reported")
		}
		h.settler.fail.Store(false)
		if got := h.settle(); len(got) != 1 || got[0].OrderID != "w1" {
			t.Fatalf("after the bus returned: %v", got)
		}
		if got := h.settle(); len(got) != 1 {
			t.Fatalf("settled again: %v", got)
		}
	})
}

// A batch decides every reservation as Ingest would alone: the per-user
// limit's guard within the batch, fail-fast, repeats and second holds.
func TestIngestBatchDecidesLikeIngest(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		h.ingest(h.event("old1", "dave", 1))
		stale := h.event("stale", "erin", 0)
		stale.AtMS -= (31 * time.Minute).Milliseconds()
		second := h.event("old1", "dave", 2) // the same reservation held on another shard
		batch := []shardstock.ReservationEvent{
			h.event("b1", "frank", 0), h.event("b2", "frank", 1), // limit 1: b2 fails
			stale, h.event("old1", "dave", 1), second, h.event("b3", "gina", 2),
		}
		if n, err := h.svc.IngestBatch(context.Background(), batch); n != len(batch) || err != nil {
			t.Fatalf("IngestBatch = %d, %v", n, err)
		}
		want := map[string]shardstock.OrderStatus{"b1": shardstock.StatusAwaitingPayment, "b2": shardstock.StatusFailed,
			"stale": shardstock.StatusFailed, "old1": shardstock.StatusAwaitingPayment, "b3": shardstock.StatusAwaitingPayment}
		for id, st := range want {
			if got := h.status(id); got != st {
				t.Errorf("%s is %s, want %s", id, got, st)
			}
		}
		if o, _ := s.Orders.Order(context.Background(), "old1"); o.Shard != 1 {
			t.Fatalf("old1 moved to shard %d", o.Shard)
		}
		released := map[string]int{}
		for _, st := range h.settle() {
			released[st.OrderID+" "+string(st.Action)] = st.Shard
		}
		if len(released) != 3 || released["old1 release_duplicate"] != 2 ||
			released["b2 release"] != 1 || released["stale release"] != 0 {
			t.Fatalf("settlements %v, want the second hold of old1, b2 and stale released", released)
		}
	})
}

func TestIngestBatchStopsAtAnUnknownProduct(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		bad := h.event("x2", "ivan", 0)
		bad.ProductID = "nosuch"
		n, err := h.svc.IngestBatch(context.Background(), []shardstock.ReservationEvent{h.event("x1", "hana", 0), bad, h.event("x3", "jo", 0)})
		if n != 1 || !errors.Is(err, ErrUnknownProduct) {
			t.Fatalf("IngestBatch = %d, %v; want 1 and ErrUnknownProduct", n, err)
		}
		if h.status("x1") != shardstock.StatusAwaitingPayment {
			t.Fatal("the reservation before the unknown product was not written")
		}
	})
}

// Overlapping batches of one buyer, from concurrent consumers: the limit's
// last guard holds whether a batch commits whole or falls back row by row.
func TestConcurrentBatchesOfOneBuyer(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 3)
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				var evs []shardstock.ReservationEvent
				for i := 0; i < 6; i++ {
					evs = append(evs, h.event(fmt.Sprintf("k%d-%d", g, i), "kim", i%3))
				}
				evs = append(evs, evs[g]) // and a repeat within the batch
				if n, err := h.svc.IngestBatch(context.Background(), evs); n != len(evs) || err != nil {
					t.Errorf("batch %d: %d, %v", g, n, err)
				}
			})
		}
		wg.Wait()
		counts, _ := s.Orders.CountByStatus(context.Background(), "p")
		if counts[shardstock.StatusAwaitingPayment] != 3 || counts[shardstock.StatusFailed] != 21 {
			t.Fatalf("counts %v, want 3 awaiting and 21 failed", counts)
		}
	})
}

// homeShards is a fake of the buyers' home shards for claim give-backs:
// down makes every give-back fail, as a home that does not answer;
// zeroDown only those of buyers homed on shard 0 (ids starting "zero").
type homeShards struct {
	mu       sync.Mutex // guards returned
	returned []string
	down     atomic.Bool
	zeroDown atomic.Bool
	asked    atomic.Int64 // give-backs tried
}

func (h *homeShards) HomeOf(_ *shardstock.Product, user string) (int, error) {
	if strings.HasPrefix(user, "zero") {
		return 0, nil
	}
	return 1, nil
}

func (h *homeShards) GiveBack(_ context.Context, p *shardstock.Product, user, id string) error {
	h.asked.Add(1)
	if home, _ := h.HomeOf(p, user); h.down.Load() || (home == 0 && h.zeroDown.Load()) {
		return errors.New("home shard down")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.returned = append(h.returned, id)
	return nil
}

// The claims of cancelled and failed orders go back to their buyers'
// homes after the settlement is published, durably: a home that does not
// answer keeps the give-back in the order table for the next sweep, and no
// settlement waits for it (settlements are published first, whatever the
// homes do).
func TestClaimsOfReleasedOrdersGoBackDurably(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		homes := &homeShards{}
		h.svc.cfg.Claims = homes
		h.ingest(h.event("c1", "carl", 0))
		h.ingest(h.event("p1", "pia", 1))
		h.ingest(h.event("f1", "carl", 2)) // over the limit: failed
		if _, err := h.svc.Cancel(context.Background(), "c1", "carl"); err != nil {
			t.Fatal(err)
		}
		h.svc.Pay(context.Background(), "p1", "pia", true)
		homes.down.Store(true)
		if err := h.svc.sweep(context.Background()); err == nil {
			t.Fatal("give-backs to a down home were not reported")
		}
		if got := h.settler.all(); len(got) != 3 {
			t.Fatalf("settlements published with the homes down: %v, want all 3", got)
		}
		if n, _ := s.Orders.ClaimsPending(context.Background(), "", 10); len(n) != 2 {
			t.Fatalf("pending give-backs: %v, want c1 and f1", n)
		}
		// A new store on the same database (another coordinator, or this one
		// restarted) finds them: the queue is the order table.
		homes.down.Store(false)
		other := NewService(Config{Store: s.Orders, Catalog: s.Catalog, Settler: h.settler, Claims: homes, Now: h.svc.cfg.Now})
		if err := other.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(sorted(homes.returned), ","); got != "c1,f1" {
			t.Fatalf("claims given back: %s, want c1,f1 (never the paid p1)", got)
		}
		if n, _ := s.Orders.ClaimsPending(context.Background(), "", 10); len(n) != 0 {
			t.Fatalf("still pending after the homes returned: %v", n)
		}
	})
}

// TestClaimGiveBacksPassADownHome (issue 40, break 5): 220 cancelled
// orders of buyers homed on a shard that does not answer, more than one
// page of the sweep, sort before 20 of buyers homed on a shard that does.
// The sweep gives the 20 back in its first pass (a sweep that stopped at
// its first page, or after a failure, left them holding their buyers'
// limit for as long as the other home was down), tries the down home once
// rather than 220 times, and keeps its 220 for later.
func TestClaimGiveBacksPassADownHome(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		homes := &homeShards{}
		h.svc.cfg.Claims = homes
		var evs []shardstock.ReservationEvent
		for k := range 220 {
			evs = append(evs, h.event(fmt.Sprintf("a%03d", k), fmt.Sprintf("zero%03d", k), 0))
		}
		for k := range 20 {
			evs = append(evs, h.event(fmt.Sprintf("b%03d", k), fmt.Sprintf("one%03d", k), 1))
		}
		if n, err := h.svc.IngestBatch(context.Background(), evs); n != len(evs) || err != nil {
			t.Fatalf("ingest: %d, %v", n, err)
		}
		for _, ev := range evs {
			if _, err := h.svc.Cancel(context.Background(), ev.ID, ev.UserID); err != nil {
				t.Fatal(err)
			}
		}
		homes.zeroDown.Store(true)
		if err := h.svc.sweep(context.Background()); err == nil || !strings.Contains(err.Error(), "shard 0") {
			t.Fatalf("the sweep with shard 0 down: %v, want its failure reported", err)
		}
		homes.mu.Lock()
		got := len(homes.returned)
		homes.mu.Unlock()
		if got != 20 {
			t.Fatalf("claims given back with shard 0 down: %d, want the 20 of shard 1's buyers", got)
		}
		if a := homes.asked.Load(); a != 21 {
			t.Fatalf("give-backs tried: %d, want 21 (shard 0 once, then skipped)", a)
		}
		if n, _ := s.Orders.ClaimsPending(context.Background(), "", 500); len(n) != 220 {
			t.Fatalf("still pending: %d, want the 220 of shard 0's buyers", len(n))
		}
		homes.zeroDown.Store(false)
		if err := h.svc.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.Orders.ClaimsPending(context.Background(), "", 500); len(n) != 0 {
			t.Fatalf("still pending after shard 0 returned: %d", len(n))
		}
	})
}

// TestClaimsGoBackWhileASettlementCannot: a settlement that cannot be
// published (its shard away) holds up its own claim only. The sweep
// stopped at the failed settlement and gave no claim back at all while
// one shard was away (found by the model test).
func TestClaimsGoBackWhileASettlementCannot(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		homes := &homeShards{}
		h.svc.cfg.Claims = homes
		h.ingest(h.event("a", "one-a", 0))
		h.ingest(h.event("b", "one-b", 1))
		if _, err := h.svc.Cancel(context.Background(), "a", "one-a"); err != nil {
			t.Fatal(err)
		}
		if err := h.svc.SettleOnce(context.Background()); err != nil { // a's settlement published
			t.Fatal(err)
		}
		if _, err := h.svc.Cancel(context.Background(), "b", "one-b"); err != nil {
			t.Fatal(err)
		}
		h.settler.failShard.Store(2) // shard 1's settle stream away
		if err := h.svc.sweep(context.Background()); err == nil {
			t.Fatal("the failed settlement was not reported")
		}
		homes.mu.Lock()
		got := strings.Join(homes.returned, ",")
		homes.mu.Unlock()
		if got != "a" {
			t.Fatalf("claims given back while shard 1's settlement failed: %q, want a's", got)
		}
	})
}

func sorted(xs []string) []string {
	out := append([]string(nil), xs...)
	slices.Sort(out)
	return out
}

// Ids that differ only in case are different ids, in every store, as they
// are in Redis (issue: MariaDB compared them case-insensitively): "bob" and
// "Bob" both hold a unit under a limit of 1, "BOB" cannot cancel bob's
// order, and an order id in another case is not found.
func TestIdsAreComparedExactly(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 1)
		h.ingest(h.event("o-bob", "bob", 0))
		h.ingest(h.event("o-Bob", "Bob", 1))
		if a, b := h.status("o-bob"), h.status("o-Bob"); a != shardstock.StatusAwaitingPayment || b != shardstock.StatusAwaitingPayment {
			t.Fatalf("bob %s, Bob %s: both must await payment (two buyers, limit 1 each)", a, b)
		}
		if _, err := h.svc.Cancel(context.Background(), "o-bob", "BOB"); !errors.Is(err, shardstock.ErrNotFound) {
			t.Fatalf("BOB cancelling bob's order: %v, want ErrNotFound", err)
		}
		if h.status("o-bob") != shardstock.StatusAwaitingPayment {
			t.Fatal("BOB's cancel changed bob's order")
		}
		if o, err := s.Orders.Order(context.Background(), "O-BOB"); err != nil || o != nil {
			t.Fatalf("order id in another case: %v %v", o, err)
		}
	})
}

// The payment window starts when the order is written — when the buyer can
// pay — not when the unit was reserved: a reservation that reached the
// order table 20 minutes late (a database outage longer than the 15-minute
// payment timeout, shorter than the 30-minute fail-fast age) is payable for
// a whole window, shown to the buyer as pay_by (issue: the order pipeline
// under partial outages, item 3).
func TestPaymentWindowStartsWhenTheOrderIsWritten(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 5)
		late := h.event("late", "lou", 0)
		late.AtMS -= (20 * time.Minute).Milliseconds()
		h.ingest(late)
		if err := h.svc.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		o, err := h.svc.Get(context.Background(), "late", "lou")
		if err != nil || o.Status != shardstock.StatusAwaitingPayment {
			t.Fatalf("written late, swept at once: %+v %v, want awaiting payment", o, err)
		}
		if want := time.UnixMilli(h.now.Load()).Add(15 * time.Minute); !o.PayBy.Equal(want) {
			t.Fatalf("pay_by %v, want %v (written + the payment timeout)", o.PayBy, want)
		}
		h.now.Add((15*time.Minute + time.Second).Milliseconds())
		if err := h.svc.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h.status("late") != shardstock.StatusCancelled {
			t.Fatalf("after its window: %s, want cancelled", h.status("late"))
		}
	})
}
