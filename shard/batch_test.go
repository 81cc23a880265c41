package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/lua"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// batcherOnOneShard starts one master with product's stock (salable
// units, limit 1) and a coalescing batcher on it with cfg's gap and OnBatch.
func batcherOnOneShard(t *testing.T, product string, salable int, cfg Config) (*shardtest.Redis, *Shard, *batcher) {
	r := shardtest.Start(t, 1)
	opt, err := redis.ParseURL(r.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	sh := &Shard{Client: redis.NewClient(opt)}
	t.Cleanup(func() { sh.Client.Close() })
	if err := sh.Client.HSet(context.Background(), keysFor(product).stock, "salable", salable, "locked", 0, "limit", 1).Err(); err != nil {
		t.Fatal(err)
	}
	cfg.Timeout, cfg.Now, cfg.Coalesce = 5*time.Second, time.Now, true
	b := newBatcher(sh, lua.NewScripts().Purchase, cfg)
	t.Cleanup(b.close)
	return r, sh, b
}

// A step whose caller gave up while it waited behind a round trip on a
// frozen shard is not sent when the shard answers again: nobody would learn
// its outcome.
func TestBatcherDropsStepsWhoseCallerLeft(t *testing.T) {
	r, sh, b := batcherOnOneShard(t, "drop", 10, Config{})
	ctx, k := context.Background(), keysFor("drop")
	buy := func(ctx context.Context, user string) (string, error) {
		return b.submit(ctx, step{product: "drop", op: opPurchase, user: user, id: "r-" + user})
	}
	if _, err := buy(ctx, "warm"); err != nil {
		t.Fatal(err) // the script is loaded before the freeze
	}

	r.Freeze(0)
	first := make(chan error, 1)
	go func() {
		_, err := buy(ctx, "first")
		first <- err
	}()
	time.Sleep(100 * time.Millisecond) // the executor is now waiting on the frozen shard
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := buy(short, "left"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued step behind a frozen shard: %v, want its deadline", err)
	}
	r.Thaw(0)
	if err := <-first; err != nil {
		t.Fatalf("the step in flight: %v", err)
	}
	if st, err := buy(ctx, "after"); err != nil || st != "ok" {
		t.Fatalf("after: %q %v", st, err) // the queue has been worked through
	}
	if n, err := sh.Client.HExists(ctx, k.holds, "r-left").Result(); err != nil || n {
		t.Fatalf("the abandoned step ran (held=%v, %v)", n, err)
	}
	if n, _ := sh.Client.HGet(ctx, k.stock, "locked").Int(); n != 3 {
		t.Fatalf("locked = %d, want 3 (warm, first, after)", n)
	}
}

// Under load (the previous round trip carried more than one step) a shard's
// next round trip leaves no sooner than BatchGap after it; a step after a
// lone one leaves at once.
func TestBatcherSpacesRoundTripsUnderLoad(t *testing.T) {
	const gap = 300 * time.Millisecond
	type trip struct {
		at    time.Time
		steps int
	}
	trips := make(chan trip, 100)
	r, _, b := batcherOnOneShard(t, "gap", 100, Config{BatchGap: gap, OnBatch: func(n int) { trips <- trip{time.Now(), n} }})
	ctx := context.Background()
	buy := func(user string) error {
		st, err := b.submit(ctx, step{product: "gap", op: opPurchase, user: user, id: "r-" + user})
		if err == nil && st != "ok" {
			err = errors.New(st)
		}
		return err
	}
	next := func() trip {
		select {
		case tr := <-trips:
			return tr
		case <-time.After(5 * time.Second):
			t.Fatal("no round trip")
			return trip{}
		}
	}
	if err := buy("warm"); err != nil {
		t.Fatal(err)
	}
	warm := next()
	if err := buy("lone"); err != nil {
		t.Fatal(err)
	}
	if lone := next(); lone.at.Sub(warm.at) >= gap {
		t.Fatalf("a step after a lone one waited %v", lone.at.Sub(warm.at))
	}

	// Load: one step in flight on a frozen shard, five piling up behind it.
	r.Freeze(0)
	errs := make(chan error, 7)
	go func() { errs <- buy("first") }()
	first := next()
	for i := range 5 {
		go func() { errs <- buy(fmt.Sprintf("pile%d", i)) }()
	}
	time.Sleep(100 * time.Millisecond)
	r.Thaw(0)
	pile := next()
	if first.steps != 1 || pile.steps != 5 {
		t.Fatalf("round trips of %d and %d steps, want 1 then 5", first.steps, pile.steps)
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// After a round trip of five, the next step waits out the gap.
	go func() { errs <- buy("after") }()
	if after := next(); after.at.Sub(pile.at) < gap || after.steps != 1 {
		t.Fatalf("the step after a round trip of five left %v after it (%d steps), want >= %v", after.at.Sub(pile.at), after.steps, gap)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
