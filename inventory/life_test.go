package inventory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

// TestStockChangeSurvivesACrash: a stock change is recorded before any
// shard changes and each shard's part is idempotent, so a change stopped
// after any step (as a crash would stop it) is finished by Resume, and a
// retry with the same idempotency key adds nothing more. Conservation
// holds on every shard throughout, and Σ alloc is the stock the view shows.
func TestStockChangeSurvivesACrash(t *testing.T) {
	f := newFixture(t)
	f.svc = NewService(f.set, f.store, f.store, Config{Transfers: f.store, Controls: f.store})
	ctx := context.Background()
	f.define("lamp", 90, 10)
	for _, step := range []string{"recorded", "out", "marked", "in"} {
		f.svc.hook = func(s string) error {
			if s == step {
				return errors.New("crash at " + s)
			}
			return nil
		}
		if _, err := f.svc.ChangeStock(ctx, "lamp", 30, 0, "add-"+step); err == nil && step != "out" && step != "marked" {
			t.Fatalf("add, crash at %s: no error", step)
		}
		if _, err := f.svc.ChangeStock(ctx, "lamp", 0, 20, "remove-"+step); err == nil && step != "in" {
			t.Fatalf("remove, crash at %s: no error", step)
		}
		f.svc.hook = nil
		if _, err := f.svc.Resume(ctx); err != nil {
			t.Fatalf("resume after a crash at %s: %v", step, err)
		}
		f.totals("lamp") // conservation on every shard
		// The same keys again change nothing more.
		if _, err := f.svc.ChangeStock(ctx, "lamp", 30, 0, "add-"+step); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.ChangeStock(ctx, "lamp", 0, 20, "remove-"+step); err != nil {
			t.Fatal(err)
		}
	}
	alloc, _ := f.totals("lamp")
	st, err := f.svc.Status(ctx, "lamp")
	if err != nil {
		t.Fatal(err)
	}
	want := int64(90 + 4*30 - 4*20)
	if st.Stock != want || alloc != want {
		t.Fatalf("stock %d, Σ alloc %d; want both %d (4 additions of 30, 4 removals of 20, each once)", st.Stock, alloc, want)
	}
	// Reconcile counts the changes in what each shard was given (the
	// fixture's reservations have no orders, so only alloc is compared).
	rec, err := f.svc.Reconcile(ctx, "lamp", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.Shards {
		if d.AllocDrift != 0 {
			t.Fatalf("shard %d: alloc drift %d after stock changes", d.Index, d.AllocDrift)
		}
	}
}

// TestRemoveNeverTakesALockedUnit: taking back more units than are salable
// takes the salable ones only; the locked ones stay with their buyers.
func TestRemoveNeverTakesALockedUnit(t *testing.T) {
	f := newFixture(t)
	f.svc = NewService(f.set, f.store, f.store, Config{Transfers: f.store, Controls: f.store})
	f.define("lamp", 30, 10) // 10 locked on shard 0
	st, err := f.svc.ChangeStock(context.Background(), "lamp", 0, 1000, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Stock != 10 || st.Totals.Salable != 0 || st.Totals.Locked != 10 {
		t.Fatalf("after removing everything: stock %d, totals %+v; want stock 10, 10 locked", st.Stock, st.Totals)
	}
	f.totals("lamp")
}

// TestMoveWindowReachesTheScripts: a window moved by PATCH is judged by the
// shards' scripts too, not only by the coordinator's cached product.
func TestMoveWindowReachesTheScripts(t *testing.T) {
	f := newFixture(t)
	f.svc = NewService(f.set, f.store, f.store, Config{Transfers: f.store, Controls: f.store})
	ctx := context.Background()
	f.define("lamp", 30, 0)
	stale, _ := f.svc.Product(ctx, "lamp") // a coordinator that has not seen the PATCH
	past := time.Now().Add(-time.Minute)
	if _, err := f.svc.MoveWindow(ctx, "lamp", nil, &past); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.svc.Product(ctx, "lamp"); !errors.Is(p.Open(time.Now()), shardstock.ErrEnded) {
		t.Fatalf("the product after the PATCH: %+v", p)
	}
	if _, err := f.set.Reserve(ctx, stale, "bob", "r-after-end"); !errors.Is(err, shardstock.ErrEnded) {
		t.Fatalf("a reserve by a coordinator with the old window: %v, want ErrEnded from the script", err)
	}
	start := time.Now().Add(time.Hour)
	if _, err := f.svc.MoveWindow(ctx, "lamp", &start, nil); !errors.Is(err, shardstock.ErrConflict) {
		t.Fatalf("moving starts_at after the start: %v, want ErrConflict", err)
	}
}

// TestAWindowAShardMissedIsWrittenByThePurchaseItRefused: a shard that was
// down when the operator reopened a sale keeps the ended window it had.
// The first purchase it refuses for the window, by a coordinator whose
// catalog says the sale is open, writes the catalog's window there and is
// asked again, so no buyer is told "ended" about an open sale. A
// coordinator whose catalog is older than the shard's copy cannot write it
// back (the version), however its write arrives.
func TestAWindowAShardMissedIsWrittenByThePurchaseItRefused(t *testing.T) {
	f := newFixture(t)
	f.svc = NewService(f.set, f.store, f.store, Config{Transfers: f.store, Controls: f.store})
	ctx := context.Background()
	f.define("lamp", 30, 0)
	past, later := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	if _, err := f.svc.MoveWindow(ctx, "lamp", nil, &past); err != nil {
		t.Fatal(err)
	}
	f.redis.Kill(0)
	if _, err := f.svc.MoveWindow(ctx, "lamp", nil, &later); !errors.Is(err, shardstock.ErrUnavailable) {
		t.Fatalf("reopening while shard 0 is down: %v, want ErrUnavailable (recorded, not on every shard)", err)
	}
	f.redis.Restart(0)
	reopened, _ := f.svc.Product(ctx, "lamp")
	if err := reopened.Open(time.Now()); err != nil {
		t.Fatalf("the catalog after the reopen: %v", err)
	}
	f.start = 0 // the reserve goes to shard 0, which still has the ended window
	var err error
	for try := 0; try < 50; try++ { // (the set's connections to shard 0 broke with its restart)
		var i int
		if i, err = f.set.Reserve(ctx, reopened, "bob", "r-reopened"); err == nil {
			if i != 0 {
				t.Fatalf("reserved on shard %d, want 0", i)
			}
			break
		}
		if !errors.Is(err, shardstock.ErrUnavailable) {
			t.Fatalf("a purchase of the reopened sale: %v, want reserved", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("shard 0 did not come back: %v", err)
	}
	f.totals("lamp")

	if _, err := f.svc.MoveWindow(ctx, "lamp", nil, &past); err != nil { // ended again, on every shard
		t.Fatal(err)
	}
	for _, start := range []int{0, 1, 2} {
		f.start = start
		if _, err := f.set.Reserve(ctx, reopened, "carol", "r-stale"); !errors.Is(err, shardstock.ErrEnded) {
			t.Fatalf("a coordinator that has not seen the end, reserving on shard %d: %v, want ErrEnded", start, err)
		}
	}
	// Every shard still judges by the end: a probe that neither checks the
	// window itself nor writes one is refused everywhere.
	probe, _ := f.svc.Product(ctx, "lamp")
	probe.EndsAt, probe.WindowVersion = time.Time{}, 0
	for _, start := range []int{0, 1, 2} {
		f.start = start
		if _, err := f.set.Reserve(ctx, probe, "dave", "r-probe"); !errors.Is(err, shardstock.ErrEnded) {
			t.Fatalf("shard %d after the stale coordinator's tries: %v, want ErrEnded (its older window was not written)", start, err)
		}
	}
}
