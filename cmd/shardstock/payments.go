package main

import (
	"context"
	"errors"

	"github.com/shardstock/shardstock/order"
)

// Payment results as messages: the payment centre publishes each result
// (an order.PaymentResult, signed like the callback) on the payments topic
// (RocketMQ) or appends it to the payments stream of any shard (Redis
// Streams). The order service applies it as it applies the callback;
// whatever it refuses goes to a dead-letter topic or stream with the
// reason, and whatever it cannot decide yet (the order row is not written,
// the database is down) is delivered again.

// applyPayment applies one payment message and counts the outcome; a
// refused message is returned as order.ErrPaymentRefused for the transport
// to dead-letter.
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
