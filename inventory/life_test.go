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
