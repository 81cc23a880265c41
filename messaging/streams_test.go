package messaging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
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

// streamIDs lists the ids of the entries stream holds.
func streamIDs(t *testing.T, c *redis.Client, stream string) []string {
	t.Helper()
	msgs, err := c.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

// The ack script removes a group's handled entries by trimming the stream
// up to the first entry that may not be processed, and deletes one by one
// only those past it: entries another consumer holds pending (a batch in
// progress, a parked entry) and entries not yet delivered stay; nothing
// handled stays behind.
func TestAckRemovesHandledEntriesOnly(t *testing.T) {
	c := oneShard(t)
	ctx := context.Background()
	stream := "ss:{p:ack}:outbox"
	// Ids chosen so that comparing them as strings would be wrong
	// ("9-0" sorts after "10-0", "1-9" after "1-10").
	var all []string
	for _, ms := range []string{"9", "10", "11"} {
		for seq := range 12 {
			id := fmt.Sprintf("%s-%d", ms, seq)
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"res", id}}).Err(); err != nil {
				t.Fatal(err)
			}
			all = append(all, id)
		}
	}
	if err := c.XGroupCreate(ctx, stream, "orders", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read := func(consumer string, n int64) []string {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: consumer, Streams: []string{stream, ">"}, Count: n, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	r := &shardReader{g: &GroupReader{Group: "orders"}, c: c}
	ack := func(ids []string) {
		if err := r.ack(ctx, stream, ids); err != nil {
			t.Fatal(err)
		}
	}
	want := func(step string, ids []string) {
		t.Helper()
		if got := streamIDs(t, c, stream); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("%s: the stream holds %v, want %v", step, got, ids)
		}
	}

	a := read("a", 10) // 9-0..9-9: A's batch, in progress
	b := read("b", 10) // 9-10, 9-11, 10-0..10-7
	ack(b)             // past A's pending entries: deleted one by one
	want("B acknowledged while A's batch is pending", append(append([]string{}, a...), all[20:]...))
	ack(a[1:]) // 9-0 stays pending (parked): the rest goes
	want("A acknowledged all but its first", append([]string{a[0]}, all[20:]...))
	c2 := read("b", 4) // 10-8..10-11
	ack(c2)
	want("10-8..10-11 acknowledged, 9-0 still pending", append([]string{a[0]}, all[24:]...))
	ack(a[:1]) // the parked entry handled at last: only the undelivered 11-* remain
	want("every delivered entry acknowledged", all[24:])
	d := read("a", 100)
	ack(d)
	want("all acknowledged", nil)
	if p, _ := c.XPending(ctx, stream, "orders").Result(); p.Count != 0 {
		t.Fatalf("%d entries still pending", p.Count)
	}

	// A stream whose group is gone (the shard lost its data, then got the
	// entries back some other way): the ids given are deleted one by one.
	c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "20-0", Values: []any{"res", "x"}})
	c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "20-1", Values: []any{"res", "y"}})
	r.g.Group = "gone"
	ack([]string{"20-1"})
	want("no such group", []string{"20-0"})
	// A stream deleted meanwhile (a product archived): nothing to do.
	if err := r.ack(ctx, "ss:{p:none}:outbox", []string{"1-1"}); err != nil {
		t.Fatal(err)
	}
}

