package inventory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore"
)

type fixture struct {
	t     *testing.T
	redis *shardtest.Redis
	set   *shard.Set
	store *sqlstore.Store
	svc   *Service
	start int
}

func newFixture(t *testing.T) *fixture {
	r := shardtest.Start(t, 3)
	f := &fixture{t: t, redis: r}
	store, err := sqlstore.Open("sqlite:" + t.TempDir() + "/o.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	set, err := shard.Open(r.URLs(), shard.Config{Timeout: time.Second, Start: shard.StartRandom, Rand: func(int) int { return f.start }, Ledger: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	f.set, f.store = set, store
	f.svc = NewService(set, store, store, Config{Transfers: store})
	return f
}

// define makes a product and sells `sold` units from shard 0 so the shards
// are uneven.
func (f *fixture) define(id string, stock, sold int64) *shardstock.Product {
	f.t.Helper()
	if _, err := f.svc.Define(context.Background(), shardstock.Product{ID: id, Stock: stock, PerUserLimit: 1}); err != nil {
		f.t.Fatal(err)
	}
	p, _ := f.svc.Product(context.Background(), id)
	f.start = 0
	for k := int64(0); k < sold; k++ {
		if i, err := f.set.Reserve(context.Background(), p, fmt.Sprintf("u%d", k), fmt.Sprintf("%s-r%d", id, k)); err != nil || i != 0 {
			f.t.Fatalf("reserve: shard %d %v", i, err)
		}
	}
	return p
}

// totals checks conservation on every shard and returns Σ alloc and the
// per-shard salable.
func (f *fixture) totals(id string) (alloc int64, salable []int64) {
	f.t.Helper()
	for i := 0; i < f.set.Len(); i++ {
		c, err := f.set.Counters(context.Background(), i, id)
		if err != nil {
			f.t.Fatal(err)
		}
		if c.Salable+c.Locked+c.Sold != c.Alloc || c.Salable < 0 {
			f.t.Fatalf("shard %d breaks conservation: %+v", i, c)
		}
		alloc += c.Alloc
		salable = append(salable, c.Salable)
	}
	return alloc, salable
}

func spread(xs []int64) int64 {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return hi - lo
}

func TestRebalanceEvensOutSalable(t *testing.T) {
	f := newFixture(t)
	f.define("even", 30, 8) // shard 0: 2 salable, the others 10
	rep, err := f.svc.Rebalance(context.Background(), "even")
	if err != nil {
		t.Fatal(err)
	}
	alloc, salable := f.totals("even")
	if alloc != 30 || spread(salable) > 1 || len(rep.Transfers) == 0 {
		t.Fatalf("after rebalance: alloc %d, salable %v, transfers %+v", alloc, salable, rep.Transfers)
	}
	again, _ := f.svc.Rebalance(context.Background(), "even")
	if len(again.Transfers) != 0 {
		t.Fatalf("a balanced product moved again: %+v", again.Transfers)
	}
}

func TestRebalanceInterruptedAtEachStep(t *testing.T) {
	for _, step := range []string{"recorded", "out", "marked", "in"} {
		t.Run(step, func(t *testing.T) {
			f := newFixture(t)
			f.define("cut", 30, 8)
			f.svc.hook = func(s string) error {
				if s == step {
					return errors.New("crash after " + s)
				}
				return nil
			}
			if _, err := f.svc.Rebalance(context.Background(), "cut"); err == nil {
				t.Fatal("the crash was not reported")
			}
			alloc, _ := f.totals("cut") // conservation on every shard, even mid-transfer
			open, _ := f.store.UnfinishedTransfers(context.Background())
			if alloc > 30 || len(open) != 1 {
				t.Fatalf("after a crash at %s: Σ alloc %d (stock 30), unfinished %+v", step, alloc, open)
			}
			// Units are in flight (off the source, not on the destination)
			// only between taking them out and adding them in.
			inFlight := step == "out" || step == "marked"
			if inFlight == (alloc == 30) {
				t.Fatalf("after a crash at %s: Σ alloc %d", step, alloc)
			}
			f.svc.hook = nil
			done, err := f.svc.Resume(context.Background())
			if err != nil || len(done) != 1 {
				t.Fatalf("resume: %v %+v", err, done)
			}
			if alloc, _ := f.totals("cut"); alloc != 30 {
				t.Fatalf("after resume: Σ alloc %d, want 30", alloc)
			}
			if again, _ := f.svc.Resume(context.Background()); len(again) != 0 {
				t.Fatalf("a finished transfer ran again: %+v", again)
			}
			if alloc, _ := f.totals("cut"); alloc != 30 {
				t.Fatalf("after a second resume: Σ alloc %d, want 30", alloc)
			}
		})
	}
}

func TestDrainMovesUnitsOffAndPurchasesSkipIt(t *testing.T) {
	f := newFixture(t)
	p := f.define("dr", 30, 0)
	moved, err := f.svc.Drain(context.Background(), 1, true)
	if err != nil || moved["dr"] != 10 {
		t.Fatalf("drain: moved %v, err %v", moved, err)
	}
	alloc, salable := f.totals("dr")
	if alloc != 30 || salable[1] != 0 || salable[0]+salable[2] != 30 {
		t.Fatalf("after drain: alloc %d salable %v", alloc, salable)
	}
	f.start = 1
	for k := 0; k < 5; k++ {
		if i, err := f.set.Reserve(context.Background(), p, fmt.Sprintf("d%d", k), fmt.Sprintf("dr-%d", k)); err != nil || i == 1 {
			t.Fatalf("purchase on a drained shard: shard %d err %v", i, err)
		}
	}
	rep, _ := f.svc.Rebalance(context.Background(), "dr")
	for _, tr := range rep.Transfers {
		if tr.To == 1 {
			t.Fatalf("rebalance put units back on a drained shard: %+v", rep.Transfers)
		}
	}
	if _, err := f.svc.Drain(context.Background(), 1, false); err != nil {
		t.Fatal(err)
	}
	f.svc.Rebalance(context.Background(), "dr")
	if _, salable := f.totals("dr"); salable[1] == 0 || spread(salable) > 1 {
		t.Fatalf("after undrain and rebalance: %v", salable)
	}
}

// A transfer whose destination lost the product (wiped between its two
// steps) can never finish: it is reversed onto its source as a recorded
// step, and until then it holds up neither another product's rebalance nor
// a drain (issue: crash-consistent shards, item 4).
func TestStuckTransferIsReversedAndBlocksNothing(t *testing.T) {
	f := newFixture(t)
	f.define("stuck", 30, 8)
	f.define("other", 30, 8)
	f.svc.hook = func(s string) error {
		if s == "marked" {
			return errors.New("crash after marked")
		}
		return nil
	}
	if _, err := f.svc.Rebalance(context.Background(), "stuck"); err == nil {
		t.Fatal("the crash was not reported")
	}
	f.svc.hook = nil
	open, _ := f.store.UnfinishedTransfers(context.Background())
	if len(open) != 1 {
		t.Fatalf("unfinished: %+v", open)
	}
	tr := open[0]
	f.redis.Wipe(tr.To) // the destination loses its data: transfer_in can never succeed
	rep, err := f.svc.Rebalance(context.Background(), "other")
	if err != nil || len(rep.Stuck) != 0 {
		t.Fatalf("another product's rebalance: %v %+v", err, rep)
	}
	if _, err := f.svc.Drain(context.Background(), tr.From, true); err != nil {
		t.Fatalf("drain with a transfer stuck: %v", err)
	}
	if left, _ := f.store.UnfinishedTransfers(context.Background()); len(left) != 0 {
		t.Fatalf("the stuck transfer was neither finished nor reversed: %+v", left)
	}
	// The reversed units are back on the source (then drained off it with
	// the rest): on the shards that kept their data, conservation holds and
	// Σ alloc is the stock minus the lost shard's allocation.
	var alloc, lost int64
	for i := 0; i < 3; i++ {
		c, err := f.set.Counters(context.Background(), i, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		if !c.Known {
			lost++
			continue
		}
		if c.Salable+c.Locked+c.Sold != c.Alloc {
			t.Fatalf("shard %d breaks conservation: %+v", i, c)
		}
		alloc += c.Alloc
	}
	if lost != 1 || alloc != 30-10 {
		t.Fatalf("after the reversal: Σ alloc %d on the %d shards that kept their data, want 20 (30 minus the lost shard's 10)", alloc, 3-lost)
	}
}

// A product defined while a shard is drained puts none of its units there
// (issue: define must respect drains), and its buyers homed on the drained
// shard still buy (their register is there; the units are elsewhere).
func TestDefineRespectsDrains(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.Drain(context.Background(), 2, true); err != nil {
		t.Fatal(err)
	}
	p := f.define("late", 30, 0)
	alloc, _ := f.totals("late")
	c, err := f.set.Counters(context.Background(), 2, "late")
	if err != nil || alloc != 30 || !c.Known || c.Alloc != 0 {
		t.Fatalf("defined with shard 2 drained: Σ alloc %d, shard 2 %+v %v; want 30 and none on shard 2", alloc, c, err)
	}
	for k := 0; k < 12; k++ {
		u := fmt.Sprintf("d%d", k)
		i, err := f.set.Reserve(context.Background(), p, u, "late-"+u)
		if err != nil || i == 2 {
			t.Fatalf("purchase of %s (home %d): shard %d, %v", u, f.set.Home(u), i, err)
		}
	}
}
