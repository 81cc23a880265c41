// Package metrics is shardstock's Prometheus instrumentation. Everything is
// registered on an injected Registerer (never the global one); names carry
// the shardstock_ prefix. Event counters are updated by the code that sees
// the event; state (stock, backlogs, orders, shard health) is read by
// collectors at scrape time from caches, so a scrape never costs one Redis
// call per product. It imports shard (the snapshot and Health types) and
// the root's value types, nothing else of shardstock's.
package metrics

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Metrics are the event counters and histograms.
type Metrics struct {
	Purchases        *prometheus.CounterVec // by outcome: reserved or the error code
	PurchaseSeconds  prometheus.Histogram
	Failovers        prometheus.Counter
	RedisErrors      *prometheus.CounterVec        // by shard
	ConsumerErrors   *prometheus.CounterVec        // by consumer group
	ParkedEntries    *prometheus.CounterVec        // by consumer group
	DeadLettered     prometheus.Counter            // reservations moved to the dead-letter topic
	PaymentMessages  *prometheus.CounterVec        // payment result messages by outcome
	ClockSkew        prometheus.Gauge              // this coordinator's clock minus the shards' clock
	SpoolWriteErrors prometheus.Counter            // failed spool writes (a full disk)
	Settlements      *prometheus.CounterVec        // by action
	RefusedSettles   prometheus.Counter            // settlements the order table did not bear out
	OrdersIngested   *prometheus.CounterVec        // by status written
	RateLimited      *prometheus.CounterVec        // by scope
	purchases        map[string]prometheus.Counter // Purchases by known outcome, resolved once
	PipelineCalls    prometheus.Histogram          // script calls per coalesced round trip
}

// New registers the metrics, the Go and process collectors on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		purchases: map[string]prometheus.Counter{},
		Purchases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_purchase_requests_total",
			Help: "Purchase requests by outcome: reserved, or the error code answered (sold_out, limit_reached, unavailable, bad_request, ...)."},
			[]string{"outcome"}),
		PurchaseSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shardstock_purchase_duration_seconds",
			Help:    "Time to answer a purchase request.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}}),
		Failovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardstock_failovers_total",
			Help: "Purchase attempts that moved on to another shard after one answered empty or failed."}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_redis_errors_total",
			Help: "Failed Redis calls (transport errors, deadlines, script errors) by shard."}, []string{"shard"}),
		ConsumerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_consumer_errors_total",
			Help: "Stream consumer and relay failures (entries retried later) by consumer group."}, []string{"group"}),
		ParkedEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_stream_parked_entries_total",
			Help: "Stream entries that can never be processed (left pending for an operator; see XPENDING), by consumer group."}, []string{"group"}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardstock_reservations_dead_lettered_total",
			Help: "Reservations the order service can never write, moved to the dead-letter topic (RocketMQ)."}),
		PaymentMessages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_payment_messages_total",
			Help: "Payment result messages by outcome: applied, duplicate, stale (a fail after the success), retried (the order not written yet, or the database down), dead_lettered (refused: see the dead-letter topic or stream)."},
			[]string{"outcome"}),
		SpoolWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardstock_spool_write_errors_total",
			Help: "Writes to the disk spool that failed (a full or broken disk): purchases are refused with 503, replay outcomes wait in memory."}),
		ClockSkew: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shardstock_clock_skew_seconds",
			Help: "How far this coordinator's clock is ahead of the shards' (the sale's one clock; negative: behind). The coordinator corrects its own checks by it."}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_settlements_applied_total",
			Help: "Settlements applied to a holder shard, by action."}, []string{"action"}),
		RefusedSettles: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardstock_settlements_refused_total",
			Help: "Settlements the order table does not bear out (forged, or contradicting their order): nothing changed; each is on the dead-letter stream ss:settle:dead of its shard or the topic shardstock_settlements_dead, with the reason."}),
		OrdersIngested: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_orders_ingested_total",
			Help: "Reservations written as order rows by this process, by status written."}, []string{"status"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardstock_rate_limited_total",
			Help: "Purchase requests refused by a rate limit, by scope: global, product, user, ip."}, []string{"scope"}),
		PipelineCalls: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shardstock_redis_pipeline_calls",
			Help:    "Script calls sent together in one round trip to a shard (request coalescing; 1 at low load).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}),
	}
	for _, s := range []string{"global", "product", "user", "ip"} {
		m.RateLimited.WithLabelValues(s)
	}
	// Known label values start at zero, so every series exists from the
	// first scrape (rates and alerts need no special case for "absent").
	for _, o := range []string{"reserved", "queued", "sold_out", "limit_reached", "not_started", "ended", "paused", "unavailable",
		"bad_request", "unauthorized", "not_found", "too_large", "unsupported_media_type", "rate_limited", "internal"} {
		m.purchases[o] = m.Purchases.WithLabelValues(o)
	}
	for _, o := range []string{"applied", "duplicate", "stale", "retried", "dead_lettered"} {
		m.PaymentMessages.WithLabelValues(o)
	}
	for _, g := range []string{"orders", "relay", "inventory", "payments"} {
		m.ConsumerErrors.WithLabelValues(g)
		m.ParkedEntries.WithLabelValues(g)
	}
	for _, a := range []shardstock.Action{shardstock.Confirm, shardstock.Release, shardstock.ReleaseDuplicate} {
		m.Settlements.WithLabelValues(string(a))
	}
	for _, s := range []shardstock.OrderStatus{shardstock.StatusAwaitingPayment, shardstock.StatusFailed} {
		m.OrdersIngested.WithLabelValues(string(s))
	}
	reg.MustRegister(m.Purchases, m.PurchaseSeconds, m.Failovers, m.RedisErrors, m.ConsumerErrors, m.ParkedEntries, m.DeadLettered, m.PaymentMessages, m.ClockSkew, m.SpoolWriteErrors, m.Settlements, m.RefusedSettles,
		m.OrdersIngested, m.RateLimited, m.PipelineCalls, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObservePurchase counts one answered purchase.
func (m *Metrics) ObservePurchase(outcome string, took time.Duration) {
	if c, ok := m.purchases[outcome]; ok {
		c.Inc()
	} else {
		m.Purchases.WithLabelValues(outcome).Inc()
	}
	m.PurchaseSeconds.Observe(took.Seconds())
}

// CountErrors returns h with each failed call on a shard counted in
// RedisErrors on its way (shard.Config.Health). A call its caller
// cancelled is not counted: it says nothing about the shard.
func (m *Metrics) CountErrors(h shard.Health) shard.Health { return countedHealth{h, m} }

type countedHealth struct {
	shard.Health
	m *Metrics
}

func (h countedHealth) Observe(i int, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		h.m.RedisErrors.WithLabelValues(strconv.Itoa(i)).Inc()
	}
	h.Health.Observe(i, err)
}
