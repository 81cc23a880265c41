package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardstock/shardstock"
)

// StockSource gives the shared shard snapshot (inventory.Views).
type StockSource interface {
	Snapshot(ctx context.Context) ([]string, []shardstock.ShardSnapshot, error)
}

// StockLimits gives each product's total stock (for the oversell alert).
type StockLimits interface {
	StockOf(ctx context.Context, product string) (int64, error)
}

var (
	descUnits = prometheus.NewDesc("shardstock_stock_units",
		"A product's units on a shard by state: salable, locked, sold, alloc.", []string{"shard", "product", "state"}, nil)
	descStock = prometheus.NewDesc("shardstock_product_stock",
		"A product's total stock as defined.", []string{"product"}, nil)
	descUp = prometheus.NewDesc("shardstock_shard_up",
		"1 when the shard answered the last read, else 0.", []string{"shard", "addr"}, nil)
	descOutbox = prometheus.NewDesc("shardstock_outbox_backlog",
		"Outbox entries on a shard not yet turned into orders (streams) or relayed (rocketmq).", []string{"shard"}, nil)
	descSettle = prometheus.NewDesc("shardstock_settle_backlog",
		"Settlements on a shard's settle stream not yet applied (streams mode).", []string{"shard"}, nil)
	descMemory = prometheus.NewDesc("shardstock_shard_memory_bytes",
		"A shard's memory: used (used_memory) and max (maxmemory; 0: no limit). At max a noeviction shard refuses new holds.", []string{"shard", "kind"}, nil)
	descBreaker = prometheus.NewDesc("shardstock_shard_breaker_state",
		"A shard's circuit breaker: 0 closed (in rotation), 1 open (skipped), 2 half-open (probing).", []string{"shard"}, nil)
	descFenced = prometheus.NewDesc("shardstock_shard_fenced",
		"A shard's restart fence: 0 open (sells), 1 fenced (restarted, resync running), 2 kept fenced: its resync found it disagreeing with the order table or the transfer log (GET /admin/v1/shards says why).", []string{"shard"}, nil)
	descPool = prometheus.NewDesc("shardstock_redis_pool_connections",
		"go-redis pool connections per shard: total or idle.", []string{"shard", "kind"}, nil)
	descPoolEvents = prometheus.NewDesc("shardstock_redis_pool_events_total",
		"go-redis pool events per shard: hits, misses, timeouts.", []string{"shard", "event"}, nil)
)

// ShardCollector exports the shard snapshot at scrape time.
type ShardCollector struct {
	Source StockSource
	Limits StockLimits
	// Breakers, if set, gives each shard's breaker state: 0 closed, 1 open,
	// 2 half-open.
	Breakers func() []int
	// Fences, if set, gives each shard's fence: 0 open, 1 fenced, 2 kept
	// fenced by a disagreement.
	Fences func() []int
}

// Describe sends the descriptors.
func (c *ShardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUnits, descStock, descUp, descOutbox, descSettle, descPool, descPoolEvents, descBreaker, descMemory, descFenced} {
		ch <- d
	}
}

// Collect reads the (cached) snapshot.
func (c *ShardCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c.Fences != nil {
		for i, st := range c.Fences() {
			ch <- prometheus.MustNewConstMetric(descFenced, prometheus.GaugeValue, float64(st), strconv.Itoa(i))
		}
	}
	if c.Breakers != nil {
		for i, st := range c.Breakers() {
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(st), strconv.Itoa(i))
		}
	}
	products, shards, err := c.Source.Snapshot(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descUp, err)
		return
	}
	for _, p := range products {
		if stock, err := c.Limits.StockOf(ctx, p); err == nil {
			ch <- prometheus.MustNewConstMetric(descStock, prometheus.GaugeValue, float64(stock), p)
		}
	}
	for _, sh := range shards {
		c.collectShard(ch, sh)
	}
}

