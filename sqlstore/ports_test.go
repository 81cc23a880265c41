package sqlstore_test

import (
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/waitroom"
)

// The store fills the inventory's ports to SQL (the wiring,
// cmd/shardstock/inventory.go, hands it to each service). The checks sit in
// a test so that sqlstore never imports the services it serves.
var (
	_ inventory.ProductStore   = (*sqlstore.Store)(nil)
	_ inventory.SessionStore   = (*sqlstore.Store)(nil)
	_ inventory.ControlsSource = (*sqlstore.Store)(nil)
	_ inventory.ProductList    = (*sqlstore.Store)(nil)
	_ inventory.Drains         = (*sqlstore.Store)(nil)
	_ inventory.StockRecord    = (*sqlstore.Store)(nil)
	_ inventory.TransferLog    = (*sqlstore.Store)(nil)
	_ inventory.Keys           = (*sqlstore.Store)(nil)
	_ inventory.SaleStore      = (*sqlstore.Store)(nil)
	_ inventory.OpenOrders     = (*sqlstore.Store)(nil)
	_ inventory.InitRecord     = (*sqlstore.Store)(nil)
	_ inventory.History        = (*sqlstore.Store)(nil)
	_ inventory.ShardOrders    = (*sqlstore.Store)(nil)
	_ inventory.OrderCounts    = (*sqlstore.Store)(nil)
	_ inventory.OrderRows      = (*sqlstore.Store)(nil)
	_ waitroom.Store           = (*sqlstore.Store)(nil)
)
