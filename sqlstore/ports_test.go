package sqlstore_test

import (
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/metrics"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/report"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/waitroom"
)

// Each port to SQL is filled by one role of the store, in one file (the
// wiring, cmd/shardstock, hands each service the role its port names). The
// checks sit in a test so that sqlstore never imports the services it
// serves.
var (
	// catalog.go
	_ inventory.ProductStore = (*sqlstore.Catalog)(nil)
	_ inventory.ProductList  = (*sqlstore.Catalog)(nil)
	_ inventory.InitRecord   = (*sqlstore.Catalog)(nil)
	_ order.Catalog          = (*sqlstore.Catalog)(nil)
	_ shard.Inits            = (*sqlstore.Catalog)(nil)
	// sessions.go
	_ inventory.SessionStore = (*sqlstore.Sessions)(nil)
	_ flashsale.Sessions     = (*sqlstore.Sessions)(nil)
	// controls.go
	_ inventory.ControlsSource = (*sqlstore.Controls)(nil)
	_ inventory.SaleStore      = (*sqlstore.Controls)(nil)
	_ inventory.ArchiveRecord  = (*sqlstore.Controls)(nil)
	// orders.go
	_ order.Store           = (*sqlstore.Orders)(nil)
	_ inventory.ShardOrders = (*sqlstore.Orders)(nil)
	_ inventory.OrderCounts = (*sqlstore.Orders)(nil)
	_ inventory.OrderRows   = (*sqlstore.Orders)(nil)
	_ inventory.OpenOrders  = (*sqlstore.Orders)(nil)
	_ shard.Ledger          = (*sqlstore.Orders)(nil)
	_ metrics.OrderCounter  = (*sqlstore.Orders)(nil)
	// transfers.go
	_ inventory.TransferLog  = (*sqlstore.Transfers)(nil)
	_ inventory.Keys         = (*sqlstore.Transfers)(nil)
	_ inventory.History      = (*sqlstore.Transfers)(nil)
	_ inventory.StockChanges = (*sqlstore.Transfers)(nil)
	// shards.go
	_ inventory.Drains      = (*sqlstore.ShardLog)(nil)
	_ inventory.DrainList   = (*sqlstore.ShardLog)(nil)
	_ inventory.ResyncTimes = (*sqlstore.ShardLog)(nil)
	_ inventory.RunRecord   = (*sqlstore.ShardLog)(nil)
	// queue.go, report.go
	_ waitroom.Store = (*sqlstore.Queues)(nil)
	_ report.Store   = (*sqlstore.Reports)(nil)
)
