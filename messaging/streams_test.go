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

// oneShard starts one master and returns a client of it.
func oneShard(t *testing.T) *redis.Client {
	r := shardtest.Start(t, 1)
	opt, err := redis.ParseURL(r.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTakeoverOfADeadConsumersEntries (issue 14, item 3): entries a dead
// consumer read and never acknowledged are taken over by a live one batch
// after batch, without waiting ClaimIdle/2 between batches. Measured:
// 40,000 entries of one stream, batches of 100, ClaimIdle 1s.
func TestTakeoverOfADeadConsumersEntries(t *testing.T) {
	const n = 40000
	c := oneShard(t)
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

// With Gather, a read that found entries but fewer than Count is followed
// by a wait, so that the entries added meanwhile leave in one batch; a full
// read is followed at once.
func TestGatherMakesFewerFullerReads(t *testing.T) {
	const gather = 400 * time.Millisecond
	c := oneShard(t)
	ctx := context.Background()
	stream := "ss:{p:gather}:outbox"
	add := func(n int) {
		for range n {
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"res", "x"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	type batch struct {
		at time.Time
		n  int
	}
	batches := make(chan batch, 10)
	g := &GroupReader{Clients: []*redis.Client{c}, Group: "orders", Consumer: "one", Count: 5, Gather: gather,
		Streams: func(context.Context, int, *redis.Client) ([]string, error) { return []string{stream}, nil },
		HandleBatch: func(_ context.Context, es []Entry) (int, error) {
			batches <- batch{time.Now(), len(es)}
			return len(es), nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	add(2)
	go g.Run(runCtx)
	next := func() batch {
		select {
		case b := <-batches:
			return b
		case <-time.After(5 * time.Second):
			t.Fatal("no batch")
			return batch{}
		}
	}
	first := next()
	add(1)
	time.Sleep(gather / 4)
	add(1)
	second := next()
	if first.n != 2 || second.n != 2 || second.at.Sub(first.at) < gather {
		t.Fatalf("batches of %d then %d, %v apart; want 2 then 2 (gathered), at least %v apart", first.n, second.n, second.at.Sub(first.at), gather)
	}
	add(5 + 1) // a full read (5), then the one left at once
	full, rest := next(), next()
	if full.n != 5 || rest.n != 1 || rest.at.Sub(full.at) >= gather {
		t.Fatalf("batches of %d then %d, %v apart; want 5 then 1 without a wait", full.n, rest.n, rest.at.Sub(full.at))
	}
}
