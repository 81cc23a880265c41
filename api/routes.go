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
	PerUserLimit int64        `json:"per_user_limit"`
	StartsAt     OptionalTime `json:"starts_at"`
	EndsAt       OptionalTime `json:"ends_at"`
	Title        string       `json:"title"`
	PriceCents   int64        `json:"price_cents"`
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

// SessionDefinition is the body of PUT AdminSessionPath; the id is the
// path's.
type SessionDefinition struct {
	Title    string       `json:"title"`
	StartsAt OptionalTime `json:"starts_at"`
	EndsAt   OptionalTime `json:"ends_at"`
	Products []string     `json:"products"`
}