func (c *ShardCollector) collectShard(ch chan<- prometheus.Metric, sh shardstock.ShardSnapshot) {
	idx := strconv.Itoa(sh.Index)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if sh.Pool != nil {
		gauge(descPool, float64(sh.Pool.Total), idx, "total")
		gauge(descPool, float64(sh.Pool.Idle), idx, "idle")
		for ev, v := range map[string]uint32{"hits": sh.Pool.Hits, "misses": sh.Pool.Misses, "timeouts": sh.Pool.Timeouts} {
			ch <- prometheus.MustNewConstMetric(descPoolEvents, prometheus.CounterValue, float64(v), idx, ev)
		}
	}
	if sh.Err != nil {
		gauge(descUp, 0, idx, sh.Addr)
		return
	}
	gauge(descUp, 1, idx, sh.Addr)
	gauge(descOutbox, float64(sh.Outbox), idx)
	gauge(descSettle, float64(sh.Settle), idx)
	gauge(descMemory, float64(sh.UsedMemory), idx, "used")
	gauge(descMemory, float64(sh.MaxMemory), idx, "max")
	for p, cn := range sh.Products {
		if !cn.Known {
			continue
		}
		gauge(descUnits, float64(cn.Salable), idx, p, "salable")
		gauge(descUnits, float64(cn.Locked), idx, p, "locked")
		gauge(descUnits, float64(cn.Sold), idx, p, "sold")
		gauge(descUnits, float64(cn.Alloc), idx, p, "alloc")
	}
}

// OrderCounter counts orders by status (sqlstore.Orders).
type OrderCounter interface {
	CountAllByStatus(ctx context.Context) (map[shardstock.OrderStatus]int64, error)
}

var descOrders = prometheus.NewDesc("shardstock_orders", "Order rows by status.", []string{"status"}, nil)

// OrderCollector exports order counts, cached for TTL.
type OrderCollector struct {
	Orders OrderCounter
	TTL    time.Duration
	// Failed, if set, is told each count that failed (logs).
	Failed func(error)
	mu     sync.Mutex // guards cache; concurrent scrapes share one query
	cache  cachedCounts
}

type cachedCounts struct {
	at     time.Time
	counts map[shardstock.OrderStatus]int64
}

// Describe sends the descriptor.
func (c *OrderCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descOrders }

// Collect reads the counts, at most once per TTL. When the database does
// not answer within a second (a count over a large orders table while the
// order writers are busy), the last counts read are sent again, or none:
// an error here would fail the whole scrape with 500, and with it the
// shards' health and the outbox backlog, when they matter most.
func (c *OrderCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.cache.at) > c.TTL || c.cache.counts == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		counts, err := c.Orders.CountAllByStatus(ctx)
		if err == nil {
			c.cache = cachedCounts{at: time.Now(), counts: counts}
		} else if c.Failed != nil {
			c.Failed(err)
		}
	}
	if c.cache.counts == nil {
		return
	}
	for _, st := range shardstock.OrderStatuses {
		ch <- prometheus.MustNewConstMetric(descOrders, prometheus.GaugeValue, float64(c.cache.counts[st]), string(st))
	}
}

// QueueFigures are one waiting room's figures (waitroom.Room.Lines).
type QueueFigures struct {
	Product                  string
	Joined, Serving, Waiting int64
	Paused, Held             bool
}

// QueueCollector exports every waiting room's figures, from memory: the
// room refreshes them twice a second.
type QueueCollector struct {
	Lines func() []QueueFigures
}

var (
	descQueueJoined  = prometheus.NewDesc("shardstock_queue_joined", "Places handed out in a product's waiting room.", []string{"product"}, nil)
	descQueueServing = prometheus.NewDesc("shardstock_queue_serving", "A waiting room's number now serving: every place up to it has had its turn.", []string{"product"}, nil)
	descQueueWaiting = prometheus.NewDesc("shardstock_queue_waiting", "Buyers in a waiting room whose turn has not come.", []string{"product"}, nil)
	descQueuePaused  = prometheus.NewDesc("shardstock_queue_paused", "1 while an operator holds a waiting room's number now serving.", []string{"product"}, nil)
	descQueueHeld    = prometheus.NewDesc("shardstock_queue_held", "1 while a waiting room's number waits for a unit to come back (none is left).", []string{"product"}, nil)
)

// Describe sends the descriptors.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueueJoined
	ch <- descQueueServing
	ch <- descQueueWaiting
	ch <- descQueuePaused
	ch <- descQueueHeld
}

// Collect sends every line's figures.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, l := range c.Lines() {
		ch <- prometheus.MustNewConstMetric(descQueueJoined, prometheus.GaugeValue, float64(l.Joined), l.Product)
		ch <- prometheus.MustNewConstMetric(descQueueServing, prometheus.GaugeValue, float64(l.Serving), l.Product)
		ch <- prometheus.MustNewConstMetric(descQueueWaiting, prometheus.GaugeValue, float64(l.Waiting), l.Product)
		ch <- prometheus.MustNewConstMetric(descQueuePaused, prometheus.GaugeValue, flag(l.Paused), l.Product)
		ch <- prometheus.MustNewConstMetric(descQueueHeld, prometheus.GaugeValue, flag(l.Held), l.Product)
	}
}
