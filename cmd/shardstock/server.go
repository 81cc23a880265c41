package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/metrics"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/report"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/spool"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/waitroom"
)

// Main is the server process: it wires the adapters together. Tests start
// it on 127.0.0.1:0 and talk to URL().
type Main struct {
	cfg *config.Config
	log *slog.Logger

	registry *prometheus.Registry
	metrics  *metrics.Metrics
	store    *sqlstore.Store
	set      *shard.Set
	mq       messaging.Transport
	spool    *spool.Spool // nil: disabled
	buyers   *flashsale.Handler
	health   *ha.Health
	report   *report.Recorder
	inv      inventoryServices
	orders   *order.Service
	listener net.Listener
	server   *http.Server

	closeOnce sync.Once
	closeErr  error
	stopLoops context.CancelFunc
	loops     sync.WaitGroup            // background loops; Close waits for them
	resyncs   *inventory.ResyncRequests // the shards asking for a resync (inventory.Restarts answers)
	stopSync  context.CancelFunc
	spooled   atomic.Pointer[spool.Spool] // the spool for the resync loop, which starts before it opens
	clock     *shard.Clock                // the sale's clock: this coordinator's, moved onto the shards'
	pages     *flashsale.Pages
	room      *waitroom.Room
	served    chan error
}

// NewMain returns a Main for cfg that logs to w.
func NewMain(cfg *config.Config, w io.Writer) *Main {
	return &Main{cfg: cfg, log: newLogger(cfg, w)}
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	if w == nil {
		w = io.Discard
	}
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Run opens the order database (migrating it), the shard set and the
// message transport, starts the background loops and starts serving; it
// returns once the listener is open, or with the error that prevented it
// (the caller then calls Close).
func (m *Main) Run(ctx context.Context) error {
	if err := m.openStore(ctx); err != nil {
		return err
	}
	m.registry = prometheus.NewRegistry()
	m.metrics = metrics.New(m.registry)
	// A shard whose pings take longer than a call may is as good as down.
	m.health = ha.NewHealth(ha.HealthConfig{Shards: len(m.cfg.Shards), SlowAfter: m.cfg.ShardTimeout, Answered: shard.Answered})
	for i := range m.cfg.Shards {
		m.metrics.RedisErrors.WithLabelValues(strconv.Itoa(i))
	}
	m.resyncs = inventory.NewResyncRequests()
	set, err := shard.Open(m.cfg.Shards, shard.Config{Timeout: m.cfg.ShardTimeout, RootCAs: m.cfg.RedisCAs, Logger: m.log, Coalesce: m.cfg.Coalesce, BatchGap: m.cfg.BatchGap, Start: m.cfg.Start, Ledger: m.store.Orders, Inits: m.store.Catalog, EmptyTTL: m.cfg.Test.EmptyTTL,
		Dialer: m.cfg.Test.Dial, Resync: m.resyncs.Request,
		Health: m.metrics.CountErrors(m.health), OnFailover: m.metrics.Failovers.Inc,
		OnBatch: func(n int) { m.metrics.PipelineCalls.Observe(float64(n)) }})
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_SHARDS: %w", err)
	}
	m.set = set
	if err := set.CheckCredentials(ctx); err != nil {
		return fmt.Errorf("SHARDSTOCK_SHARDS: %w", err)
	}
	m.clock = shard.NewClock(shard.ClockConfig{Set: set, Wall: m.cfg.Test.Clock, OnSkew: func(d time.Duration) { m.metrics.ClockSkew.Set(d.Seconds()) }})
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardstock_claim_givebacks_pending",
		Help: "Per-user limit claims waiting for their register to answer so they can be given back."},
		func() float64 { return float64(set.PendingGiveBacks()) }))
	m.openInventory()
	m.registry.MustRegister(&metrics.ShardCollector{Source: m.inv.views, Limits: m.inv.views, Breakers: m.breakerStates, Fences: m.inv.restarts.FenceStates},
		&metrics.OrderCollector{Orders: m.store.Orders, TTL: time.Second, Failed: func(err error) {
			m.log.Warn("order counts for /metrics: the database did not answer; the last counts are shown", "err", err)
		}})
	if err := m.inv.catalog.RefreshControls(ctx); err != nil {
		return fmt.Errorf("SHARDSTOCK_DB: product controls: %w", err)
	}
	if err := m.checkShardList(ctx); err != nil {
		return err
	}
	if err := m.startResyncs(); err != nil {
		return err
	}
	if m.mq, err = m.openTransport(ctx); err != nil {
		return err
	}
	m.orders = order.NewService(order.Config{Store: m.store.Orders, Catalog: m.store.Catalog, Settler: m.mq, Holds: inventory.HoldSearch{Holds: set.Holds, Products: m.inv.catalog, Now: m.clock.Now, Keep: 2 * m.cfg.FailFastAge}, Claims: set.Purchases, LateHolds: m.inv.resync, PayTimeout: m.cfg.PayTimeout,
		FailFastAge: m.cfg.FailFastAge, Rate: m.cfg.OrderRate, Now: m.cfg.Test.OrderClock, Logger: m.log, PaySecret: m.cfg.PaySecret, PayPrevious: m.cfg.PayPrevious,
		Budget:   set,
		OnIngest: func(st shardstock.OrderStatus) { m.metrics.OrdersIngested.WithLabelValues(string(st)).Inc() }})
	if err := m.openSpool(); err != nil {
		return err
	}
	if err := m.openRoom(ctx); err != nil {
		return err
	}
	m.report = report.NewRecorder(report.RecorderConfig{Store: m.store.Reports, Stock: m.inv.views.Salable, Logger: m.log})
	m.pages = flashsale.NewPages(flashsale.PagesConfig{Products: m.inv.catalog, Sessions: m.store.Sessions, IDs: m.store.Catalog.ProductIDs})
	m.buyers = flashsale.NewHandler(flashsale.Config{Products: m.inv.catalog, Cache: m.inv.catalog, Reserver: m.set.Purchases, Identity: m.identity(), RealIP: m.realIP(),
		Now: m.clock.Now, NowKnown: m.clock.Known, MaxInFlight: m.cfg.MaxInFlight,
		Observe: m.observePurchase, Spool: m.spoolPort(), Logger: m.log,
		Limits: m.cfg.Limits, OnLimited: func(s string) { m.metrics.RateLimited.WithLabelValues(s).Inc() },
		ProductIDs: m.store.Catalog.ProductIDs, OrderOf: m.store.Orders.Order, Gate: m.room,
		EdgeQueues: func(now time.Time) string { return m.room.EdgeLines(now, 2*time.Second) }})
	// The sale's clock before the first purchase: a coordinator whose own
	// clock is behind judged a window that had ended open, and queued a
	// purchase stamped inside it (the model test's fast mode, a clock 20 s
	// behind: 202 after the end).
	m.clock.Measure(ctx)
	if err := m.startLoops(); err != nil {
		return err
	}
	return m.listen()
}

