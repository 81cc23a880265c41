package inventory

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

// TestResyncThatDisagreesKeepsTheShardFenced: a transfer log that says more
// units left shard 0 than the shard has to take again is a disagreement
// beyond a lost second: the resync takes nothing, answers ErrResyncBlocked,
// and the shard overview says why; once the log and the shard agree again
// the next resync clears it.
func TestResyncThatDisagreesKeepsTheShardFenced(t *testing.T) {
	f := newFixture(t)
	f.define("odd", 30, 0) // 10 per shard
	ctx := context.Background()
	tr, err := f.store.Transfers.StartTransfer(ctx, shardstock.Transfer{ID: "bogus", ProductID: "odd", From: 0, To: 1, Wanted: 50})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Transfers.MarkTransfer(ctx, tr.ID, "out", 50); err != nil {
		t.Fatal(err)
	}
	err = f.resync.Shard(ctx, 0)
	if !errors.Is(err, ErrResyncBlocked) {
		t.Fatalf("resync: %v, want ErrResyncBlocked", err)
	}
	why := f.resync.Problem(0)
	if !strings.Contains(why, "transfer bogus moved 50 units off shard 0") {
		t.Fatalf("the reason: %q", why)
	}
	if sh := f.views.Shards(ctx)[0]; sh.ResyncProblem != why {
		t.Fatalf("the overview: %+v", sh)
	}
	if c := f.counters(0, "odd"); c.Alloc != 10 || c.Salable != 10 {
		t.Fatalf("the blocked replay moved units: %+v", c)
	}
	if err := f.store.Transfers.MarkTransfer(ctx, tr.ID, "out", 4); err != nil { // the log put right
		t.Fatal(err)
	}
	if err := f.resync.Shard(ctx, 0); err != nil {
		t.Fatalf("resync after the log was put right: %v", err)
	}
	if why := f.resync.Problem(0); why != "" {
		t.Fatalf("the reason stayed: %q", why)
	}
	if alloc, _ := f.totals("odd"); alloc != 26 {
		t.Fatalf("Σ alloc %d, want 26 (4 units in flight)", alloc)
	}
	if _, err := f.stock.Resume(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if alloc, _ := f.totals("odd"); alloc != 30 {
		t.Fatalf("Σ alloc %d after the transfer finished, stock 30", alloc)
	}
}

// TestHoldLateWaitsForTheFenceAndSettles (issue 40, break 6): an order
// written while its shard is being resynced is checked once the fence
// opens (the resync may have read the live orders before it was written);
// an order reserved after the resync (past the slack) is never looked at;
// and a hold put back for an order cancelled meanwhile is released at
// once, not left locked.
func TestHoldLateWaitsForTheFenceAndSettles(t *testing.T) {
	f := newFixture(t)
	f.define("late", 30, 0) // 10 per shard
	ctx := context.Background()
	synced := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if err := f.store.ShardLog.RecordSynced(ctx, 0, "run-after-crash", synced); err != nil {
		t.Fatal(err)
	}
	var fenced atomic.Bool
	fenced.Store(true)
	r := f.memResync(func(c *ResyncConfig) { c.Fenced = func(int) bool { return fenced.Load() } })
	order := func(id, user string, reserved time.Time, status shardstock.OrderStatus) shardstock.Order {
		t.Helper()
		ev := shardstock.ReservationEvent{ID: id, UserID: user, ProductID: "late", Shard: 0, AtMS: reserved.UnixMilli()}
		if _, err := f.store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, synced, synced.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if status != shardstock.StatusAwaitingPayment {
			if _, err := f.store.Orders.Transition(ctx, id, user, status, synced); err != nil {
				t.Fatal(err)
			}
		}
		return shardstock.Order{ID: id, UserID: user, ProductID: "late", Shard: 0, Status: shardstock.StatusAwaitingPayment}
	}
	before := synced.Add(-time.Second)
	r.HoldLate(ctx, order("o-live", "ann", before, shardstock.StatusAwaitingPayment), before, time.Now())
	r.HoldLate(ctx, order("o-gone", "ben", before, shardstock.StatusCancelled), before, time.Now())
	r.HoldLate(ctx, order("o-new", "cat", synced.Add(2*lateSlack), shardstock.StatusAwaitingPayment), synced.Add(2*lateSlack), time.Now())
	if c := f.counters(0, "late"); c.Locked != 0 || c.Salable != 10 {
		t.Fatalf("holds put back on a fenced shard: %+v", c)
	}
	r.RecheckLate(ctx)
	if c := f.counters(0, "late"); c.Locked != 0 {
		t.Fatalf("holds put back while still fenced: %+v", c)
	}
	fenced.Store(false)
	r.RecheckLate(ctx)
	c := f.counters(0, "late")
	if c.Locked != 1 || c.Salable != 9 || c.Sold != 0 {
		t.Fatalf("after the fence opened: %+v, want o-live's hold back (1 locked, 9 salable) and o-gone's released", c)
	}
	if r.times.deferred() != nil {
		t.Fatal("orders still kept after their shard answered")
	}
}

// TestHoldLateFailsAnOrderWhoseUnitWasSoldAgain: an order written after
// its shard's resync whose unit the shard sold again meanwhile (no
// salable unit left there) is failed, a sale lost with the shard's last
// writes, rather than left standing for a unit nobody holds.
func TestHoldLateFailsAnOrderWhoseUnitWasSoldAgain(t *testing.T) {
	f := newFixture(t)
	f.define("gone", 30, 10) // shard 0's 10 units all sold
	ctx := context.Background()
	synced := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if err := f.store.ShardLog.RecordSynced(ctx, 0, "run-after-crash", synced); err != nil {
		t.Fatal(err)
	}
	var failed []string
	r := f.memResync(func(c *ResyncConfig) {
		c.FailLost = func(_ context.Context, id, user string) error { failed = append(failed, id+"/"+user); return nil }
	})
	r.HoldLate(ctx, shardstock.Order{ID: "o-lost", UserID: "dan", ProductID: "gone", Shard: 0, Status: shardstock.StatusAwaitingPayment}, synced.Add(-time.Second), time.Now())
	if len(failed) != 1 || failed[0] != "o-lost/dan" {
		t.Fatalf("orders failed: %v, want o-lost of dan", failed)
	}
	if c := f.counters(0, "gone"); c.Salable != 0 || c.Locked != 10 {
		t.Fatalf("shard 0 after a late order with no unit: %+v", c)
	}
}

// TestResyncFailsAnOrderWhoseUnitIsGone: a shard's crash took the hold of
// an order awaiting payment, and the shard then sold or moved every unit
// it had (here: all 10 of shard 0 sold to others). Its resync cannot put
// the hold back: the order fails (a sale lost with the shard's last
// writes), and the shard comes back in line. (It was a disagreement, and
// the shard stayed fenced for good: found by the model test's fast mode,
// an order a stalled writer wrote after a crash of its shard, whose unit a
// rebalance moved off meanwhile.) A paid order in the same place is left
// to an operator: the shard stays fenced.
func TestResyncFailsAnOrderWhoseUnitIsGone(t *testing.T) {
	f := newFixture(t)
	f.define("gone", 30, 10) // shard 0's 10 units all sold (holds of u0..u9)
	ctx := context.Background()
	now := time.Now()
	insert := func(id, user string) {
		ev := shardstock.ReservationEvent{ID: id, UserID: user, ProductID: "gone", Shard: 0, AtMS: now.UnixMilli()}
		if _, err := f.store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	insert("o-lost", "dan")
	var failed []string
	r := f.memResync(func(c *ResyncConfig) {
		c.ShardLog = nil // orders written late are not checked
		c.FailLost = func(ctx context.Context, id, user string) error {
			failed = append(failed, id+"/"+user)
			_, err := f.store.Orders.Transition(ctx, id, user, shardstock.StatusFailed, now)
			return err
		}
	})
	if err := r.Shard(ctx, 0); err != nil {
		t.Fatalf("resync with an order whose unit is gone: %v, want the shard back in line", err)
	}
	if len(failed) != 1 || failed[0] != "o-lost/dan" {
		t.Fatalf("orders failed: %v, want o-lost of dan", failed)
	}
	if c := f.counters(0, "gone"); c.Salable != 0 || c.Locked != 10 {
		t.Fatalf("shard 0 after the resync: %+v, want it untouched", c)
	}

	insert("o-paid", "eve")
	if _, err := f.store.Orders.Transition(ctx, "o-paid", "eve", shardstock.StatusPaid, now); err != nil {
		t.Fatal(err)
	}
	if err := r.Shard(ctx, 0); err == nil || !strings.Contains(err.Error(), "no salable unit left") {
		t.Fatalf("resync with a paid order whose unit is gone: %v, want the disagreement kept for an operator", err)
	}
}

// TestAnAdditionWhoseShardLostItsDataCounts: a stock addition whose
// coordinator died after its units reached their shard, and the shard then
// lost its data (a wipe), is finished by a resume as added: its units may
// have been sold before the wipe. (It was marked reversed, as never added:
// the stock stood below what was sold, 7 orders on a stock of 5; found by
// the model test's fast mode.)
func TestAnAdditionWhoseShardLostItsDataCounts(t *testing.T) {
	f := newFixture(t)
	f.define("wiped", 30, 0)
	ctx := context.Background()
	f.crashAt("in")
	if _, err := f.stock.ChangeStock(ctx, "wiped", 6, 0, "add-6"); err == nil {
		t.Fatal("the addition did not stop after its units arrived")
	}
	f.crashAt("")
	alloc, _ := f.totals("wiped")
	if alloc <= 30 {
		t.Fatalf("Σ alloc %d: no added unit reached its shard", alloc)
	}
	if err := f.mem.sell(0, "wiped", alloc-20); err != nil { // shard 0's 10 and whatever the addition gave it
		t.Fatal(err)
	}
	for i := range 3 {
		f.mem.wipe(i)
	}
	if _, err := f.stock.Resume(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.views.Status(ctx, "wiped"); st.Stock != 36 {
		t.Fatalf("stock %d after the addition's shards lost their data, want 36 (its units may have been sold)", st.Stock)
	}
}

// TestResyncCountsAnAdditionUnderWay: a stock addition whose coordinator
// died after its units reached their shard, before it was marked done, is
// finished by any coordinator (RunResume) once its shard answers; the
// resync of that very shard (fenced: the resume waits for it) must not
// read the units as past the stock, or the shard stays fenced for good
// (found by the model test's fast mode).
func TestResyncCountsAnAdditionUnderWay(t *testing.T) {
	f := newFixture(t)
	f.define("more", 30, 0)
	ctx := context.Background()
	f.crashAt("in")
	if _, err := f.stock.ChangeStock(ctx, "more", 6, 0, "add-6"); err == nil {
		t.Fatal("the addition did not stop after its units arrived")
	}
	f.crashAt("")
	if alloc, _ := f.totals("more"); alloc <= 30 {
		t.Fatalf("Σ alloc %d: no added unit reached its shard", alloc)
	}
	for i := range 3 {
		if err := f.resync.Shard(ctx, i); err != nil {
			t.Fatalf("resync of shard %d with an addition under way: %v", i, err)
		}
	}
	if _, err := f.stock.Resume(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.views.Status(ctx, "more"); st.Stock != 36 {
		t.Fatalf("stock %d after the addition finished, want 36", st.Stock)
	}
}

// TestARemovalWhoseShardLostItsDataFinishes: a stock removal whose
// coordinator died between its steps, and whose shard then lost its data (a
// wipe), is finished by a resume: as it stood in SQL when its step off the
// shard was recorded there, as removing nothing when it was not (the units
// it may have taken are given up with the shard's data, and some may have
// been sold since). It used to be retried against the shard for good
// ("product not on this shard"), and the product's archive, which waits for
// every transfer, never came (found by the model test's fast mode).
func TestARemovalWhoseShardLostItsDataFinishes(t *testing.T) {
	for _, tc := range []struct {
		step  string
		stood bool // the wiped shard's part counts as removed
	}{
		{"marked", true},    // SQL has the count: it stands
		{"recorded", false}, // nothing known taken: nothing removed there
	} {
		t.Run("died after "+tc.step, func(t *testing.T) {
			f := newFixture(t)
			f.define("gone", 30, 0)
			ctx := context.Background()
			f.crashAt(tc.step)
			if _, err := f.stock.ChangeStock(ctx, "gone", 0, 6, "remove-6"); err == nil {
				t.Fatal("the removal did not stop after its step")
			}
			f.crashAt("")
			open, err := f.store.Transfers.UnfinishedTransfers(ctx)
			if err != nil || len(open) == 0 {
				t.Fatalf("unfinished transfers: %+v %v", open, err)
			}
			wiped := open[0]
			f.mem.wipe(wiped.From)
			if _, err := f.stock.Resume(ctx, ""); err != nil {
				t.Fatalf("resume after the removal's shard lost its data: %v", err)
			}
			if left, _ := f.store.Transfers.UnfinishedTransfers(ctx); len(left) != 0 {
				t.Fatalf("still unfinished: %+v", left)
			}
			st, err := f.views.Status(ctx, "gone")
			if err != nil {
				t.Fatal(err)
			}
			want := int64(30 - 6)
			if !tc.stood {
				want += wiped.Wanted
			}
			if st.Stock != want {
				t.Fatalf("stock %d after the resume, want %d (30 less 6, the wiped shard's part %d counted: %v)", st.Stock, want, wiped.Wanted, tc.stood)
			}
		})
	}
}

// cancelBeforeReclaim is the shard set with the order cancelled, and its
// claim given back, just before a late check takes the claim back (after
// the check read the order awaiting payment).
type cancelBeforeReclaim struct {
	*memShards
	cancel func()
}

func (c cancelBeforeReclaim) Reclaim(ctx context.Context, p *shardstock.Product, user, id string) (bool, error) {
	c.cancel()
	return c.memShards.Reclaim(ctx, p, user, id)
}

// TestALateCheckAfterACancelLeavesNoClaim: the check of an order written
// after its shard's resync (HoldLate) takes the buyer's claim back with the
// hold. Kept for a fenced shard and run after the order was cancelled and
// its claim given back, it took the claim back for good: a buyer holding
// nothing was refused as over the limit (found reading the code). A
// cancelled order's check now puts back neither hold nor claim; and one
// cancelled as its check runs has its claim given back after the hold.
func TestALateCheckAfterACancelLeavesNoClaim(t *testing.T) {
	f := newFixture(t)
	f.define("late", 30, 0) // 10 per shard
	ctx := context.Background()
	synced := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if err := f.store.ShardLog.RecordSynced(ctx, 0, "run-after-crash", synced); err != nil {
		t.Fatal(err)
	}
	before := synced.Add(-time.Second)
	p := &shardstock.Product{ID: "late"}
	write := func(id, user string) shardstock.Order {
		t.Helper()
		ev := shardstock.ReservationEvent{ID: id, UserID: user, ProductID: "late", Shard: 0, AtMS: before.UnixMilli()}
		if _, err := f.store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, synced, synced.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		return shardstock.Order{ID: id, UserID: user, ProductID: "late", Shard: 0, Status: shardstock.StatusAwaitingPayment}
	}
	cancel := func(o shardstock.Order) { // as the order service does: the row, then (its settlement published) the claim
		t.Helper()
		if _, err := f.store.Orders.Transition(ctx, o.ID, o.UserID, shardstock.StatusCancelled, synced); err != nil {
			t.Fatal(err)
		}
		if err := f.mem.GiveBack(ctx, p, o.UserID, o.ID); err != nil {
			t.Fatal(err)
		}
	}

	// Kept while the shard is fenced, cancelled, then checked.
	var fenced atomic.Bool
	fenced.Store(true)
	r := f.memResync(func(c *ResyncConfig) { c.Fenced = func(int) bool { return fenced.Load() } })
	kept := write("o-kept", "ann")
	r.HoldLate(ctx, kept, before, time.Now())
	cancel(kept)
	fenced.Store(false)
	r.RecheckLate(ctx)
	if f.mem.claimed("late", "ann", "o-kept") {
		t.Fatal("ann's claim of a cancelled order was taken back by its late check: she is refused below the limit for good")
	}
	if c := f.counters(0, "late"); c.Locked != 0 || c.Salable != 10 {
		t.Fatalf("shard 0 after the check of a cancelled order: %+v, want its unit salable", c)
	}

	// Cancelled, and its claim given back, as the check takes the claim back.
	var racing shardstock.Order
	holds := cancelBeforeReclaim{memShards: f.mem, cancel: func() { cancel(racing) }}
	r = f.memResync(func(c *ResyncConfig) { c.Holds, c.Claims = holds, holds })
	racing = write("o-racing", "ben")
	r.HoldLate(ctx, racing, before, time.Now())
	if f.mem.claimed("late", "ben", "o-racing") {
		t.Fatal("ben's claim, taken back by the check after his cancel gave it back, stayed")
	}
	if c := f.counters(0, "late"); c.Locked != 0 || c.Salable != 10 {
		t.Fatalf("shard 0 after the check raced a cancel: %+v, want the hold put back released", c)
	}
	if r.times.deferred() != nil {
		t.Fatal("checks still kept after their shard answered")
	}
}

// TestALateCheckWithNoUnitLeftGivesACancelledOrdersClaimBack: the check of
// a late order read it awaiting payment, and then the order was cancelled
// and its claim given back (the give-back waits for the release to be
// published, not applied) before the check took the claim back; its shard
// had no unit left for the hold (a sell-out), so the sale counted as lost
// and FailLost changed nothing (the order was cancelled already). The claim
// stayed: a buyer holding nothing was refused 409 for good (found by a
// review). It is given back.
func TestALateCheckWithNoUnitLeftGivesACancelledOrdersClaimBack(t *testing.T) {
	f := newFixture(t)
	f.define("gone", 30, 10) // shard 0's 10 units all sold
	ctx := context.Background()
	synced := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if err := f.store.ShardLog.RecordSynced(ctx, 0, "run-after-crash", synced); err != nil {
		t.Fatal(err)
	}
	before := synced.Add(-time.Second)
	ev := shardstock.ReservationEvent{ID: "o-sold", UserID: "eli", ProductID: "gone", Shard: 0, AtMS: before.UnixMilli()}
	if _, err := f.store.Orders.Insert(ctx, ev, 1, shardstock.StatusAwaitingPayment, synced, synced.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	p := &shardstock.Product{ID: "gone"}
	claims := cancelBeforeReclaim{memShards: f.mem, cancel: func() {
		if _, err := f.store.Orders.Transition(ctx, ev.ID, ev.UserID, shardstock.StatusCancelled, synced); err != nil {
			t.Fatal(err)
		}
		if err := f.mem.GiveBack(ctx, p, ev.UserID, ev.ID); err != nil {
			t.Fatal(err)
		}
	}}
	var failed int
	r := f.memResync(func(c *ResyncConfig) {
		c.Claims = claims
		c.FailLost = func(ctx context.Context, id, user string) error { // as the order service: only an order awaiting payment fails
			failed++
			_, err := f.store.Orders.Transition(ctx, id, user, shardstock.StatusFailed, synced)
			return err
		}
	})
	r.HoldLate(ctx, shardstock.Order{ID: ev.ID, UserID: ev.UserID, ProductID: "gone", Shard: 0, Status: shardstock.StatusAwaitingPayment}, before, time.Now())
	if failed != 1 {
		t.Fatalf("FailLost called %d times, want once (no unit left for the hold)", failed)
	}
	if f.mem.claimed("gone", "eli", "o-sold") {
		t.Fatal("eli's claim, taken back by a check that found no unit after her cancel gave it back, stayed")
	}
	if o, err := f.store.Orders.Order(ctx, ev.ID); err != nil || o.Status != shardstock.StatusCancelled {
		t.Fatalf("the order: %+v, %v; want it left cancelled", o, err)
	}
}
