package messaging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestTakeoverOfADeadConsumersEntries (issue 14, item 3): entries a dead
// consumer read and never acknowledged are taken over by a live one batch
// after batch, without waiting ClaimIdle/2 between batches. Measured:
// 40,000 entries of one stream, batches of 100, ClaimIdle 1s.
func TestTakeoverOfADeadConsumersEntries(t *testing.T) {
	const n = 40000
	r := shardtest.Start(t, 1)
	opt, _ := redis.ParseURL(r.URLs()[0])
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	stream := "ss:{p:takeover}:outbox"
	c.XGroupCreateMkStream(ctx, stream, "orders", "0")
	pipe := c.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"res", fmt.Sprint(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead consumer reads everything and dies before acknowledging.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: "dead", Streams: []string{stream, ">"}, Count: n}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // idle past ClaimIdle
	var handled atomic.Int64
	g := &GroupReader{Clients: []*redis.Client{c}, Group: "orders", Consumer: "alive", ClaimIdle: time.Second,
		Streams: func(context.Context, int, *redis.Client) ([]string, error) { return []string{stream}, nil },
		Handle:  func(context.Context, Entry) error { handled.Add(1); return nil },
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	go g.Run(runCtx)
	// Waiting ClaimIdle/2 between batches of 100 would take 400 × 0.5 s.
	deadline := start.Add(60 * time.Second)
	for handled.Load() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%d entries of a dead consumer taken over in %s (%.0f/s)", handled.Load(), took.Round(10*time.Millisecond), float64(handled.Load())/took.Seconds())
	if handled.Load() < n {
		t.Fatalf("%d of %d entries taken over in 60 s (batches waiting ClaimIdle/2 apart would take 200 s)", handled.Load(), n)
	}
	if left, _ := c.XPending(ctx, stream, "orders").Result(); left.Count != 0 {
		t.Fatalf("%d entries still pending", left.Count)
	}
}
