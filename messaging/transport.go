package messaging

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Transport carries a sale's messages: reservations from the shards'
// outboxes to the order service, settlements from the order service to the
// shard that holds the unit, and payment results from the payment centre
// to the order service. One implementation per system: Streams (Redis
// Streams on the shards themselves) and Broker (RocketMQ).
type Transport interface {
	// Name is the transport's name in logs ("streams", "rocketmq").
	Name() string
	// Publish sends a settlement towards its shard (order.Settler).
	Publish(ctx context.Context, s shardstock.Settlement) error
	// Start starts delivering into p, in goroutines counted in loops that
	// end when ctx is done.
	Start(ctx context.Context, loops *sync.WaitGroup, p Pipeline) error
	// Close lets go of the transport's connections, after the loops ended.
	Close() error
}

// Pipeline is where a Transport delivers, and whom it tells. An error of
// Settle or Pay that is shardstock.IsRefused (inventory.ErrSettlementRefused,
// order.ErrPaymentRefused) is a refusal: the message changed nothing and is
// moved, with the reason, to a dead letter beside where it came from.
type Pipeline struct {
	// Ingest writes the orders of reservations (order.Service.IngestBatch):
	// how many of them, from the first, are decided, and why the next is not.
	Ingest func(ctx context.Context, evs []shardstock.ReservationEvent) (int, error)
	// Settle applies a settlement on its shard (inventory.Settlements.Settle).
	Settle func(ctx context.Context, s shardstock.Settlement) error
	// Pay applies a payment result as sent by the payment centre, with its
	// signature (order.Service.ApplyPaymentMessage).
	Pay       func(ctx context.Context, body []byte, signature string) error
	Logger    *slog.Logger
	ClaimIdle time.Duration // a stream entry pending longer is taken over (GroupReader)
	// DeadLettered, if set, is told each message moved to a dead letter:
	// what ("reservation", "settlement", "payment"), where to, and why.
	DeadLettered func(what, where string, cause error)
	// OnError and OnParked, if set, are told of a stream consumer group's
	// failures and parked entries (GroupReader; metrics).
	OnError, OnParked func(group string)
}

func (p Pipeline) deadLettered(what, where string, cause error) {
	if p.DeadLettered != nil {
		p.DeadLettered(what, where, cause)
	}
}

// reader is a GroupReader of p's on clients.
func (p Pipeline) reader(clients []*redis.Client, group string, streams func(context.Context, int, *redis.Client) ([]string, error)) *GroupReader {
	g := &GroupReader{Clients: clients, Group: group, Streams: streams, ClaimIdle: p.ClaimIdle, Logger: p.Logger}
	if p.OnError != nil {
		g.OnError = func() { p.OnError(group) }
	}
	if p.OnParked != nil {
		g.OnParked = func() { p.OnParked(group) }
	}
	return g
}

// outbox is the reader of the shards' outboxes, its batches handed to h.
func (p Pipeline) outbox(clients []*redis.Client, group string, h func(context.Context, []shardstock.ReservationEvent) (int, error)) *GroupReader {
	g := p.reader(clients, group, OutboxStreams)
	g.Count, g.Gather, g.HandleBatch = OutboxRead, OutboxGather, ReservationBatchHandler(p.Logger, h)
	return g
}

// OutboxRead is the most reservations read from one outbox at a time: one
// order transaction, one acknowledgement. Against 100 (make bench's drain
// of 160,000 reservations, 2026-12-02), 500 to 1,000 took SQLite from 37,000
// to 49,000 orders/s and cut the coordinator's CPU per order from 23 to 15
// us and the shards' from 10 to 5 (fewer commits, reads, acknowledgements
// and fsyncs per order). MariaDB's own CPU per order moved from 30-40 us at
// 100-300 to 47-115 at 1,000 (larger transactions on a table larger than its
// buffer pool), hence not more.
const OutboxRead = 500

// OutboxGather is how long the outbox reader waits after a read that was
// not full: a reservation becomes an order up to this much later, and the
// reads (each a write on the shard, and an fsync with appendfsync always,
// as is each acknowledgement) carry more each.
const OutboxGather = 50 * time.Millisecond

// Streams is the Transport on the shards themselves (Redis Streams): the
// order service reads the outboxes and the payment streams, the inventory
// the settle streams, each as a consumer group, so nothing but the shards
// needs to run.
type Streams struct {
	StreamSettler
}

var _ Transport = (*Streams)(nil)

// Name is "streams".
func (*Streams) Name() string { return "streams" }

