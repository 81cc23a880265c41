// Package messaging moves shardstock's three kinds of message:
// reservations (from the shards' outbox streams to the order service),
// settlements (pay results, from the order service to the shard holding
// the unit) and payment results (from the payment centre to the order
// service). Two transports: Redis Streams consumer groups on the shards
// themselves, and Apache RocketMQ. Delivery is at least once everywhere;
// every consumer is idempotent. A new transport goes here, beside
// streams.go and rocketmq.go (pipeline.go is RocketMQ's side of the order
// pipeline). It imports the domain, ha (Backoff), lua (the ack script) and
// shard (stream key names, and what a Redis error reply means:
// shard/replies.go reads them).
package messaging

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/lua"
	"github.com/shardstock/shardstock/shard"
)

// scripts holds the ack script (lua/ack.lua).
var scripts = lua.NewScripts()

// Entry is one stream entry handed to a handler.
type Entry struct {
	Shard  int
	Stream string
	ID     string
	Fields map[string]any
}

// EntryHandler processes one entry. nil: the entry is acknowledged and
// deleted; an error: it stays pending and is offered again after a backoff.
type EntryHandler func(ctx context.Context, e Entry) error

// BatchHandler processes entries in order, several at a time (one database
// commit for them, say). It returns how many of them, from the first, are
// handled; when that is fewer than len(es), err says why the next one is
// not, and is treated as an EntryHandler error for that entry.
type BatchHandler func(ctx context.Context, es []Entry) (int, error)

// GroupReader reads streams on every shard through one consumer group. Each
// shard has its own goroutine: it first re-reads this consumer's pending
// entries (left by a failed handler), periodically claims entries another
// consumer left pending longer than ClaimIdle (a dead coordinator), then
// reads new ones. Handled entries are acknowledged and removed (lua/ack.lua),
// so a stream only holds what is not processed yet.
type GroupReader struct {
	Clients  []*redis.Client // index = shard
	Group    string
	Consumer string // unique per process; default host-pid-random
	// Streams lists the streams to read on shard i (it may change over time).
	Streams func(ctx context.Context, i int, c *redis.Client) ([]string, error)
	Handle  EntryHandler
	// HandleBatch, if set, is used instead of Handle: each read's entries
	// of one stream are passed to it together.
	HandleBatch BatchHandler
	// ClaimIdle: entries pending longer than this are taken over. Default
	// DefaultClaimIdle.
	ClaimIdle time.Duration
	// Block is how long one read waits for new entries. Default 500ms.
	Block time.Duration
	// Count is the most entries read per stream per call. Default 100.
	Count int64
	// Gather, if set, is how long a shard's loop waits after a read of new
	// entries that found some but fewer than Count, so that entries gather
	// for the next: fewer, fuller reads. Each read of new entries is a
	// write on the shard (the group's delivery state), and each batch's
	// acknowledgement another: with appendfsync always, an fsync each.
	Gather time.Duration
	Logger *slog.Logger
	// OnError, if set, is called for every failure that leaves entries to
	// retry (metrics).
	OnError func()
	// OnParked, if set, is called for every entry parked (a handler error
	// marked shardstock.Permanent: left pending for an operator; metrics).
	OnParked func()
}

// ConsumerName returns a consumer name unique to this process.
func ConsumerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
}

// Run reads until ctx is done. It never gives up on a shard: errors are
// logged and retried with a capped backoff.
func (g *GroupReader) Run(ctx context.Context) {
	g.defaults()
	var wg sync.WaitGroup
	for i, c := range g.Clients {
		wg.Go(func() { g.runShard(ctx, i, c) })
	}
	wg.Wait()
}

// DefaultClaimIdle is GroupReader.ClaimIdle's default, and SHARDSTOCK_CLAIM_IDLE's.
const DefaultClaimIdle = 30 * time.Second

func (g *GroupReader) defaults() {
	if g.Consumer == "" {
		g.Consumer = ConsumerName()
	}
	if g.ClaimIdle <= 0 {
		g.ClaimIdle = DefaultClaimIdle
	}
	if g.Block <= 0 {
		g.Block = 500 * time.Millisecond
	}
	if g.Count <= 0 {
		g.Count = 100
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
}

// shardReader is the state of one shard's loop.
type shardReader struct {
	g         *GroupReader
	shard     int
	c         *redis.Client
	groups    map[string]bool // streams whose group exists
	lastClaim time.Time
	claimMore bool // the last claim's scan was not through: claim again next round
	// claimFrom is where each stream's next XAUTOCLAIM starts: the cursor
	// the last one returned ("0-0" once a scan is through), so parked or
	// busy entries at the head never hide the ones behind them.
	claimFrom map[string]string
	backoff   ha.Backoff // after a transport error
	// A stream whose entry failed in the handler is left alone until
	// heldUntil, so it holds up neither itself (no spinning) nor the
	// shard's other streams.
	heldUntil   map[string]time.Time
	holdBackoff map[string]*ha.Backoff
	// parked are entries whose handler failed with a shardstock.Permanent
	// error: they stay pending (XPENDING shows them to operators; a restart
	// retries them) and are skipped by this process.
	parked map[string]bool
	fresh  int // the most new entries one stream gave the round's read (Gather)
}

func (g *GroupReader) runShard(ctx context.Context, i int, c *redis.Client) {
	r := &shardReader{g: g, shard: i, c: c, groups: map[string]bool{},
		heldUntil: map[string]time.Time{}, holdBackoff: map[string]*ha.Backoff{}, parked: map[string]bool{},
		backoff: ha.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}}
	for ctx.Err() == nil {
		r.fresh = 0
		if err := r.round(ctx); err != nil && ctx.Err() == nil {
			r.fail(ctx, err)
			continue
		}
		r.backoff.Reset()
		if g.Gather > 0 && r.fresh > 0 && r.fresh < int(g.Count) {
			sleep(ctx, g.Gather)
		}
	}
}

