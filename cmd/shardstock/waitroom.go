package main

import (
	"context"
	"fmt"

	"github.com/shardstock/shardstock/metrics"
	"github.com/shardstock/shardstock/waitroom"
)

// openRoom opens the waiting rooms: their lines from SQL, the units left
// from the shards' snapshot.
func (m *Main) openRoom(ctx context.Context) error {
	m.room = waitroom.New(waitroom.Config{Store: m.store.Queues, Products: m.inv.catalog, Stock: m.unitsLeft,
		Secret: m.cfg.QueueSecret, Now: m.clock.Now, Known: m.clock.Known, Logger: m.log})
	if err := m.room.Start(ctx); err != nil {
		return fmt.Errorf("SHARDSTOCK_DB: %w", err)
	}
	m.registry.MustRegister(&metrics.QueueCollector{Lines: m.queueFigures})
	return nil
}

func (m *Main) queueFigures() []metrics.QueueFigures {
	var out []metrics.QueueFigures
	for _, l := range m.room.Lines() {
		out = append(out, metrics.QueueFigures{Product: l.Product, Joined: l.Joined, Serving: l.Serving, Waiting: l.Waiting, Paused: l.Paused, Held: l.Held})
	}
	return out
}

// unitsLeft are the units of product salable and reserved on the shards
// that answer and hold it; complete when every shard did (an outage, or a
// shard that lost the product before its resync, is never taken for a
// sell-out).
func (m *Main) unitsLeft(ctx context.Context, product string) (waitroom.Units, error) {
	v, err := m.inv.views.Stock(ctx, product)
	if err != nil {
		return waitroom.Units{}, err
	}
	return waitroom.Units{Salable: v.Salable, Locked: v.Locked, Complete: v.Complete()}, nil
}
