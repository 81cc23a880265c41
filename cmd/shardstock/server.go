package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/shard"
)

// Main is the server process: it wires the adapters together. Tests start
// it on 127.0.0.1:0 and talk to URL().
type Main struct {
	cfg *Config
	log *slog.Logger

	set      *shard.Set
	health   *ha.Health
	inv      *inventory.Service
	listener net.Listener
	server   *http.Server

	stopLoops context.CancelFunc
	loops     sync.WaitGroup // background loops; Close waits for them
	served    chan error
}

// NewMain returns a Main for cfg that logs to w.
func NewMain(cfg *Config, w io.Writer) *Main {
	return &Main{cfg: cfg, log: newLogger(cfg, w)}
}

func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Run opens the shard set, starts the health loop and starts serving; it
// returns once the listener is open (or with the error that prevented it).
// ctx bounds nothing after start; call Close to stop.
func (m *Main) Run(ctx context.Context) error {
	m.warnUnused()
	m.health = ha.NewHealth(len(m.cfg.Shards), nil)
	set, err := shard.Open(m.cfg.Shards, shard.Config{Timeout: m.cfg.ShardTimeout, Logger: m.log, Health: m.health})
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_SHARDS: %w", err)
	}
	m.set = set
	m.inv = inventory.NewService(set, inventory.Config{})
	loopCtx, cancel := context.WithCancel(context.Background())
	m.stopLoops = cancel
	m.loops.Go(func() { m.health.Run(loopCtx, set, 500*time.Millisecond) })
	return m.listen()
}

func (m *Main) listen() error {
	ln, err := net.Listen("tcp", m.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_HTTP_ADDR: %w", err)
	}
	m.listener = ln
	m.server = &http.Server{
		Handler:           m.routes(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(ln) }()
	m.log.Info("serving", "addr", ln.Addr().String(), "shards", len(m.cfg.Shards), "user_auth", m.cfg.UserAuth)
	if m.cfg.GeneratedToken {
		m.log.Warn("SHARDSTOCK_DEV=1: generated an admin token for this run", "admin_token", m.cfg.AdminToken)
	}
	return nil
}

// URL is the base URL the server listens on.
func (m *Main) URL() string { return "http://" + m.listener.Addr().String() }

func (m *Main) routes() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = api.ErrorHandler(m.log)
	e.Use(middleware.Recover())

	flashsale.NewHandler(flashsale.Config{Catalog: m.inv, Reserver: m.set, Identity: flashsale.HeaderIdentity}).Register(e)
	admin := e.Group("/admin/v1", inventory.AdminAuth(m.cfg.AdminToken))
	m.inv.Register(admin)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", m.ready)
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", api.OpenAPI) })
	return e
}

// ready answers 200 when at least one shard is up, else 503.
func (m *Main) ready(c echo.Context) error {
	if !m.health.AnyUp() {
		return c.JSON(http.StatusServiceUnavailable, api.ErrorBody{Error: "unavailable", Message: "no shard answers"})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

func (m *Main) warnUnused() {
	for _, name := range notYet {
		if os.Getenv(name) != "" {
			m.log.Warn("setting is not used by this version", "variable", name)
		}
	}
}

// Close stops serving (in-flight requests finish, up to 15 s), stops the
// background loops and closes the shard clients, in reverse order of
// opening; errors are combined.
func (m *Main) Close() error {
	var errs *multierror.Error
	if m.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := m.server.Shutdown(ctx); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("http: %w", err))
		}
		if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = multierror.Append(errs, fmt.Errorf("http: %w", err))
		}
	}
	if m.stopLoops != nil {
		m.stopLoops()
		m.loops.Wait()
	}
	if m.set != nil {
		if err := m.set.Close(); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	return errs.ErrorOrNil()
}