// resumeEvery is how often a coordinator looks for transfers left
// unfinished (inventory.Stock.RunResume): one is resumed at its second look.
const resumeEvery = 5 * time.Second

// startLoops starts the health loop, the order sweeps and the consumers:
// in streams mode the order service reads the outboxes and the payment
// streams, and inventory the settle streams; with RocketMQ a relay moves
// outbox entries to the broker and both services consume topics.
func (m *Main) startLoops() error {
	ctx, cancel := context.WithCancel(context.Background())
	m.stopLoops = cancel
	m.loops.Go(func() { m.health.Run(ctx, m.set, 500*time.Millisecond) })
	m.loops.Go(func() { m.clock.Run(ctx) })
	m.loops.Go(func() { m.orders.Run(ctx) })
	m.loops.Go(func() { m.inv.catalog.RunControls(ctx, 500*time.Millisecond) })
	m.loops.Go(func() { m.inv.stock.RunResume(ctx, resumeEvery) })
	m.loops.Go(func() { m.room.Run(ctx) })
	m.loops.Go(func() { m.report.Run(ctx, 2*time.Second) })
	if m.cfg.ArchiveAfter > 0 {
		m.loops.Go(func() { m.inv.sale.RunArchive(ctx, m.cfg.ArchiveAfter, m.cfg.Test.ArchiveEvery) })
	}
	if m.cfg.PagesDir != "" {
		m.loops.Go(func() { m.pages.RunPublish(ctx, m.cfg.PagesDir, m.store.Catalog.ProductIDs, m.log) })
	}
	if m.spool != nil {
		m.loops.Go(func() { m.spool.Run(ctx, m.buyers.Replay) })
	}
	ingest := m.orders.IngestBatch
	if wait := m.cfg.Test.BeforeIngest; wait != nil {
		ingest = func(ctx context.Context, evs []shardstock.ReservationEvent) (int, error) {
			wait(ctx)
			return m.orders.IngestBatch(ctx, evs)
		}
	}
	err := m.mq.Start(ctx, &m.loops, messaging.Pipeline{Ingest: ingest, Settle: m.inv.settlements.Settle,
		Pay: m.applyPayment, Logger: m.log, ClaimIdle: m.cfg.ClaimIdle, DeadLettered: m.deadLettered,
		OnError:  func(group string) { m.metrics.ConsumerErrors.WithLabelValues(group).Inc() },
		OnParked: func(group string) { m.metrics.ParkedEntries.WithLabelValues(group).Inc() }})
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_MQ: %w", err)
	}
	return nil
}

