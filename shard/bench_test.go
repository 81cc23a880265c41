package shard_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// BenchmarkReserve measures one purchase on the shard set (claim on the
// buyer's registers, then the reserve script) against 3 real redis-server
// masters on loopback, every iteration a new buyer while stock lasts: with
// random starts (three script calls, two when the start is the buyer's last
// register) and with register starts (always two), one call per round trip.
func BenchmarkReserve(b *testing.B) {
	for _, st := range []struct {
		name  string
		start shard.Start
	}{{"home", shard.StartHome}, {"random", shard.StartRandom}} {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("start=%s/conns=%d", st.name, par), func(b *testing.B) { benchReserve(b, st.start, par) })
		}
	}
}

func benchReserve(b *testing.B, start shard.Start, par int) {
	f := newFixture(b, 3, start)
	p := f.define(shardstock.Product{ID: fmt.Sprintf("bench%d", par), Stock: int64(b.N) + 1})
	var n atomic.Int64
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := fmt.Sprintf("u%d", n.Add(1))
			if _, err := f.set.Purchases.Reserve(f.ctx(), p, u, "r"+u); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReserveSoldOut measures the sold-out fast path: no Redis call.
func BenchmarkReserveSoldOut(b *testing.B) {
	f := newFixture(b, 3)
	p := f.define(shardstock.Product{ID: "gone", Stock: 1})
	f.set.Purchases.Reserve(f.ctx(), p, "winner", "r-winner")
	for k := 0; k < 3; k++ {
		f.set.Purchases.Reserve(f.ctx(), p, fmt.Sprintf("l%d", k), fmt.Sprintf("r-l%d", k))
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := f.set.Purchases.Reserve(f.ctx(), p, "late", "r-late"); err != shardstock.ErrSoldOut {
				b.Error(err)
				return
			}
		}
	})
}