// A lone consumer's acknowledgement is a trim alone, up to the entry after
// its last one (a carry in the sequence included), and never past it: the
// entries not delivered yet stay.
func TestAckOfALoneConsumerTrims(t *testing.T) {
	c := oneShard(t)
	ctx := context.Background()
	stream := "ss:{p:lone}:outbox"
	for _, id := range []string{"1-8", "1-9", "1-10", "1-11", "2-99", "2-100", "2-101", "3-0"} {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"res", id}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.XGroupCreate(ctx, stream, "orders", "0")
	for _, step := range []struct {
		read int64
		left []string
	}{
		{2, []string{"1-10", "1-11", "2-99", "2-100", "2-101", "3-0"}},
		{3, []string{"2-100", "2-101", "3-0"}},
		{1, []string{"2-101", "3-0"}},
		{2, nil},
	} {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: "one", Streams: []string{stream, ">"}, Count: step.read, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		args := []any{"orders"}
		for _, m := range res[0].Messages {
			args = append(args, m.ID)
		}
		out, err := scripts.Ack.Run(ctx, c, []string{stream}, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		left := streamIDs(t, c, stream)
		if fmt.Sprint(left) != fmt.Sprint(step.left) || out[0] != step.read || out[1] != 0 {
			t.Fatalf("after acknowledging %v: the stream holds %v, %d trimmed, %d deleted one by one; want %v, %d, 0",
				args[1:], left, out[0], out[1], step.left, step.read)
		}
	}
}

// The script takes the ids in ascending order, compared as numbers (a
// batch's ids arrive out of order when some were deleted while pending).
func TestCompareIDs(t *testing.T) {
	ids := []string{"9-11", "10-0", "9-9", "1-10", "1-9", "x"}
	slices.SortFunc(ids, compareIDs)
	if want := "[x 1-9 1-10 9-9 9-11 10-0]"; fmt.Sprint(ids) != want {
		t.Fatalf("sorted: %v, want %s", ids, want)
	}
}

// One acknowledgement of entries on both sides of another consumer's
// pending ones: those before them are trimmed, those after deleted one by
// one, the pending ones stay.
func TestAckAroundAnotherConsumersBatch(t *testing.T) {
	c := oneShard(t)
	ctx := context.Background()
	stream := "ss:{p:around}:outbox"
	for i := 1; i <= 9; i++ {
		c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("7-%d", i), Values: []any{"res", i}})
	}
	c.XGroupCreate(ctx, stream, "orders", "0")
	var mine []any
	for _, who := range []string{"x", "y", "x"} {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: who, Streams: []string{stream, ">"}, Count: 3, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res[0].Messages {
			if who == "x" {
				mine = append(mine, m.ID)
			}
		}
	}
	out, err := scripts.Ack.Run(ctx, c, []string{stream}, append([]any{"orders"}, mine...)...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	left := streamIDs(t, c, stream)
	if fmt.Sprint(left) != "[7-4 7-5 7-6]" || out[0] != 3 || out[1] != 3 {
		t.Fatalf("the stream holds %v, %d trimmed, %d deleted one by one; want [7-4 7-5 7-6], 3, 3", left, out[0], out[1])
	}
}

// Ids this group did not deliver on this stream (the shard lost its data,
// the group was made anew and new entries sort below the old ids, or an id
// given twice) are deleted one by one and nothing is trimmed: the entries
// before them may never have been read.
func TestAckOfIdsNotPendingHereTrimsNothing(t *testing.T) {
	c := oneShard(t)
	ctx := context.Background()
	stream := "ss:{p:anew}:outbox"
	for i := 1; i <= 5; i++ {
		c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("3-%d", i), Values: []any{"res", i}})
	}
	c.XGroupCreate(ctx, stream, "orders", "0") // nothing read yet
	out, err := scripts.Ack.Run(ctx, c, []string{stream}, "orders", "3-3").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	left := streamIDs(t, c, stream)
	if fmt.Sprint(left) != "[3-1 3-2 3-4 3-5]" || out[0] != 0 || out[1] != 1 {
		t.Fatalf("the stream holds %v, %d trimmed, %d deleted one by one; want [3-1 3-2 3-4 3-5], 0, 1", left, out[0], out[1])
	}
	// One id pending here, one not: still no trim.
	res, _ := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "orders", Consumer: "a", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	if out, err = scripts.Ack.Run(ctx, c, []string{stream}, "orders", res[0].Messages[0].ID, "3-5").Int64Slice(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.XLen(ctx, stream).Result(); n != 2 || out[0] != 0 {
		t.Fatalf("%d entries left, %d trimmed; want 3-2 and 3-4 left, nothing trimmed", n, out[0])
	}
}
