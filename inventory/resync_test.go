package inventory

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	tr, err := f.store.StartTransfer(ctx, shardstock.Transfer{ID: "bogus", ProductID: "odd", From: 0, To: 1, Wanted: 50})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.MarkTransfer(ctx, tr.ID, "out", 50); err != nil {
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
	if err := f.store.MarkTransfer(ctx, tr.ID, "out", 4); err != nil { // the log put right
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
