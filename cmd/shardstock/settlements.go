package main

// Settlements reach the inventory on the shards' settle streams (Redis
// Streams) or the settlements topic (RocketMQ), where anyone who can write
// to them could put one. The inventory applies only what the order table
// bears out (inventory.ErrSettlementRefused otherwise); a refused
// settlement changes nothing and is moved by the transport, with the
// reason, to a dead-letter stream on the same shard or a dead-letter topic,
// counted (shardstock_settlements_refused_total) and alerted on. Payment
// results the order service refuses (order.ErrPaymentRefused) go the same
// way (payments.go).

// deadLettered logs and counts a message the transport moved to a dead
// letter.
func (m *Main) deadLettered(what, where string, cause error) {
	switch what {
	case "settlement":
		m.metrics.RefusedSettles.Inc()
		m.log.Error("settlement refused, nothing changed; moved to the dead-letter "+where+
			" (who else can write to the settle streams or the settlements topic?)", "err", cause)
	case "payment":
		m.metrics.PaymentMessages.WithLabelValues("dead_lettered").Inc()
		m.log.Error("payment message refused; moved to the dead-letter "+where, "err", cause)
	default: // a reservation the order service can never write (logged by the transport)
		m.metrics.DeadLettered.Inc()
	}
}
