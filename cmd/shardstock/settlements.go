package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
)

// Settlements reach the inventory on the shards' settle streams (Redis
// Streams) or the settlements topic (RocketMQ), where anyone who can write
// to them could put one. The inventory applies only what the order table
// bears out (inventory.ErrSettlementRefused otherwise); a refused
// settlement changes nothing and is moved, with the reason, to a dead-letter
// stream on the same shard or a dead-letter topic, counted
// (shardstock_settlements_refused_total) and alerted on.

// settleReader reads the shards' settle streams (Redis Streams mode).
func (m *Main) settleReader() *messaging.GroupReader {
	clients := m.clients()
	apply := messaging.SettlementHandler(m.log, m.inv.settlements.Settle)
	return &messaging.GroupReader{Clients: clients, Streams: messaging.SettleStreams, Group: "inventory",
		ClaimIdle: m.cfg.ClaimIdle, Logger: m.log,
		OnError:  m.metrics.ConsumerErrors.WithLabelValues("inventory").Inc,
		OnParked: m.metrics.ParkedEntries.WithLabelValues("inventory").Inc,
		Handle: func(ctx context.Context, e messaging.Entry) error {
			err := apply(ctx, e)
			if !errors.Is(err, inventory.ErrSettlementRefused) {
				return err
			}
			body, _ := e.Fields["body"].(string)
			if err := clients[e.Shard].XAdd(ctx, &redis.XAddArgs{Stream: shard.DeadSettleKey, Values: []any{
				"body", body, "reason", err.Error(), "entry", e.ID}}).Err(); err != nil {
				return fmt.Errorf("dead-letter settlement entry %s: %w", e.ID, err)
			}
			m.refusedSettlement(fmt.Sprintf("stream %s of shard %d", shard.DeadSettleKey, e.Shard), err)
			return nil
		}}
}

// settleFromTopic applies a settlement from the settlements topic
// (RocketMQ mode), moving a refused one to the dead-letter topic.
func (m *Main) settleFromTopic(ctx context.Context, st shardstock.Settlement) error {
	err := m.inv.settlements.Settle(ctx, st)
	if !errors.Is(err, inventory.ErrSettlementRefused) {
		return err
	}
	dead := messaging.Message{Body: st.Encode(), Properties: map[string]string{messaging.PropReason: err.Error()}}
	if err := m.rmq.PublishMessage(ctx, messaging.TopicDeadSettlements, "refused-settlement", dead); err != nil {
		return fmt.Errorf("dead-letter a settlement: %w", err)
	}
	m.refusedSettlement("topic "+messaging.TopicDeadSettlements, err)
	return nil
}

// refusedSettlement logs and counts a refused settlement once it is on its
// dead-letter stream or topic.
func (m *Main) refusedSettlement(where string, cause error) {
	m.metrics.RefusedSettles.Inc()
	m.log.Error("settlement refused, nothing changed; moved to the dead-letter "+where+
		" (who else can write to the settle streams or the settlements topic?)", "err", cause)
}
