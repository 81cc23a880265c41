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
	_ inventory.CatalogStore = (*sqlstore.Catalog)(nil)
	_ order.Catalog          = (*sqlstore.Catalog)(nil)
	_ shard.Inits            = (*sqlstore.Catalog)(nil)
	// sessions.go
	_ inventory.SessionStore = (*sqlstore.Sessions)(nil)
	_ flashsale.Sessions     = (*sqlstore.Sessions)(nil)
	// controls.go
	_ inventory.ControlStore = (*sqlstore.Controls)(nil)
	// orders.go
	_ order.OrderStore     = (*sqlstore.Orders)(nil)
	_ inventory.OrderStore = (*sqlstore.Orders)(nil)
	_ shard.Ledger         = (*sqlstore.Orders)(nil)
	_ metrics.OrderCounter = (*sqlstore.Orders)(nil)
	// transfers.go
	_ inventory.TransferStore = (*sqlstore.Transfers)(nil)
	// shards.go
	_ inventory.ShardLog = (*sqlstore.ShardLog)(nil)
	// queue.go, report.go
	_ waitroom.QueueStore = (*sqlstore.Queues)(nil)
	_ report.ReportStore  = (*sqlstore.Reports)(nil)
)
