package api

import (
	"fmt"
	"net/url"
	"strings"
)

// The JSON API's paths, as echo patterns, defined once:
// cmd/shardstock/routes.go mounts them, package client calls them, and
// openapi.yaml documents them (TestOpenAPIMatchesTheRoutes).
const (
	PurchasePath = "/api/v1/products/:id/purchase"
	TicketPath   = "/api/v1/tickets/:ticket"
	StockPath    = "/api/v1/products/:id/stock"
	OrderPath    = "/api/v1/orders/:id"
	PayPath      = "/api/v1/orders/:id/pay"
	CancelPath   = "/api/v1/orders/:id/cancel"
	QueuePath    = "/api/v1/products/:id/queue"
)

// AdminBase is the admin API's prefix, behind AdminAuth; the Admin paths
// below are under it.
const AdminBase = "/admin/v1"

// The admin API's paths, under AdminBase.
const (
	AdminProductsPath  = "/products"
	AdminProductPath   = "/products/:id"
	AdminPausePath     = "/products/:id/pause"
	AdminResumePath    = "/products/:id/resume"
	AdminStockPath     = "/products/:id/stock"
	AdminArchivePath   = "/products/:id/archive"
	AdminRebalancePath = "/products/:id/rebalance"
	AdminReconcilePath = "/products/:id/reconcile"
	AdminReportPath    = "/products/:id/report"
	AdminChartPath     = "/products/:id/report/:chart"
	AdminSessionsPath  = "/sessions"
	AdminSessionPath   = "/sessions/:id"
	AdminShardsPath    = "/shards"
	AdminDrainPath     = "/shards/:index/drain"
	AdminResyncPath    = "/shards/:index/resync"
	AdminSpoolPath     = "/spool"

	AdminQueuesPath       = "/queues"
	AdminQueuePath        = "/products/:id/queue"
	AdminQueuePausePath   = "/products/:id/queue/pause"
	AdminQueueResumePath  = "/products/:id/queue/resume"
	AdminQueueAdvancePath = "/products/:id/queue/advance"
	AdminQueueRevokePath  = "/products/:id/queue/revoke"
)

// The request headers the API reads besides the standard ones.
const (
	// UserIDHeader names the buyer when SHARDSTOCK_USER_AUTH trusts a
	// gateway (canonical form).
	UserIDHeader = "X-User-Id"
	// IdempotencyKeyHeader makes a retried stock change change nothing more.
	IdempotencyKeyHeader = "Idempotency-Key"
	// SignatureHeader carries a payment callback's signature.
	SignatureHeader = "X-Signature"
	// QueueTokenHeader carries a buyer's place in a waiting room (canonical
	// form): a purchase of a queued product needs an admitted one.
	QueueTokenHeader = "X-Queue-Token"
)

// Path fills pattern's :parameters, in order, with params, each escaped as
// a path segment. It panics when their numbers differ (a caller's bug).
func Path(pattern string, params ...string) string {
	segs := strings.Split(pattern, "/")
	n := 0
	for i, s := range segs {
		if !strings.HasPrefix(s, ":") {
			continue
		}
		if n < len(params) {
			segs[i] = url.PathEscape(params[n])
		}
		n++
	}
	if n != len(params) {
		panic(fmt.Sprintf("api.Path: %d parameters for %s", len(params), pattern))
	}
	return strings.Join(segs, "/")
}

// ProductDefinition is the body of PUT AdminProductPath; the id is the
// path's.
type ProductDefinition struct {
	Stock        int64        `json:"stock"`
	PerUserLimit *int64       `json:"per_user_limit,omitempty"` // nil: 1
	StartsAt     OptionalTime `json:"starts_at"`
	EndsAt       OptionalTime `json:"ends_at"`
	Title        string       `json:"title"`
	PriceCents   int64        `json:"price_cents"`
	Currency     string       `json:"currency"`
}

// SaleWindow is the body of PATCH AdminProductPath: the window's new
// start, end, or both (nil: unchanged).
type SaleWindow struct {
	StartsAt *OptionalTime `json:"starts_at,omitempty"`
	EndsAt   *OptionalTime `json:"ends_at,omitempty"`
}

// StockChange is the body of POST AdminStockPath: units to put on sale
// (Add) or take back (Remove).
type StockChange struct {
	Add    int64 `json:"add,omitempty"`
	Remove int64 `json:"remove,omitempty"`
}

// ShardDrain is the body of POST AdminDrainPath: take the shard out of
// rotation (Drained nil or true) or put it back (false).
type ShardDrain struct {
	Drained *bool `json:"drained,omitempty"`
}

// ShardResync is the body of POST AdminResyncPath: resync the fenced shard
// now, or (Accept) take one a disagreement keeps fenced as it stands.
type ShardResync struct {
	Accept bool `json:"accept"`
}

// QueueDefinition is the body of PUT AdminQueuePath: the product's
// waiting room. Mode is "fifo" or "draw"; Rate the places admitted per
// second; LeadSeconds how long before the sale's start buyers may join;
// WindowSeconds an admitted buyer's time to buy; Difficulty the proof of
// work a join needs, in leading zero bits (0: none).
type QueueDefinition struct {
	Mode          string  `json:"mode"`
	Rate          float64 `json:"rate"`
	LeadSeconds   int64   `json:"lead_seconds"`
	WindowSeconds int64   `json:"window_seconds"`
	Difficulty    int     `json:"difficulty"`
}

// QueueJoin is the (optional) body of POST QueuePath: the proof of work,
// when the line asks for one.
type QueueJoin struct {
	Work string `json:"work,omitempty"`
}

// QueueAdvance is the body of POST AdminQueueAdvancePath: admit By more
// places at once.
type QueueAdvance struct {
	By int64 `json:"by"`
}

// QueueRevoke is the body of POST AdminQueueRevokePath: the buyer whose
// place admits them no more.
type QueueRevoke struct {
	User string `json:"user"`
}

// SessionDefinition is the body of PUT AdminSessionPath; the id is the
// path's.
type SessionDefinition struct {
	Title    string       `json:"title"`
	StartsAt OptionalTime `json:"starts_at"`
	EndsAt   OptionalTime `json:"ends_at"`
	Products []string     `json:"products"`
}
