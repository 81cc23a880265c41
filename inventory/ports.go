package inventory

import (
	"context"
	"time"

	"github.com/shardstock/shardstock"
)

// The ports below are what inventory asks of its two adapters, one port for
// each role type: the SQL side in package sqlstore (CatalogStore,
// SessionStore, ControlStore, OrderStore, TransferStore, ShardLog) and the
// Redis side in package shard (Claims, Holds, StockShards, Fence). Each names
// the one type that fills it; a service's config takes the port, and a
// test's fake fills the whole role.

// CatalogStore is the durable product catalog (sqlstore.Catalog).
type CatalogStore interface {
	SaveProduct(ctx context.Context, id, definition string) (created bool, stored string, err error)
	ProductDefinition(ctx context.Context, id string) (string, error)
	ProductIDs(ctx context.Context) ([]string, error)
	// InitialisedShards lists the shards on record as initialised for a
	// product; RecordInit puts one on record.
	InitialisedShards(ctx context.Context, product string) (map[int]bool, error)
	RecordInit(ctx context.Context, product string, shard int, epoch string) error
}

// SessionStore keeps the sale sessions (sqlstore.Sessions).
type SessionStore interface {
	SaveSession(ctx context.Context, s shardstock.Session) (created bool, err error)
	Sessions(ctx context.Context) ([]shardstock.Session, error)
	DeleteSession(ctx context.Context, id string) (bool, error)
}

// ControlStore records and reads what operators changed about each sale:
// pause, window, archive, and an archived product's final totals, kept when
// its shard keys were deleted (sqlstore.Controls).
type ControlStore interface {
	ProductControls(ctx context.Context) (map[string]shardstock.Controls, error)
	SetPaused(ctx context.Context, id string, paused bool) error
	SetWindow(ctx context.Context, id string, starts, ends time.Time) error
	SetArchive(ctx context.Context, id string, st shardstock.ArchiveState) error
	RecordArchiveTotals(ctx context.Context, id string, totals []shardstock.ShardTotals) error
	ArchiveTotals(ctx context.Context, id string) ([]shardstock.ShardTotals, error)
}

// OrderStore is the order table as inventory reads it (sqlstore.Orders).
type OrderStore interface {
	// Order reads one order's row (nil: there is none).
	Order(ctx context.Context, id string) (*shardstock.Order, error)
	// LiveOrders lists the orders of product held on shard awaiting
	// payment or paid; FinalOrders those paid, cancelled or failed.
	LiveOrders(ctx context.Context, product string, shard int) ([]shardstock.Order, error)
	FinalOrders(ctx context.Context, product string, shard int) ([]shardstock.Order, error)
	// OpenOrders counts a product's orders that are not final yet, and
	// those whose settlement is not applied.
	OpenOrders(ctx context.Context, id string) (awaiting, unsettled int64, err error)
	CountsByShard(ctx context.Context, product string) (map[int]shardstock.OrderCounts, error)
	// Resettle marks the final orders of product held on shards for
	// settlement again.
	Resettle(ctx context.Context, product string, shards []int) (int64, error)
}

// TransferStore is the durable log of transfers and stock changes
// (sqlstore.Transfers).
type TransferStore interface {
	// StartTransfer records t before its first step and returns the record:
	// t, or the transfer recorded under its id before (a retried request).
	StartTransfer(ctx context.Context, t shardstock.Transfer) (shardstock.Transfer, error)
	MarkTransfer(ctx context.Context, id, state string, moved int64) error
	UnfinishedTransfers(ctx context.Context) ([]shardstock.Transfer, error)
	ShardTransfers(ctx context.Context, shard int) ([]shardstock.Transfer, error)
	// RecordStockChange records a stock change's transfers together, and
	// returns those recorded under changeID before (a retry) instead.
	RecordStockChange(ctx context.Context, changeID string, plan []shardstock.Transfer) ([]shardstock.Transfer, error)
	// StockChanges counts the units operators added to a product and took
	// back since its definition.
	StockChanges(ctx context.Context, id string) (added, removed int64, err error)
	// BindKey binds an Idempotency-Key (its hash) to the request it was
	// first used for, or returns shardstock.ErrKeyReused.
	BindKey(ctx context.Context, keyHash, product, request string) error
}

// ShardLog is the record kept about each shard: drained or not, the run
// ids resynced and when, and the catalog's own id (sqlstore.ShardLog).
type ShardLog interface {
	DrainedShards(ctx context.Context) (map[int]bool, error)
	SetDrained(ctx context.Context, shard int, drained bool) error
	CatalogID(ctx context.Context) (string, error)
	SyncedRunID(ctx context.Context, shard int) (string, error)
	// RecordSynced puts run on record as resynced at at (the
	// coordinators' clock: what reservations are timed with; zero: the
	// shard's first run on record, which lost nothing). SyncedAt reads it.
	RecordSynced(ctx context.Context, shard int, run string, at time.Time) error
	SyncedAt(ctx context.Context, shard int) (time.Time, error)
}

// Claims are the per-user limit registers at the buyers' homes: a lost
// hold's claim taken back, a cancelled order's given back (shard.Purchases).
type Claims interface {
	Reclaim(ctx context.Context, p *shardstock.Product, user, id string) (bool, error)
	GiveBack(ctx context.Context, p *shardstock.Product, user, id string) error
	// HomeOf is user's home shard for p: an error (no call is made) when
	// this coordinator does not list it (the old list of a rolling grow).
	HomeOf(p *shardstock.Product, user string) (int, error)
}

// Holds are the hold scripts: a settlement applied, a lost hold restored,
// a reservation's hold found on this coordinator's shards (shard.Holds).
type Holds interface {
	Confirm(ctx context.Context, i int, product, id string) (bool, error)
	Release(ctx context.Context, i int, product, id string) (bool, error)
	RestoreHold(ctx context.Context, i int, o shardstock.Order, atMS int64) (bool, error)
	FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error)
}

// StockShards is a product's stock on the shards: written when it is
// defined, read by the views, moved by transfers, repaired by a resync,
// windowed and deleted by a sale's life (shard.Stock).
type StockShards interface {
	// Init writes a product's allocation on shard i; false: it was there.
	Init(ctx context.Context, i int, product string, a shardstock.Allocation) (bool, error)
	Counters(ctx context.Context, i int, product string) (shardstock.Counters, error)
	Snapshot(ctx context.Context, products []string) []shardstock.ShardSnapshot
	TransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error)
	TransferIn(ctx context.Context, i int, product, id string, units int64, from int) error
	// ReplayTransferOut and RepairRegister replay a write a restarted
	// shard lost.
	ReplayTransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error)
	RepairRegister(ctx context.Context, p *shardstock.Product, i int) error
	SetWindow(ctx context.Context, i int, p *shardstock.Product) (changed bool, err error)
	DeleteProduct(ctx context.Context, i int, product string) error
}

// Fence is a shard's restart fence, whether the shard answers, and the
// catalog stamp it carries (shard.Fence).
type Fence interface {
	Fenced(i int) bool
	// Synced opens shard i's fence for run; SeenRun is the run its last
	// new connection found.
	Synced(i int, run string)
	SeenRun(i int) string
	Ping(ctx context.Context, i int) error
	// ClaimCatalog checks that shard i holds the stock of catalog id,
	// stamping it when it has no stamp, or answers
	// shardstock.ErrForeignCatalog.
	ClaimCatalog(ctx context.Context, i int, id string, known func(product string) bool) error
}