// Start reads the outboxes, the settle streams and the payment streams.
func (t *Streams) Start(ctx context.Context, loops *sync.WaitGroup, p Pipeline) error {
	settle := SettlementHandler(p.Logger, p.Settle)
	readers := []*GroupReader{
		p.outbox(t.Clients, "orders", p.Ingest),
		p.reader(t.Clients, "inventory", SettleStreams),
		p.reader(t.Clients, "payments", PaymentStreams),
	}
	readers[1].Handle = func(ctx context.Context, e Entry) error {
		return t.refused(ctx, p, e, "settlement", shard.DeadSettleKey, settle(ctx, e))
	}
	readers[2].Handle = func(ctx context.Context, e Entry) error {
		body, _ := e.Fields["body"].(string)
		sig, _ := e.Fields["signature"].(string)
		return t.refused(ctx, p, e, "payment", shard.DeadPaymentsKey, p.Pay(ctx, []byte(body), sig))
	}
	for _, r := range readers {
		loops.Go(func() { r.Run(ctx) })
	}
	return nil
}

// refused moves entry e, which its handler refused with err, with the reason to the dead stream on e's shard; any other
// outcome is returned as it is.
func (t *Streams) refused(ctx context.Context, p Pipeline, e Entry, what, dead string, err error) error {
	if err == nil || !shardstock.IsRefused(err) {
		return err
	}
	values := []any{"body", e.Fields["body"], "reason", err.Error(), "entry", e.ID}
	if sig, ok := e.Fields["signature"]; ok {
		values = append(values, "signature", sig)
	}
	if err := t.Clients[e.Shard].XAdd(ctx, &redis.XAddArgs{Stream: dead, Values: values}).Err(); err != nil {
		return fmt.Errorf("dead-letter %s entry %s: %w", what, e.ID, err)
	}
	p.deadLettered(what, fmt.Sprintf("stream %s of shard %d", dead, e.Shard), err)
	return nil
}

// Close does nothing: the shards' clients are the shard set's.
func (*Streams) Close() error { return nil }

// Broker is the Transport through RocketMQ: a relay moves the outboxes'
// entries to the reservations topic, the order service consumes it and
// the payments topic, the inventory the settlements topic.
type Broker struct {
	MQ      *RocketMQ
	Clients []*redis.Client // the shards, whose outboxes the relay reads
}

var _ Transport = (*Broker)(nil)

// Name is "rocketmq".
func (*Broker) Name() string { return "rocketmq" }

// Publish sends a settlement on the settlements topic.
func (b *Broker) Publish(ctx context.Context, s shardstock.Settlement) error {
	return SettlementPublisher{MQ: b.MQ}.Publish(ctx, s)
}

// Start starts the relay and subscribes to the topics.
func (b *Broker) Start(ctx context.Context, loops *sync.WaitGroup, p Pipeline) error {
	consumers := Consumers{MQ: b.MQ, Logger: p.Logger, Ingest: p.Ingest,
		Settle: func(ctx context.Context, s shardstock.Settlement) error {
			return b.refused(ctx, p, "settlement", TopicDeadSettlements, "refused-settlement",
				Message{Body: s.Encode(), Properties: map[string]string{}}, p.Settle(ctx, s))
		},
		OnDeadLetter: func(ev shardstock.ReservationEvent, cause error) {
			p.deadLettered("reservation", "topic "+TopicDeadReservations, cause)
		}}
	if err := consumers.Subscribe(ctx); err != nil {
		return err
	}
	if err := b.subscribePayments(ctx, p); err != nil {
		return err
	}
	relay := p.outbox(b.Clients, "relay", b.MQ.Relay)
	loops.Go(func() { relay.Run(ctx) })
	return nil
}

// subscribePayments consumes the payments topic. A result the order
// service cannot decide yet is tried again here for a few seconds (an
// order row is usually written within them), then handed back to the
// broker for a later redelivery.
func (b *Broker) subscribePayments(ctx context.Context, p Pipeline) error {
	return b.MQ.SubscribeMessages("shardstock-payments", TopicPayments, func(_ context.Context, msg Message) error {
		sig := msg.Properties[PropSignature]
		tries, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := UntilDone(tries, p.Logger, "payment consumer", func() error { return p.Pay(tries, msg.Body, sig) })
		return b.refused(ctx, p, "payment", TopicDeadPayments, "refused-payment",
			Message{Body: msg.Body, Properties: map[string]string{PropSignature: sig}}, err)
	})
}

// refused publishes m, which its handler refused with err, with the
// reason on the dead topic; any other outcome is returned as it is.
func (b *Broker) refused(ctx context.Context, p Pipeline, what, topic, key string, m Message, err error) error {
	if err == nil || !shardstock.IsRefused(err) {
		return err
	}
	m.Properties[PropReason] = err.Error()
	if err := b.MQ.PublishMessage(ctx, topic, key, m); err != nil {
		return fmt.Errorf("dead-letter a %s: %w", what, err)
	}
	p.deadLettered(what, "topic "+topic, err)
	return nil
}

// Close closes the broker connection.
func (b *Broker) Close() error { return b.MQ.Close() }
