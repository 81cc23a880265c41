package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/lua"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// A step whose caller gave up while it waited behind a round trip on a
// frozen shard is not sent when the shard answers again: nobody would learn
// its outcome.
func TestBatcherDropsStepsWhoseCallerLeft(t *testing.T) {
	r := shardtest.Start(t, 1)
	opt, err := redis.ParseURL(r.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	sh := &Shard{Client: redis.NewClient(opt)}
	t.Cleanup(func() { sh.Client.Close() })
	ctx, k := context.Background(), keysFor("drop")
	if err := sh.Client.HSet(ctx, k.stock, "salable", 10, "locked", 0, "limit", 1).Err(); err != nil {
		t.Fatal(err)
	}
	b := newBatcher(sh, lua.NewScripts().Purchase, Config{Timeout: 5 * time.Second, Now: time.Now, Coalesce: true})
	t.Cleanup(b.close)
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
