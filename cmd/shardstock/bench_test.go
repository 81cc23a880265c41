package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// BenchmarkOrderPipeline measures reservations -> order rows per second:
// b.N units are reserved on 3 real shards from 16 goroutines while the
// server's consumers turn them into orders, timed until the last order row
// exists. The order-creation rate limit is lifted (its default, 500/s, would
// be the answer otherwise). Run with a fixed count: -benchtime 3000x.
func BenchmarkOrderPipeline(b *testing.B) {
	type combo struct {
		name   string
		config func(b *testing.B) func(*config.Config)
	}
	combos := []combo{
		{"streams+sqlite", func(*testing.B) func(*config.Config) { return func(*config.Config) {} }},
		{"streams+mariadb", func(b *testing.B) func(*config.Config) {
			db := freshMySQL(b)
			return func(c *config.Config) { c.DB = db }
		}},
		{"rocketmq+sqlite", func(b *testing.B) func(*config.Config) {
			mq := testRocketMQ(b)
			return func(c *config.Config) { c.MQ = mq }
		}},
		{"rocketmq+mariadb", func(b *testing.B) func(*config.Config) {
			mq, db := testRocketMQ(b), freshMySQL(b)
			return func(c *config.Config) { c.MQ, c.DB = mq, db }
		}},
	}
	for _, cb := range combos {
		b.Run(cb.name, func(b *testing.B) {
			r := shardtest.Start(b, 3)
			m := startServer(b, r.URLs(), cb.config(b), func(c *config.Config) { c.OrderRate = 1e9 })
			p := &shardstock.Product{ID: "bench", Stock: int64(b.N), PerUserLimit: 1}
			if _, err := m.inv.catalog.Define(context.Background(), *p); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			reserveMany(b, m, p, b.N)
			for {
				c, err := m.store.Orders.CountByStatus(context.Background(), "bench")
				if err == nil && c[shardstock.StatusAwaitingPayment] == int64(b.N) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "orders/s")
		})
	}
}

func reserveMany(b *testing.B, m *Main, p *shardstock.Product, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				u := fmt.Sprintf("b%d", i)
				if _, err := m.set.Purchases.Reserve(context.Background(), p, u, "o"+u); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
