package inventory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore"
)

// shardRoles are the shards as the services' ports see them: the stock
// (shard.Stock), the fence (shard.Fence), the holds (shard.Holds)
// and the claims (shard.Purchases); the fake fills all four.
type shardRoles struct {
	stock  StockShards
	fence  Fence
	holds  Holds
	claims Claims
}

// fixture is the inventory's services over three shards and SQLite.
type fixture struct {
	t      *testing.T
	shards StockShards      // the stock role
	mem    *memShards       // the shards, in memory (newFixture)
	redis  *shardtest.Redis // or on redis-servers (newRedisFixture)
	set    *shard.Set
	start  int // the start shard of the next purchase (Redis)
	store  *sqlstore.Store

	catalog *Catalog
	views   *Views
	stock   *Stock
	sale    *Sale
	audit   *Audit
	resync  *Resync
}

// newFixture is a fixture over shards in memory: most tests.
func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, mem: newMemShards(3)}
	f.wire(shardRoles{f.mem, f.mem, f.mem, f.mem}, f.mem.addrs)
	return f
}

// newRedisFixture is a fixture over three redis-servers, for what the
// scripts themselves decide.
func newRedisFixture(t *testing.T) *fixture {
	f := &fixture{t: t, redis: shardtest.Start(t, 3)}
	f.openStore()
	set, err := shard.Open(f.redis.URLs(), shard.Config{Timeout: time.Second, Start: shard.StartRandom,
		Rand: func(int) int { return f.start }, Ledger: f.store.Orders, Inits: f.store.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	f.set = set
	f.wire(shardRoles{set.Stock, set.Fence, set.Holds, set.Purchases}, set.Addrs())
	return f
}

func (f *fixture) openStore() {
	if f.store != nil {
		return
	}
	store, err := sqlstore.Open("sqlite:" + f.t.TempDir() + "/o.db")
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.store = store
}

// wire builds the services as cmd/shardstock does, over set and SQLite.
func (f *fixture) wire(roles shardRoles, addrs []string) {
	f.openStore()
	set := roles.stock
	f.shards = set
	st := f.store
	f.catalog = NewCatalog(CatalogConfig{Addrs: addrs, Shards: set, Catalog: st.Catalog, Sessions: st.Sessions, Controls: st.Controls, ShardLog: st.ShardLog})
	f.resync = NewResync(ResyncConfig{Addrs: addrs, Products: f.catalog, Catalog: st.Catalog, Transfers: st.Transfers,
		Orders: st.Orders, Shards: set, Holds: roles.holds, Claims: roles.claims})
	f.views = NewViews(ViewsConfig{Addrs: addrs, Products: f.catalog, Catalog: st.Catalog, Shards: set, Transfers: st.Transfers, Controls: st.Controls, Fence: roles.fence, Problems: f.resync})
	f.stock = NewStock(StockConfig{Addrs: addrs, Products: f.catalog, Catalog: st.Catalog, Views: f.views, Transfers: st.Transfers, ShardLog: st.ShardLog, Shards: set})
	f.sale = NewSale(SaleConfig{Addrs: addrs, Products: f.catalog, Catalog: st.Catalog, Views: f.views, Controls: st.Controls, Orders: st.Orders, Shards: set, Stock: f.stock})
	f.audit = NewAudit(AuditConfig{Addrs: addrs, Views: f.views, Orders: st.Orders, Transfers: st.Transfers, Stock: f.stock})
}

// memResync is a Resync of its own over the in-memory shards and SQLite,
// with late orders checked (ShardLog), changed by set.
func (f *fixture) memResync(set func(*ResyncConfig)) *Resync {
	cfg := ResyncConfig{Addrs: f.mem.addrs, Products: f.catalog, Catalog: f.store.Catalog, Transfers: f.store.Transfers,
		Orders: f.store.Orders, Shards: f.mem, Holds: f.mem, Claims: f.mem, ShardLog: f.store.ShardLog}
	set(&cfg)
	return NewResync(cfg)
}

// define makes a product and sells `sold` units from shard 0 so the shards
// are uneven.
func (f *fixture) define(id string, stock, sold int64) *shardstock.Product {
	f.t.Helper()
	if _, err := f.catalog.Define(context.Background(), shardstock.Product{ID: id, Stock: stock, PerUserLimit: 1}); err != nil {
		f.t.Fatal(err)
	}
	p, _ := f.catalog.Product(context.Background(), id)
	if f.mem != nil {
		if err := f.mem.sell(0, id, sold); err != nil {
			f.t.Fatal(err)
		}
		return p
	}
	f.start = 0
	for k := int64(0); k < sold; k++ {
		if i, err := f.set.Purchases.Reserve(context.Background(), p, fmt.Sprintf("u%d", k), fmt.Sprintf("%s-r%d", id, k)); err != nil || i != 0 {
			f.t.Fatalf("reserve: shard %d %v", i, err)
		}
	}
	return p
}

// counters are product's counters on shard i.
func (f *fixture) counters(i int, product string) shardstock.Counters {
	f.t.Helper()
	c, err := f.shards.Counters(context.Background(), i, product)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// totals checks conservation on every shard and returns Σ alloc and the
// per-shard salable.
func (f *fixture) totals(id string) (alloc int64, salable []int64) {
	f.t.Helper()
	for i := range 3 {
		c := f.counters(i, id)
		if c.Salable+c.Locked+c.Sold != c.Alloc || c.Salable < 0 {
			f.t.Fatalf("shard %d breaks conservation: %+v", i, c)
		}
		alloc += c.Alloc
		salable = append(salable, c.Salable)
	}
	return alloc, salable
}

// crashAt has the stock's transfers stop after step, as a crash would
// ("": they run through).
func (f *fixture) crashAt(step string) {
	if step == "" {
		f.stock.hook = nil
		return
	}
	f.stock.hook = func(s string) error {
		if s == step {
			return fmt.Errorf("crash after %s", s)
		}
		return nil
	}
}
