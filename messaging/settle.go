package messaging

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// StreamSettler publishes settlements onto the settle stream of the shard
// that holds the unit (Redis Streams mode): a settlement and the hold it
// moves live on the same master.
type StreamSettler struct {
	Clients []*redis.Client // index = shard
	Timeout time.Duration   // per publish; default 1s
	// Direct, if set, applies a settlement the shard's stream refuses
	// because the shard is at its maxmemory (OOM: XADD needs memory): the
	// settlement scripts may run there (allow-oom) and free units, so a
	// full shard still settles.
	Direct func(ctx context.Context, s shardstock.Settlement) error
}

// Publish appends s to its shard's settle stream.
func (p *StreamSettler) Publish(ctx context.Context, s shardstock.Settlement) error {
	if s.Shard < 0 || s.Shard >= len(p.Clients) {
		return fmt.Errorf("settlement for shard %d: no such shard", s.Shard)
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(p.Timeout, time.Second))
	defer cancel()
	err := p.Clients[s.Shard].XAdd(ctx, &redis.XAddArgs{Stream: shard.SettleKey,
		Values: []any{"body", string(s.Encode())}}).Err()
	if err != nil && p.Direct != nil && shard.OutOfMemory(err) {
		err = p.Direct(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("shard %d: publish settlement: %w", s.Shard, err)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// OutboxStreams lists the outbox streams of the products initialised on a
// shard; it is GroupReader.Streams for reservations.
func OutboxStreams(ctx context.Context, _ int, c *redis.Client) ([]string, error) {
	ids, err := c.SMembers(ctx, shard.ProductsKey).Result()
	if err != nil {
		return nil, err
	}
	streams := make([]string, len(ids))
	for i, id := range ids {
		streams[i] = shard.OutboxKey(id)
	}
	return streams, nil
}

// PaymentStreams is GroupReader.Streams for payment results.
func PaymentStreams(context.Context, int, *redis.Client) ([]string, error) {
	return []string{shard.PaymentsKey}, nil
}

// SettleStreams is GroupReader.Streams for settlements.
func SettleStreams(context.Context, int, *redis.Client) ([]string, error) {
	return []string{shard.SettleKey}, nil
}

// ReservationBatchHandler adapts a reservation consumer that takes several
// reservations at once (order.Service.IngestBatch, the relay) to outbox
// entries: h returns how many of its events, from the first, are handled.
// An entry that cannot be decoded can never be processed: it is logged as
// an error and acknowledged with the others.
func ReservationBatchHandler(log *slog.Logger, h func(context.Context, []shardstock.ReservationEvent) (int, error)) BatchHandler {
	return func(ctx context.Context, es []Entry) (int, error) {
		evs := make([]shardstock.ReservationEvent, 0, len(es))
		at := make([]int, 0, len(es)) // entry index of each event
		for i, e := range es {
			ev, err := shardstock.ReservationFromOutbox(e.Fields, shard.OutboxProduct(e.Stream), e.Shard)
			if err != nil {
				log.Error("dropping a malformed outbox entry", "shard", e.Shard, "stream", e.Stream, "id", e.ID, "err", err)
				continue // handled: acknowledged with the others
			}
			evs, at = append(evs, ev), append(at, i)
		}
		n, err := h(ctx, evs)
		if n >= len(evs) {
			return len(es), err
		}
		return at[n], err
	}
}

// SettlementHandler adapts a settlement consumer to settle-stream entries;
// malformed entries are handled as in ReservationBatchHandler.
func SettlementHandler(log *slog.Logger, h func(context.Context, shardstock.Settlement) error) EntryHandler {
	return func(ctx context.Context, e Entry) error {
		body, _ := e.Fields["body"].(string)
		s, err := shardstock.DecodeSettlement([]byte(body))
		if err != nil {
			log.Error("dropping a malformed settlement entry", "shard", e.Shard, "id", e.ID, "err", err)
			return nil
		}
		return h(ctx, s)
	}
}
