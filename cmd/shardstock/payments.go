package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
)

// Payment results as messages: the payment centre publishes each result
// (an order.PaymentResult, signed like the callback) on the payments topic
// (RocketMQ) or appends it to the payments stream of any shard (Redis
// Streams). The order service applies it as it applies the callback;
// whatever it refuses goes to a dead-letter topic or stream with the
// reason, and whatever it cannot decide yet (the order row is not written,
// the database is down) is delivered again.

// applyPayment applies one payment message and counts the outcome; a
// refused message is returned as order.ErrPaymentRefused for the caller to
// dead-letter.
func (m *Main) applyPayment(ctx context.Context, body []byte, signature string) error {
	outcome, err := m.orders.ApplyPaymentMessage(ctx, body, signature)
	switch {
	case err == nil:
		m.metrics.PaymentMessages.WithLabelValues(outcome).Inc()
	case !errors.Is(err, order.ErrPaymentRefused):
		m.metrics.PaymentMessages.WithLabelValues("retried").Inc()
	}
	return err
}

// deadPayment logs and counts a refused payment message once it is on the
// dead-letter topic or stream.
func (m *Main) deadPayment(where string, cause error) {
	m.metrics.PaymentMessages.WithLabelValues("dead_lettered").Inc()
	m.log.Error("payment message refused; moved to the dead-letter "+where, "err", cause)
}

// paymentReader reads the shards' payment streams (Redis Streams mode).
func (m *Main) paymentReader() *messaging.GroupReader {
	clients := m.clients()
	return &messaging.GroupReader{Clients: clients, Streams: messaging.PaymentStreams, Group: "payments",
		ClaimIdle: m.cfg.ClaimIdle, Logger: m.log,
		OnError:  m.metrics.ConsumerErrors.WithLabelValues("payments").Inc,
		OnParked: m.metrics.ParkedEntries.WithLabelValues("payments").Inc,
		Handle: func(ctx context.Context, e messaging.Entry) error {
			body, _ := e.Fields["body"].(string)
			sig, _ := e.Fields["signature"].(string)
			err := m.applyPayment(ctx, []byte(body), sig)
			if !errors.Is(err, order.ErrPaymentRefused) {
				return err
			}
			// Kept on the same shard, with the entry's own id to find it by.
			if err := clients[e.Shard].XAdd(ctx, &redis.XAddArgs{Stream: shard.DeadPaymentsKey, Values: []any{
				"body", body, "signature", sig, "reason", err.Error(), "entry", e.ID}}).Err(); err != nil {
				return fmt.Errorf("dead-letter payment entry %s: %w", e.ID, err)
			}
			m.deadPayment("stream "+shard.DeadPaymentsKey, err)
			return nil
		}}
}

// subscribePayments consumes the payments topic (RocketMQ mode). A result
// the order service cannot decide yet is tried again here for a few
// seconds (an order row is usually written within them), then handed back
// to the broker for a later redelivery.
func (m *Main) subscribePayments(ctx context.Context) error {
	err := m.rmq.SubscribeMessages("shardstock-payments", messaging.TopicPayments, func(_ context.Context, msg messaging.Message) error {
		sig := msg.Properties[messaging.PropSignature]
		tries, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := messaging.UntilDone(tries, m.log, "payment consumer", func() error { return m.applyPayment(tries, msg.Body, sig) })
		if !errors.Is(err, order.ErrPaymentRefused) {
			return err
		}
		dead := messaging.Message{Body: msg.Body, Properties: map[string]string{
			messaging.PropSignature: sig, messaging.PropReason: err.Error()}}
		if err := m.rmq.PublishMessage(ctx, messaging.TopicDeadPayments, "refused-payment", dead); err != nil {
			return fmt.Errorf("dead-letter a payment message: %w", err)
		}
		m.deadPayment("topic "+messaging.TopicDeadPayments, err)
		return nil
	})
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_MQ: %w", err)
	}
	return nil
}
