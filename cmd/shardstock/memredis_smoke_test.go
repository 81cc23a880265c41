package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// masters is what the smoke cycle needs of a set of masters: both
// *shardtest.Redis and *shardtest.Mem have it.
type masters interface {
	URLs() []string
	CheckpointAs(i int, name string)
	RewindTo(i int, name string)
}

// TestMemSmokeCycle runs one coordinator (Main, real go-redis clients, the
// Streams order consumer) on in-memory masters: define a product, buy,
// orders written from the outboxes, pay one, a machine crash of shard 0
// back to before the purchases, the fence and the resync. The same cycle
// on real redis-servers (when installed) gives the time to compare.
func TestMemSmokeCycle(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		start := time.Now()
		mem := shardtest.StartMem(t, 3, shardtest.Options{ACLUser: "shardstock:pw"})
		smokeCycle(t, mem)
		t.Logf("miniredis cycle: %s", time.Since(start).Round(time.Millisecond))
	})
	t.Run("redis-server", func(t *testing.T) {
		start := time.Now()
		r := shardtest.StartWith(t, 3, shardtest.Options{ACLUser: "shardstock:pw"})
		smokeCycle(t, r)
		t.Logf("redis-server cycle: %s", time.Since(start).Round(time.Millisecond))
	})
}

func smokeCycle(t *testing.T, r masters) {
	t0 := time.Now()
	m := startServer(t, r.URLs())
	base := m.URL()
	t.Logf("coordinator up: %s", time.Since(t0).Round(time.Millisecond))
	if rep := putProduct(t, base, "x", `{"stock":30}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	r.CheckpointAs(0, "cp") // shard 0 holds the product, no purchase yet
	type bought struct{ id, user string }
	var onZero []bought
	n := 0
	for k := 0; len(onZero) < 3; k++ {
		u := fmt.Sprintf("u%d", k)
		if m.set.Purchases.Home(u) != 0 {
			continue
		}
		rep := purchase(t, base, "x", u)
		if rep.status != 200 {
			t.Fatalf("%s: %d %s", u, rep.status, rep.raw)
		}
		n++
		if int(rep.body["shard"].(float64)) == 0 {
			onZero = append(onZero, bought{rep.str("order_id"), u})
		}
	}
	waitFor(t, 10*time.Second, "orders written", func() (bool, string) {
		c := statusCounts(t, m, "x")
		return c[shardstock.StatusAwaitingPayment] == int64(n), fmt.Sprint(c)
	})
	if rep := orderCall(t, base, "pay", onZero[0].id, onZero[0].user, `{"result":"success"}`); rep.status != 202 {
		t.Fatalf("pay: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "paid and confirmed on shard 0", func() (bool, string) {
		st := productStatus(t, base, "x").Shards[0]
		return st.Sold != nil && *st.Sold == 1, fmt.Sprintf("%+v", st)
	})
	t.Logf("bought %d, orders written, one paid: %s", n, time.Since(t0).Round(time.Millisecond))

	// The machine crash: shard 0 back to before every purchase. The fence
	// may close and open again between two looks (a resync takes ~100 ms on
	// a redis-server): what shows the crash was seen is a new run of shard 0
	// put on record as resynced.
	ctx := context.Background()
	before, err := m.store.ShardLog.SyncedRunID(ctx, 0)
	if err != nil || before == "" {
		t.Fatalf("shard 0's run on record before the crash: %q, %v", before, err)
	}
	crash := time.Now()
	r.RewindTo(0, "cp")
	waitFor(t, 15*time.Second, "shard 0's new run resynced", func() (bool, string) {
		st := productStatus(t, base, "x").Shards[0] // (reads the shards: new connections see the new run id)
		run, err := m.store.ShardLog.SyncedRunID(ctx, 0)
		if err != nil || run == before || m.set.Fence.Fenced(0) {
			return false, fmt.Sprintf("run on record %q (%v), fenced %v: %s", run, err, m.set.Fence.Fenced(0), m.inv.resync.Problem(0))
		}
		return st.Up && st.Locked != nil && *st.Locked == int64(len(onZero)-1) && *st.Sold == 1, fmt.Sprintf("%+v", st)
	})
	checkShards(t, productStatus(t, base, "x"))
	t.Logf("crash: resynced after %s (holds and the sale back on shard 0); whole cycle %s",
		time.Since(crash).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
