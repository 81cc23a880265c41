package flashsale

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

// The purchase handler's own cost, per request, without Redis: the shard
// set is a fake that answers at once, so what is measured is the HTTP
// front door, identity, checks, answer and metrics hook. make bench's
// wrk runs measure the whole process against real shards.

type benchCatalog struct{ p *shardstock.Product }

func (c benchCatalog) Product(context.Context, string) (*shardstock.Product, error) { return c.p, nil }

type benchReserver struct{ soldOut bool }

func (r benchReserver) Reserve(context.Context, *shardstock.Product, string, string) (int, error) {
	return 1, nil
}

func (r benchReserver) ReserveRetryable(context.Context, *shardstock.Product, string, string, time.Time, uint64) (int, error) {
	return 1, nil
}
func (benchReserver) Abandon(context.Context, *shardstock.Product, string, string, uint64) (int, error) {
	return -1, nil
}
func (r benchReserver) KnownSoldOut(*shardstock.Product) bool { return r.soldOut }

// discard is a ResponseWriter that keeps only the status, reused across
// requests like net/http's own.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(s int)           { d.status = s }

func BenchmarkServePurchase(b *testing.B) {
	for _, tc := range []struct {
		name    string
		soldOut bool
		want    int
	}{{"reserved", false, 200}, {"sold_out", true, 410}} {
		b.Run(tc.name, func(b *testing.B) {
			h := NewHandler(Config{Products: benchCatalog{&shardstock.Product{ID: "lamp", Stock: 1000, PerUserLimit: 1}},
				Reserver: benchReserver{tc.soldOut}, Identity: HeaderIdentity,
				Observe: func(string, string, time.Duration) {}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			front := h.Purchases(http.NotFoundHandler())
			r, _ := http.NewRequest(http.MethodPost, "http://bench/api/v1/products/lamp/purchase", nil)
			r.Header.Set("X-User-ID", "alice")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				front.ServeHTTP(w, r)
			}
			if w.status != tc.want {
				b.Fatalf("status %d, want %d", w.status, tc.want)
			}
		})
	}
}
