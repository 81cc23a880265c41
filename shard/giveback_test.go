package shard

import (
	"context"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// A claim whose register was down when its attempt ended is given back once
// the register answers again, so it does not hold the buyer's limit.
func TestClaimGivenBackWhenItsRegisterReturns(t *testing.T) {
	defer func(d time.Duration) { giveBackEvery = d }(giveBackEvery)
	giveBackEvery = 50 * time.Millisecond
	r := shardtest.Start(t, 1)
	s, err := Open(r.URLs(), Config{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, k := context.Background(), keysFor("gb")
	if err := s.shards[0].Client.HSet(ctx, k.claims, "u", "c1 c2").Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill(0)
	s.unclaim(ctx, &shardstock.Product{ID: "gb"}, "u", "c1")
	if n := s.PendingGiveBacks(); n != 1 {
		t.Fatalf("%d claims waiting to be given back, want 1", n)
	}
	time.Sleep(3 * giveBackEvery) // tries while the register is down keep it queued
	if n := s.PendingGiveBacks(); n != 1 {
		t.Fatalf("%d claims waiting while the register is down, want 1", n)
	}
	r.Restart(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids, err := s.shards[0].Client.HGet(ctx, k.claims, "u").Result()
		if err == nil && ids == "c2" && s.PendingGiveBacks() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claims of u: %q (%v), %d waiting; want c1 given back", ids, err, s.PendingGiveBacks())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
