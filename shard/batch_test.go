package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/shard/shardtest"
)

// A call whose caller gave up while it waited behind a round trip on a
// frozen shard is not sent when the shard answers again: nobody would learn
// its outcome.
func TestCoalescerDropsCallsWhoseCallerLeft(t *testing.T) {
	r := shardtest.Start(t, 1)
	opt, err := redis.ParseURL(r.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	k := newCoalescer(client, 5*time.Second, nil)
	t.Cleanup(k.close)
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	ctx := context.Background()
	if _, err := k.run(ctx, incr, []string{"warm"}, nil); err != nil {
		t.Fatal(err) // the script is loaded before the freeze
	}

	r.Freeze(0)
	first := make(chan error, 1)
	go func() {
		_, err := k.run(ctx, incr, []string{"first"}, nil)
		first <- err
	}()
	time.Sleep(100 * time.Millisecond) // the executor is now waiting on the frozen shard
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := k.run(short, incr, []string{"left"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call behind a frozen shard: %v, want its deadline", err)
	}
	r.Thaw(0)
	if err := <-first; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if _, err := k.run(ctx, incr, []string{"after"}, nil); err != nil {
		t.Fatal(err) // the queue has been worked through
	}
	if n, err := client.Exists(ctx, "left").Result(); err != nil || n != 0 {
		t.Fatalf("the abandoned call ran (exists=%d, %v)", n, err)
	}
	if n, _ := client.Get(ctx, "first").Int(); n != 1 {
		t.Fatalf("first = %d, want 1", n)
	}
}