// round is one pass over the streams not held: this consumer's pending
// entries, entries to claim, then new ones. It returns transport errors;
// handler errors hold their stream instead.
func (r *shardReader) round(ctx context.Context) error {
	listed, err := r.g.Streams(ctx, r.shard, r.c)
	if err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	streams := r.active(listed)
	if len(streams) == 0 {
		return sleep(ctx, r.g.Block)
	}
	if err := r.ensureGroups(ctx, streams); err != nil {
		return err
	}
	if err := r.read(ctx, streams, "0", 0); err != nil {
		return err
	}
	if r.claimMore || time.Since(r.lastClaim) >= r.g.ClaimIdle/2 {
		more, err := r.claim(ctx, streams)
		if err != nil {
			return err
		}
		// A scan that is not through (a dead consumer left more than a
		// batch) goes on next round instead of in ClaimIdle/2: 40,000
		// entries are taken over in seconds, not in half an hour.
		r.claimMore, r.lastClaim = more, time.Now()
	}
	if streams = r.active(streams); len(streams) == 0 {
		return nil
	}
	block := r.g.Block
	if r.claimMore {
		block = 0 // more to take over: read what is new without waiting for it
	}
	return r.read(ctx, streams, ">", block)
}

// active filters out the streams that are held.
func (r *shardReader) active(streams []string) []string {
	now := time.Now()
	out := make([]string, 0, len(streams))
	for _, s := range streams {
		if now.After(r.heldUntil[s]) {
			out = append(out, s)
		}
	}
	return out
}

// hold sets stream aside for a growing while (50ms doubling to 5s).
func (r *shardReader) hold(stream string, err error) {
	r.g.onError()
	b, ok := r.holdBackoff[stream]
	if !ok {
		b = &ha.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}
		r.holdBackoff[stream] = b
	}
	d := b.Next()
	r.heldUntil[stream] = time.Now().Add(d)
	r.g.Logger.Warn("stream consumer: entry not processed, will retry", "group", r.g.Group, "shard", r.shard,
		"stream", stream, "err", err, "backoff", d)
}

func (r *shardReader) ensureGroups(ctx context.Context, streams []string) error {
	for _, s := range streams {
		if r.groups[s] {
			continue
		}
		err := r.c.XGroupCreateMkStream(ctx, s, r.g.Group, "0").Err()
		if err != nil && !shard.GroupExists(err) {
			return fmt.Errorf("create group %s on %s: %w", r.g.Group, s, err)
		}
		r.groups[s] = true
	}
	return nil
}

// read reads from id ("0": this consumer's pending entries; ">": new ones)
// and handles what it got.
func (r *shardReader) read(ctx context.Context, streams []string, id string, block time.Duration) error {
	args := &redis.XReadGroupArgs{Group: r.g.Group, Consumer: r.g.Consumer, Count: r.g.Count, Block: block}
	args.Streams = append(args.Streams, streams...)
	for range streams {
		args.Streams = append(args.Streams, id)
	}
	if block == 0 {
		args.Block = -1 // no BLOCK argument: answer at once
	}
	res, err := r.c.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		switch {
		case shard.StreamDeleted(err):
			// A stream read was deleted while this read waited (a product's
			// archive): the next round lists the streams again.
			return nil
		case shard.GroupLost(err):
			r.groups = map[string]bool{} // the shard lost its data: recreate
		}
		return fmt.Errorf("xreadgroup: %w", err)
	}
	for _, st := range res {
		if id == ">" {
			r.fresh = max(r.fresh, len(st.Messages))
		}
		if err := r.handle(ctx, st.Stream, st.Messages); err != nil {
			return err
		}
	}
	return nil
}

