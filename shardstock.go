// Package shardstock holds the domain of the flash-sale coordinator: products,
// reservations, orders, settlements, sessions, controls and the errors
// every adapter maps to. It imports nothing of shardstock's and no Redis,
// HTTP framework, message queue or SQL driver; every other package may
// import it, it imports none of them (ARCHITECTURE.md).
package shardstock

import (
	"time"
	"unicode/utf8"
)

// Product is a sale product as the operator defined it.
type Product struct {
	ID           string    `json:"id"`
	Stock        int64     `json:"stock"`
	PerUserLimit int64     `json:"per_user_limit"`
	StartsAt     time.Time `json:"starts_at,omitzero"`
	EndsAt       time.Time `json:"ends_at,omitzero"`
	Title        string    `json:"title,omitempty"`
	PriceCents   int64     `json:"price_cents,omitempty"`
	// Currency is the price's ISO 4217 code (EUR, USD, ...), for the
	// pages; "": not said.
	Currency string `json:"currency,omitempty"`
	// ShardCount is the number of shards the stock was split over when the
	// product was first defined: the product lives on shards 0..ShardCount-1
	// (its stock, its buyers' per-user limit registers), whatever the shard
	// count of a coordinator later. 0, in definitions older than 0.7.0: every
	// shard. Set by the server, never by the operator.
	ShardCount int `json:"shard_count,omitempty"`
	// Split is each shard's allocation at the first definition (shards
	// drained then get none); nil in definitions older than 0.7.0, whose
	// split is SplitStock over every shard. Set by the server.
	Split []int64 `json:"split,omitempty"`
	// ShardAddrs are the addresses (host:port/db) of the shards the product
	// was defined on, in index order; nil in definitions older than this
	// field. Set by the server. A coordinator whose shard list no longer
	// has them in those places does not sell the product (Moved).
	ShardAddrs []string `json:"shard_addrs,omitempty"`

	// Paused and Archived are the product's state, not its definition
	// (never in the definition's JSON): set by the operator's pause and
	// archive (A sale's life), read from the catalog.
	Paused   bool `json:"-"`
	Archived bool `json:"-"`
	// WindowVersion is the catalog's version of an operator's window
	// (Controls.Version; 0: the definition's window): the shards keep the
	// newest version any coordinator wrote (shard.Stock.SetWindow).
	WindowVersion int64 `json:"-"`
	// SessionWindow: StartsAt and EndsAt are the product's sessions'
	// window (it has none of its own), which an operator may move.
	SessionWindow bool `json:"-"`
	// Moved, when set, says how this coordinator's shard list differs from
	// ShardAddrs: its stock is on other masters than the ones this
	// coordinator would use, so it answers ErrUnavailable for it.
	Moved string `json:"-"`
}

// OnMaster reports whether p's shard i is the master a coordinator with
// shard list addrs has at index i, so that a script it runs there for p
// touches p's own keys. A coordinator that lacks some of p's shards (a
// rolling grow: it still has the old list) is one p is Moved for, but it
// still reaches the shards it shares with p's list in their places.
func (p *Product) OnMaster(i int, addrs []string) bool {
	if i < 0 || i >= len(addrs) {
		return false
	}
	return p.ShardAddrs == nil || (i < len(p.ShardAddrs) && p.ShardAddrs[i] == addrs[i])
}

// Shards is the number of shards p lives on when the coordinator has n.
func (p *Product) Shards(n int) int {
	if p.ShardCount > 0 {
		return p.ShardCount
	}
	return n
}

// Limits on a product definition.
const (
	MaxStock        = 1 << 40
	MaxPerUserLimit = 1000
	MaxTitleLen     = 200
)

// Validate reports the first problem with p as an ErrInvalid, and fills the
// documented default (PerUserLimit 1 when zero).
func (p *Product) Validate() error {
	switch {
	case !ValidID(p.ID):
		return Invalid("product id must be 1-64 characters of [A-Za-z0-9_-]")
	case p.Stock <= 0 || p.Stock > MaxStock:
		return Invalid("stock must be > 0 and at most 2^40")
	case p.PerUserLimit < 0 || p.PerUserLimit > MaxPerUserLimit:
		return Invalid("per_user_limit must be between 1 and 1000")
	case !p.StartsAt.IsZero() && !p.EndsAt.IsZero() && !p.EndsAt.After(p.StartsAt):
		return Invalid("ends_at must be after starts_at")
	case utf8.RuneCountInString(p.Title) > MaxTitleLen:
		return Invalid("title must be at most 200 characters")
	case p.PriceCents < 0:
		return Invalid("price_cents must not be negative")
	case p.Currency != "" && !currencyCode(p.Currency):
		return Invalid("currency must be an ISO 4217 code: three capital letters, like EUR")
	}
	if p.PerUserLimit == 0 {
		p.PerUserLimit = 1
	}
	return nil
}

func currencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// Open reports whether the sale admits a purchase at now: nil, ErrPaused
// (the operator's kill switch), or ErrNotStarted / ErrEnded (the window;
// an archived product's has ended). A zero bound is open on that side; EndsAt is
// exclusive.
func (p *Product) Open(now time.Time) error {
	if p.Moved != "" {
		return &Error{ErrUnavailable.Code, p.Moved}
	}
	if p.Paused {
		return ErrPaused
	}
	if p.Archived {
		return ErrEnded
	}
	if !p.StartsAt.IsZero() && now.Before(p.StartsAt) {
		return ErrNotStarted
	}
	if !p.EndsAt.IsZero() && !now.Before(p.EndsAt) {
		return ErrEnded
	}
	return nil
}

// Reservation is one unit held for a buyer on one shard. Its ID is also the
// order id the buyer is given.
type Reservation struct {
	ID        string `json:"order_id"`
	ProductID string `json:"product_id"`
	UserID    string `json:"user_id"`
	Shard     int    `json:"shard"`
}

// Totals are stock counters summed over shards, or of one shard.
type Totals struct {
	Salable int64 `json:"salable"`
	Locked  int64 `json:"locked"`
	Sold    int64 `json:"sold"`
}

// ValidID reports whether s is a valid product or user id: 1-64 characters
// of [A-Za-z0-9_-]. Ids are checked before any Redis key is built from them.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// SplitStock divides stock over n shards: the allocations sum to stock
// exactly and differ by at most one unit. The shards that take the remainder
// start at offset (mod n), so that products do not all load shard 0 with the
// extra unit.
func SplitStock(stock int64, n, offset int) []int64 {
	alloc := make([]int64, n)
	base, rem := stock/int64(n), stock%int64(n)
	for i := range alloc {
		alloc[i] = base
	}
	for k := 0; int64(k) < rem; k++ {
		alloc[(offset+k)%n]++
	}
	return alloc
}
