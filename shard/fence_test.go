package shard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// The void marker on a real redis-server (purchase.lua): a Q step fences a
// reservation id on a shard, a step of the id sent before it (no
// generation, or an older one) finds the marker and takes nothing, and
// only a step sent for the current generation may take a unit there.
func TestVoidMarkerFencesLateSteps(t *testing.T) {
	r := shardtest.Start(t, 2)
	s, err := Open(r.URLs(), Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 2 {
		if _, err := s.Stock.Init(ctx, i, "f", shardstock.Allocation{Alloc: 5, Limit: 3, Definition: "{}", Epoch: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	do := func(i int, op, gen, user, id string) string {
		t.Helper()
		st, err := s.stepOn(ctx, i, step{product: "f", op: op, gen: gen, user: user, id: id})
		if err != nil {
			t.Fatalf("%s%s on shard %d: %v", op, gen, i, err)
		}
		return st
	}
	expect := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %q, want %q", what, got, want)
		}
	}
	salable := func(i int) int64 {
		t.Helper()
		c, err := s.Stock.Counters(ctx, i, "f")
		if err != nil {
			t.Fatal(err)
		}
		if c.Salable+c.Locked+c.Sold != c.Alloc {
			t.Fatalf("shard %d breaks conservation: %+v", i, c)
		}
		return c.Salable
	}

	expect("resolve a fresh id", do(0, opResolve, "", "u", "x"), "void 1")
	expect("a purchase step sent before the fence", do(0, opPurchase, "", "u", "x"), "void")
	expect("a reserve step sent before the fence", do(0, opReserve, "", "u", "x"), "void")
	if n := salable(0); n != 5 {
		t.Fatalf("a fenced step took a unit: salable %d", n)
	}
	if claims := s.shards[0].Client.HGet(ctx, keysFor("f").claims, "u").Val(); claims != "" {
		t.Fatalf("a fenced purchase step recorded the claim %q", claims)
	}
	expect("resolve again", do(0, opResolve, "", "u", "x"), "void 2")
	expect("a step of the older generation", do(0, opPurchase, "1", "u", "x"), "void")
	expect("the step of the current generation", do(0, opPurchase, "2", "u", "x"), "ok")
	if n := salable(0); n != 4 {
		t.Fatalf("salable %d after one purchase, want 4", n)
	}
	expect("resolve a held id", do(0, opResolve, "", "u", "x"), "held")
	expect("a late step after the hold", do(0, opPurchase, "", "u", "x"), "dup")
	if n := salable(0); n != 4 {
		t.Fatalf("a late step took a second unit: salable %d", n)
	}

	// A void marker is no hold: not found, not settled.
	expect("fence y on shard 1", do(1, opResolve, "", "v", "y"), "void 1")
	if _, _, _, found, err := s.Holds.FindHold(ctx, []string{"f"}, "y"); found || err != nil {
		t.Fatalf("FindHold found a void marker: %v %v", found, err)
	}
	if _, err := s.Holds.Release(ctx, 1, "f", "y"); !errors.Is(err, shardstock.ErrUnknownHold) {
		t.Fatalf("release of a void marker: %v, want shardstock.ErrUnknownHold", err)
	}
	if _, err := s.Holds.Confirm(ctx, 1, "f", "y"); !errors.Is(err, shardstock.ErrHoldReleased) {
		t.Fatalf("confirm after a release of a void marker: %v, want shardstock.ErrHoldReleased", err)
	}
	if n := salable(1); n != 5 {
		t.Fatalf("settling a void marker moved a unit: salable %d", n)
	}

	// Abandon fences every shard before it gives the claim back: a step of
	// the abandoned attempt still on its way takes nothing afterwards.
	p := &shardstock.Product{ID: "f", Stock: 10, PerUserLimit: 3}
	home := s.home("w", 2).Index
	expect("claim z", do(home, opClaim, "", "w", "z"), "ok")
	if held, err := s.Purchases.Abandon(ctx, p, "w", "z", 1<<0|1<<1); held != -1 || err != nil {
		t.Fatalf("Abandon of an attempt that holds nothing: held %d, %v; want -1, nil", held, err)
	}
	if claims := s.shards[home].Client.HGet(ctx, keysFor("f").claims, "w").Val(); strings.Contains(claims, "z") {
		t.Fatalf("Abandon kept the claim: %q", claims)
	}
	for i := range 2 {
		expect("a late reserve of the abandoned attempt", do(i, opReserve, "", "w", "z"), "void")
	}
	// An attempt whose unit is held (x on shard 0, taken by a step whose
	// answer the caller never saw) is not given back: Abandon names the
	// shard, so the buyer is told of the reservation instead of a refusal.
	if held, err := s.Purchases.Abandon(ctx, p, "u", "x", 1<<0|1<<1); held != 0 || err != nil {
		t.Fatalf("Abandon of an attempt held on shard 0: held %d, %v; want 0, nil", held, err)
	}
	if n := salable(0); n != 4 {
		t.Fatalf("Abandon of a held attempt moved a unit: salable %d", n)
	}
}

// A fenced shard answers only its resync: a connection the resync opened
// goes back to the pool, and no other call may use it to reach the shard
// before the fence opens (scripts, plain commands and pipelines alike).
func TestFencedShardAnswersOnlyItsResync(t *testing.T) {
	r := shardtest.Start(t, 1)
	s, err := Open(r.URLs(), Config{Timeout: time.Second, Resync: func(int, string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	resync := shardstock.ResyncContext(ctx)
	if err := s.Ping(resync, 0); err != nil {
		t.Fatalf("the resync's own ping: %v", err)
	}
	if !s.Fence.Fenced(0) {
		t.Fatal("a shard first seen is not fenced")
	}
	if _, err := s.Stock.Init(resync, 0, "f", shardstock.Allocation{Alloc: 5, Limit: 1, Definition: "{}", Epoch: "e"}); err != nil {
		t.Fatalf("the resync's own script: %v", err)
	}
	if n := s.shards[0].Client.PoolStats().TotalConns; n == 0 {
		t.Fatal("the resync left no connection in the pool; the test would prove nothing")
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errFenced) {
			t.Fatalf("%s on a fenced shard: %v, want errFenced", what, err)
		}
	}
	_, err = s.Stock.Init(ctx, 0, "g", shardstock.Allocation{Alloc: 5, Limit: 1, Definition: "{}", Epoch: "e"})
	refused("a script", err)
	_, err = s.Stock.Counters(ctx, 0, "f")
	refused("a command", err)
	refused("a ping", s.Ping(ctx, 0))
	_, _, _, _, err = s.Holds.FindHold(ctx, []string{"f"}, "some-order")
	refused("a pipeline", err)
	if got, _ := s.Stock.Counters(resync, 0, "g"); got.Alloc != 0 {
		t.Fatalf("a refused Init allocated %d units", got.Alloc)
	}

	f := &s.shards[0].fence
	f.mu.Lock()
	run := f.seen
	f.mu.Unlock()
	s.Fence.Synced(0, run)
	if c, err := s.Stock.Counters(ctx, 0, "f"); err != nil || c.Alloc != 5 {
		t.Fatalf("once resynced: %+v, %v", c, err)
	}
}

// A release that finds no hold (the shard came back from an AOF cut back
// past the reservation, and the order was cancelled meanwhile) ends the id
// on that shard: the purchase still in doubt (a spooled one, resolved after
// the crash, which fenced the id and goes on for its generation) takes no
// unit afterwards. Before, it took one, and the unit stayed locked for an
// order nothing would settle again (the model test's fast mode, seed
// 6046911467829356631).
func TestAReleaseWithoutAHoldEndsTheID(t *testing.T) {
	r := shardtest.Start(t, 1)
	s, err := Open(r.URLs(), Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Stock.Init(ctx, 0, "f", shardstock.Allocation{Alloc: 5, Limit: 3, Definition: "{}", Epoch: "e"}); err != nil {
		t.Fatal(err)
	}
	do := func(op, gen, id string) string {
		t.Helper()
		st, err := s.stepOn(ctx, 0, step{product: "f", op: op, gen: gen, user: "u", id: id})
		if err != nil {
			t.Fatalf("%s%s: %v", op, gen, err)
		}
		return st
	}
	counters := func() shardstock.Counters {
		t.Helper()
		c, err := s.Stock.Counters(ctx, 0, "f")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// x: no hold at all when its release comes; y: fenced by a resolve
	// first, its walk about to go on for generation 1.
	if got := do(opResolve, "", "y"); got != "void 1" {
		t.Fatalf("resolve y: %q", got)
	}
	for _, id := range []string{"x", "y"} {
		if _, err := s.Holds.Release(ctx, 0, "f", id); !errors.Is(err, shardstock.ErrUnknownHold) {
			t.Fatalf("release of %s without a hold: %v, want shardstock.ErrUnknownHold", id, err)
		}
	}
	for _, c := range []struct{ op, gen, id, want string }{
		{opPurchase, "", "x", "dup"},
		{opReserve, "", "x", "dup"},
		{opResolve, "", "x", "held"},
		{opPurchase, "1", "y", "dup"},
		{opReserve, "1", "y", "dup"},
	} {
		if got := do(c.op, c.gen, c.id); got != c.want {
			t.Fatalf("%s%s of %s after its release: %q, want %q", c.op, c.gen, c.id, got, c.want)
		}
	}
	if c := counters(); c.Salable != 5 || c.Locked != 0 {
		t.Fatalf("a step of a released id took a unit: %+v", c)
	}
	if claims := s.shards[0].Client.HGet(ctx, keysFor("f").claims, "u").Val(); claims != "" {
		t.Fatalf("a step of a released id recorded the claim %q", claims)
	}
	if _, err := s.Holds.Confirm(ctx, 0, "f", "x"); !errors.Is(err, shardstock.ErrHoldReleased) {
		t.Fatalf("confirm of a released id: %v, want shardstock.ErrHoldReleased", err)
	}

	// A shard without the product keeps no marker.
	if _, err := s.Holds.Release(ctx, 0, "g", "z"); !errors.Is(err, shardstock.ErrUnknownHold) {
		t.Fatalf("release on a shard without the product: %v", err)
	}
	if n := s.shards[0].Client.Exists(ctx, keysFor("g").holds).Val(); n != 0 {
		t.Fatal("a release wrote a holds hash for a product the shard does not have")
	}
}