// claim takes over entries other consumers left pending too long, a batch
// per stream; more reports that some stream's scan is not through.
func (r *shardReader) claim(ctx context.Context, streams []string) (more bool, err error) {
	if r.claimFrom == nil {
		r.claimFrom = map[string]string{}
	}
	for _, s := range streams {
		from := r.claimFrom[s]
		if from == "" {
			from = "0-0"
		}
		msgs, next, err := r.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s, Group: r.g.Group,
			Consumer: r.g.Consumer, MinIdle: r.g.ClaimIdle, Start: from, Count: r.g.Count}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("xautoclaim %s: %w", s, err)
		}
		r.claimFrom[s] = next
		more = more || next != "0-0" && next != ""
		if len(msgs) > 0 {
			r.g.Logger.Info("claimed entries left pending by another consumer", "shard", r.shard, "stream", s, "n", len(msgs))
		}
		if err := r.handle(ctx, s, msgs); err != nil {
			return false, err
		}
	}
	return more, nil
}

// handle runs the handler on each entry in order, then acknowledges and
// deletes the handled ones together (one round trip per batch; a crash
// before it only means those entries are handled again, which every
// handler tolerates). A shardstock.Permanent handler error parks that
// entry and goes on; any other handler error holds the stream (the entry
// stays pending) and ends the batch. Only an acknowledgement that failed is
// returned, as a transport error.
func (r *shardReader) handle(ctx context.Context, stream string, msgs []redis.XMessage) error {
	done := make([]string, 0, len(msgs))
	todo := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		if m.Values == nil {
			done = append(done, m.ID) // deleted while pending: nothing to process
			continue
		}
		if !r.parked[stream+" "+m.ID] {
			todo = append(todo, Entry{Shard: r.shard, Stream: stream, ID: m.ID, Fields: m.Values})
		}
	}
	for len(todo) > 0 {
		n, err := r.g.process(ctx, todo)
		if err == nil && n < len(todo) {
			err = fmt.Errorf("handler stopped after %d of %d entries", n, len(todo))
		}
		for _, e := range todo[:n] {
			done = append(done, e.ID)
		}
		if n > 0 {
			delete(r.holdBackoff, stream)
		}
		if err == nil {
			break
		}
		e := todo[n]
		if shardstock.IsPermanent(err) {
			r.parked[stream+" "+e.ID] = true
			if r.g.OnParked != nil {
				r.g.OnParked()
			}
			r.g.Logger.Error("stream consumer: entry cannot be processed; left pending for an operator",
				"group", r.g.Group, "shard", r.shard, "stream", stream, "id", e.ID, "err", err)
			todo = todo[n+1:]
			continue
		}
		if ctx.Err() == nil {
			r.hold(stream, fmt.Errorf("entry %s: %w", e.ID, err))
		}
		break
	}
	return r.ack(ctx, stream, done)
}

// process hands entries to HandleBatch, or to Handle one by one until one
// fails.
func (g *GroupReader) process(ctx context.Context, es []Entry) (int, error) {
	if g.HandleBatch != nil {
		n, err := g.HandleBatch(ctx, es)
		return min(max(n, 0), len(es)), err
	}
	for i, e := range es {
		if err := g.Handle(ctx, e); err != nil {
			return i, err
		}
	}
	return len(es), nil
}

// ack acknowledges and removes handled entries in one round trip (the
// ack script: a trim up to the group's first entry not yet acknowledged,
// XDEL only for those past it).
func (r *shardReader) ack(ctx context.Context, stream string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, compareIDs)
	args := make([]any, 0, len(ids)+1)
	args = append(args, r.g.Group)
	for _, id := range sorted {
		args = append(args, id)
	}
	if err := scripts.Ack.Run(ctx, r.c, []string{stream}, args...).Err(); err != nil {
		return fmt.Errorf("ack %d entries of %s: %w", len(ids), stream, err)
	}
	return nil
}

// compareIDs orders stream entry ids ("ms-seq") as numbers.
func compareIDs(a, b string) int {
	ams, aseq := splitID(a)
	bms, bseq := splitID(b)
	return cmp.Or(cmp.Compare(ams, bms), cmp.Compare(aseq, bseq))
}

// splitID parses a stream entry id; 0-0 if it is not one (Redis gives
// only ids).
func splitID(id string) (ms, seq uint64) {
	a, b, _ := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return ms, seq
}

func (g *GroupReader) onError() {
	if g.OnError != nil {
		g.OnError()
	}
}

func (r *shardReader) fail(ctx context.Context, err error) {
	r.g.onError()
	d := r.backoff.Next()
	r.g.Logger.Warn("stream consumer: will retry", "group", r.g.Group, "shard", r.shard, "err", err, "backoff", d)
	sleep(ctx, d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// UntilDone calls f until it succeeds or ctx is done, backing off from 50ms
// to 5s between tries: a consumer that cannot write (its database is down)
// blocks instead of dropping or spinning. It returns f's last error when
// ctx ends first, or at once a shardstock.Permanent one.
func UntilDone(ctx context.Context, log *slog.Logger, what string, f func() error) error {
	backoff := ha.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := f()
		if err == nil || ctx.Err() != nil || shardstock.IsPermanent(err) {
			return err
		}
		d := backoff.Next()
		log.Warn(what+": will retry", "err", err, "backoff", d)
		if sleep(ctx, d) != nil {
			return err
		}
	}
}
