package main

import (
	"context"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/inventory"
)

// The inventory's services, one per use case, each handed the ports it
// uses: the shard set and the SQL store fill them, and the services that
// others build on (the catalog, the views, the transfers) are ports in turn.
type inventoryServices struct {
	catalog     *inventory.Catalog
	views       *inventory.Views
	stock       *inventory.Stock
	sale        *inventory.Sale
	audit       *inventory.Audit
	resync      *inventory.Resync
	settlements *inventory.Settlements
	restarts    *inventory.Restarts
}

// openInventory builds the inventory's services over m.set and m.store.
func (m *Main) openInventory() {
	set, db, addrs := m.set, m.store, m.set.Addrs()
	inv := &m.inv
	inv.catalog = inventory.NewCatalog(inventory.CatalogConfig{Addrs: addrs, Shards: set.Stock,
		Catalog: db.Catalog, Sessions: db.Sessions, Controls: db.Controls, ShardLog: db.ShardLog, Logger: m.log})
	inv.resync = inventory.NewResync(inventory.ResyncConfig{Addrs: addrs, Products: inv.catalog,
		Catalog: db.Catalog, Transfers: db.Transfers, Orders: db.Orders, ShardLog: db.ShardLog,
		Shards: set.Stock, Holds: set.Holds, Claims: set.Purchases, Fenced: set.Fence.Fenced, Logger: m.log,
		FailLost: func(ctx context.Context, id, user string) error { return m.orders.FailLost(ctx, id, user) }})
	inv.restarts = inventory.NewRestarts(inventory.RestartsConfig{Addrs: addrs, Requests: m.resyncs,
		Fence: set.Fence, ShardLog: db.ShardLog, Catalog: db.Catalog, Resync: inv.resync, Opened: m.retrySpool, Now: m.clock.Now, Logger: m.log})
	inv.views = inventory.NewViews(inventory.ViewsConfig{Addrs: addrs, Products: inv.catalog, Catalog: db.Catalog,
		Shards: set.Stock, Transfers: db.Transfers, Controls: db.Controls, Fence: set.Fence, Problems: inv.resync, Breakers: m.breakerNames})
	inv.stock = inventory.NewStock(inventory.StockConfig{Addrs: addrs, Products: inv.catalog, Catalog: db.Catalog,
		Views: inv.views, Transfers: db.Transfers, ShardLog: db.ShardLog, Shards: set.Stock, Logger: m.log,
		AfterStep: m.cfg.Test.TransferStep})
	// The sale's windows are the shards' (they judge every purchase by their
	// own clock): an archive or a start that can no longer move is judged by
	// the sale's clock, not this coordinator's own.
	inv.sale = inventory.NewSale(inventory.SaleConfig{Addrs: addrs, Products: inv.catalog, Catalog: db.Catalog,
		Views: inv.views, Controls: db.Controls, Orders: db.Orders, Shards: set.Stock, Stock: inv.stock, Now: m.clock.Now, Logger: m.log})
	inv.audit = inventory.NewAudit(inventory.AuditConfig{Addrs: addrs, Views: inv.views,
		Orders: db.Orders, Transfers: db.Transfers, Stock: inv.stock})
	inv.settlements = inventory.NewSettlements(inventory.SettlementsConfig{Addrs: addrs, Products: inv.catalog,
		Orders: db.Orders, Holds: set.Holds, Logger: m.log,
		OnSettle: func(a shardstock.Action) { m.metrics.Settlements.WithLabelValues(string(a)).Inc() }})
}

// handlers are the inventory's admin API and the buyers' stock view.
func (inv *inventoryServices) handlers() inventory.Handlers {
	return inventory.Handlers{Catalog: inv.catalog, Sales: inv.sale,
		Stock: inv.stock, Reconciler: inv.audit, Views: inv.views, Restarts: inv.restarts}
}

// breakerNames lists every shard's breaker state by name (the shard
// overview).
func (m *Main) breakerNames() []string {
	var out []string
	for _, st := range m.health.Status() {
		out = append(out, st.Breaker.String())
	}
	return out
}
