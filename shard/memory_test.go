package shard_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardstock/shardstock"
)

// TestMeasureSaleMemory measures what a sale of SHARDSTOCK_MEASURE_UNITS
// units (e.g. 1000000) holds on 3 shards before its archive: after every
// unit is reserved (outbox entries waiting for the order service), after
// the outbox is consumed, and after every unit is paid (confirmed). It is a
// measurement, not a check: make bench runs it with 1M units and
// BENCHMARKS.md records the figures. Skipped unless the variable is set.
func TestMeasureSaleMemory(t *testing.T) {
	units, _ := strconv.Atoi(os.Getenv("SHARDSTOCK_MEASURE_UNITS"))
	if units <= 0 {
		t.Skip("SHARDSTOCK_MEASURE_UNITS not set (make bench sets it)")
	}
	f := newFixture(t, 3)
	ctx := context.Background()
	used := func() []int64 {
		var out []int64
		for i := range f.set.Len() {
			u, _, err := f.set.Memory(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, u)
		}
		return out
	}
	base := used()
	p := f.define(shardstock.Product{ID: "big", Stock: int64(units), PerUserLimit: 1})
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(units); i = next.Add(1) {
				if _, err := f.set.Purchases.Reserve(ctx, p, fmt.Sprintf("buyer%d", i), fmt.Sprintf("o%d", i)); err != nil {
					t.Errorf("reserve %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	reserved := used()
	for _, sh := range f.set.Shards() {
		sh.Client.XTrimMaxLen(ctx, "ss:{p:big}:outbox", 0)
	}
	consumed := used()
	// Pay every unit: confirm each hold on its shard.
	for i, sh := range f.set.Shards() {
		ids, _ := sh.Client.HKeys(ctx, "ss:{p:big}:holds").Result()
		var cw sync.WaitGroup
		ch := make(chan string)
		for range 32 {
			cw.Go(func() {
				for id := range ch {
					f.set.Holds.Confirm(ctx, i, "big", id)
				}
			})
		}
		for _, id := range ids {
			ch <- id
		}
		close(ch)
		cw.Wait()
	}
	paid := used()
	sum := func(xs []int64) (s int64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	per := func(xs []int64) float64 { return float64(sum(xs)-sum(base)) / float64(units) }
	t.Logf("%d units on 3 shards: used_memory per shard empty %v, reserved %v (%.0f B/unit over the cluster), outbox consumed %v (%.0f B/unit), paid %v (%.0f B/unit)",
		units, base, reserved, per(reserved), consumed, per(consumed), paid, per(paid))
}
