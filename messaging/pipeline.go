package messaging

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardstock/shardstock"
)

// The order pipeline on RocketMQ: the relay moves outbox entries to the
// reservations topic, the order service consumes it, and settlements go
// to the inventory over their own topic. (In Streams mode GroupReaders do
// all of it: streams.go, settle.go.)

// SettlementPublisher publishes settlements on the broker (order.Settler).
type SettlementPublisher struct{ MQ *RocketMQ }

// Publish sends one settlement, keyed by its order id.
func (s SettlementPublisher) Publish(ctx context.Context, st shardstock.Settlement) error {
	return s.MQ.Publish(ctx, TopicSettlements, st.OrderID, st.Encode())
}

// Relay publishes the reservations of one outbox read to the broker in one
// batch (message key = reservation id): a batch handler for the outbox
// GroupReader, whose entries are acknowledged only after the broker took
// them.
func (r *RocketMQ) Relay(ctx context.Context, evs []shardstock.ReservationEvent) (int, error) {
	keys, bodies := make([]string, len(evs)), make([][]byte, len(evs))
	for i, ev := range evs {
		keys[i], bodies[i] = ev.ID, ev.Encode()
	}
	if err := r.PublishBatch(ctx, TopicReservations, keys, bodies); err != nil {
		return 0, err
	}
	return len(evs), nil
}

// ConsumeBatch is the most reservations the order consumer takes from the
// broker at once: one pull, one order transaction (Streams mode: OutboxRead).
// At 32 (the client's default pull) MariaDB committed once per 32 orders;
// the broker hands out this many in a pull only with its
// maxTransferCount settings raised (deploy/rocketmq.sh: 512).
const ConsumeBatch = 256

// Consumers are the order service's and the inventory's subscriptions on
// the broker.
type Consumers struct {
	MQ     *RocketMQ
	Logger *slog.Logger
	// Ingest writes the orders of reservations (order.Service.IngestBatch):
	// how many of them, from the first, are decided, and why the next is
	// not. A shardstock.Refused error sends that reservation alone to
	// the dead-letter topic.
	Ingest func(ctx context.Context, evs []shardstock.ReservationEvent) (int, error)
	// Settle applies a settlement to its shard (inventory.Settlements.Settle).
	Settle func(ctx context.Context, st shardstock.Settlement) error
	// OnDeadLetter, if set, is told each reservation dead-lettered, and why.
	OnDeadLetter func(ev shardstock.ReservationEvent, cause error)
}

// Subscribe starts both subscriptions; they run until the RocketMQ client
// is closed.
func (c Consumers) Subscribe(ctx context.Context) error {
	err := c.MQ.SubscribeBatch("shardstock-orders", TopicReservations, ConsumeBatch, func(_ context.Context, bodies [][]byte) error {
		evs := make([]shardstock.ReservationEvent, 0, len(bodies))
		for _, body := range bodies {
			ev, err := shardstock.DecodeReservation(body)
			if err != nil {
				c.Logger.Error("dropping a malformed reservation message", "err", err)
				continue
			}
			evs = append(evs, ev)
		}
		// A reservation that can never be written (shardstock.IsRefused) goes
		// alone to the dead-letter topic, and the ones after it are written
		// now; any other error retries what is left of the call.
		return UntilDone(ctx, c.Logger, "order consumer", func() error {
			for len(evs) > 0 {
				n, err := c.Ingest(ctx, evs)
				evs = evs[n:]
				if err == nil || !shardstock.IsRefused(err) || len(evs) == 0 {
					return err
				}
				if err := c.deadLetter(ctx, evs[0], err); err != nil {
					return err
				}
				evs = evs[1:]
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return c.MQ.Subscribe("shardstock-inventory", TopicSettlements, func(_ context.Context, body []byte) error {
		st, err := shardstock.DecodeSettlement(body)
		if err != nil {
			c.Logger.Error("dropping a malformed settlement message", "err", err)
			return nil
		}
		// A settlement whose shard does not answer goes back to the broker
		// (its retry topic) after a few seconds of tries, so it holds up
		// neither the queue nor the other shards' settlements behind it.
		tries, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return UntilDone(tries, c.Logger, "settlement consumer", func() error { return c.Settle(tries, st) })
	})
}

// deadLetter puts a reservation the order service can never write on the
// dead-letter topic, with why in the log.
func (c Consumers) deadLetter(ctx context.Context, ev shardstock.ReservationEvent, cause error) error {
	if err := c.MQ.Publish(ctx, TopicDeadReservations, ev.ID, ev.Encode()); err != nil {
		return fmt.Errorf("dead-letter %s: %w", ev.ID, err)
	}
	if c.OnDeadLetter != nil {
		c.OnDeadLetter(ev, cause)
	}
	c.Logger.Error("reservation moved to the dead-letter topic", "order", ev.ID, "product", ev.ProductID,
		"topic", TopicDeadReservations, "err", cause)
	return nil
}