func (m *Main) listen() error {
	listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	if m.cfg.Test.Listen != nil {
		listen = m.cfg.Test.Listen
	}
	ln, err := listen(m.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_HTTP_ADDR: %w", err)
	}
	m.listener = ln
	headerTimeout := m.cfg.Test.HeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = 5 * time.Second
	}
	m.server = &http.Server{
		Handler:           m.routes(),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    4 * maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(ln) }()
	m.log.Info("serving", "addr", ln.Addr().String(), "shards", len(m.cfg.Shards), "mq", m.mq.Name(),
		"db", m.store.Dialect(), "user_auth", m.cfg.UserAuth)
	if m.cfg.GeneratedToken {
		m.log.Warn("SHARDSTOCK_DEV=1: generated an admin token for this run", "admin_token", m.cfg.AdminToken)
	}
	return nil
}

// identity is the buyers' identity check of the configured mode.
func (m *Main) identity() api.Identity {
	if m.cfg.UserAuth == "hmac" {
		return flashsale.TokenIdentity(m.cfg.HMACSecret, 30*time.Second, nil)
	}
	return flashsale.ProxiedHeaderIdentity(m.cfg.Proxies())
}

// realIP finds a client's address: X-Forwarded-For only from a trusted
// proxy, so a buyer cannot pick the IP it is limited and logged as.
func (m *Main) realIP() echo.IPExtractor {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range m.cfg.Proxies() {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// URL is the base URL the server listens on.
func (m *Main) URL() string { return "http://" + m.listener.Addr().String() }

// Close stops serving (in-flight requests finish, up to 15 s), stops the
// background loops and closes the broker connection, the shard clients, the
// spool and the database, in reverse order of opening; errors are combined.
// Later calls return the first call's result.
func (m *Main) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.close() })
	return m.closeErr
}

func (m *Main) close() error {
	var errs *multierror.Error
	add := func(err error) {
		if err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	if m.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		add(m.server.Shutdown(ctx))
		if err := <-m.served; !errors.Is(err, http.ErrServerClosed) {
			add(err)
		}
	}
	if m.stopLoops != nil {
		m.stopLoops()
	}
	if m.stopSync != nil {
		m.stopSync()
	}
	// The loops (the relay among them) stop using the producer before the
	// broker connection closes.
	m.loops.Wait()
	if m.mq != nil {
		add(m.mq.Close())
	}
	if m.set != nil {
		add(m.set.Close())
	}
	if m.spool != nil {
		add(m.spool.Close())
	}
	if m.store != nil {
		add(m.store.Close())
	}
	return errs.ErrorOrNil()
}

// observePurchase counts an answered purchase in the metrics and the sale
// report.
func (m *Main) observePurchase(product, outcome string, took time.Duration) {
	m.metrics.ObservePurchase(outcome, took)
	m.report.Purchase(product, outcome, took)
}

// breakerStates lists every shard's breaker state as a number (metrics).
func (m *Main) breakerStates() []int {
	var out []int
	for _, st := range m.health.Status() {
		out = append(out, int(st.Breaker))
	}
	return out
}
