package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/spool"
	"github.com/shardstock/shardstock/sqlstore"
)

// The adapters Run opens, each with the setting it comes from named in its
// errors.

// checkShardList refuses to start on masters listed in another order than
// the catalog's products were defined with, and says which products this
// coordinator will not sell for want of their masters.
func (m *Main) checkShardList(ctx context.Context) error {
	ids, err := m.store.Catalog.ProductIDs(ctx)
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_DB: products: %w", err)
	}
	beyond, err := m.inv.catalog.CheckShards(ctx, ids)
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_SHARDS: %w", err)
	}
	if len(beyond) > 0 {
		m.log.Warn("SHARDSTOCK_SHARDS lacks masters some products live on, or lists them elsewhere (sales that have ended): this coordinator does not sell or settle them. "+
			"A shorter list is the old list of a rolling grow; otherwise add the missing masters, after the others, in the order they were first listed",
			"masters", len(m.cfg.Shards), "products", len(beyond), "first", beyond[:min(len(beyond), 5)])
	}
	return nil
}

func (m *Main) openSpool() error {
	if m.cfg.SpoolDir == "" {
		return nil
	}
	sp, err := spool.Open(m.cfg.SpoolDir, spool.Config{MaxEntries: m.cfg.SpoolEntries, MaxBytes: m.cfg.SpoolBytes, Logger: m.log,
		OnWriteError: m.metrics.SpoolWriteErrors.Inc})
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_SPOOL_DIR: %w", err)
	}
	m.spool = sp
	m.spooled.Store(sp)
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shardstock_spool_depth",
		Help: "Purchases waiting in the disk spool for a shard to take them."}, func() float64 { return float64(sp.Depth()) }))
	if n := sp.Depth(); n > 0 {
		m.log.Info("spool: purchases from before the restart will be replayed", "n", n)
	}
	return nil
}

// spoolPort is the spool for the purchase path (a nil interface, not a
// nil *spool.Spool, when disabled).
func (m *Main) spoolPort() flashsale.Spool {
	if m.spool == nil {
		return nil
	}
	return m.spool
}

func (m *Main) openStore(ctx context.Context) error {
	store, err := sqlstore.OpenTLS(m.cfg.DB, m.cfg.DBCAs)
	if err != nil {
		return fmt.Errorf("SHARDSTOCK_DB: %w", err)
	}
	m.store = store
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("SHARDSTOCK_DB: %w", err)
	}
	return nil
}

// openTransport opens the message transport SHARDSTOCK_MQ names (it is
// where settlements are published).
func (m *Main) openTransport(ctx context.Context) (messaging.Transport, error) {
	if m.cfg.MQ == "streams" {
		return &messaging.Streams{StreamSettler: messaging.StreamSettler{Clients: m.clients(), Direct: func(ctx context.Context, st shardstock.Settlement) error {
			return m.inv.settlements.Settle(ctx, st)
		}}}, nil
	}
	rc, _ := messaging.ParseRocketMQ(m.cfg.MQ)
	rc.Instance = messaging.ConsumerName()
	if rc.Credentials.IsZero() {
		rc.Credentials = m.cfg.MQCredentials
	}
	r, err := messaging.OpenRocketMQ(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("SHARDSTOCK_MQ: %w", err)
	}
	return &messaging.Broker{MQ: r, Clients: m.clients()}, nil
}

func (m *Main) clients() []*redis.Client {
	var cs []*redis.Client
	for _, sh := range m.set.Shards() {
		cs = append(cs, sh.Client)
	}
	return cs
}
