package shardstock

import (
	"context"
	"errors"
)

// A product's stock on one shard, as the shard adapter (shard.Set) and the
// operators' side (inventory) both speak of it: what a shard is given at a
// product's definition, the counters it keeps, what a monitoring read of it
// returns, and how its stock scripts refuse. They live here, in the domain,
// so that inventory's ports name no adapter type.

// Allocation is what a product's definition writes on one shard.
type Allocation struct {
	Alloc, Limit     int64
	StartsMS, EndsMS int64  // unix ms, 0 = open
	Definition       string // canonical JSON of the product
	Epoch            string // marker of this initialisation
	// Initialised: the shard is on record as initialised for the product;
	// a missing allocation then means lost data, and the shard refuses.
	Initialised bool
}

// Counters are a product's stock counters on one shard.
type Counters struct {
	Alloc, Salable, Locked, Sold int64
	Known                        bool // false: the product is not on this shard
}

// ShardSnapshot is one shard's state for monitoring: every product's
// counters and the backlogs of its streams, read at once.
type ShardSnapshot struct {
	Index    int
	Addr     string
	Err      error               // nil: the shard answered
	Products map[string]Counters // product id -> counters (Known false: not on this shard)
	Outbox   int64               // outbox entries not yet turned into orders (or relayed)
	Settle   int64               // settlements not yet applied
	Pool     *PoolStats          // the client's connections to the shard; nil: unknown
	// UsedMemory and MaxMemory are the shard's used memory and its limit
	// (0: no limit): a shard at its limit refuses new holds (noeviction).
	UsedMemory, MaxMemory int64
}

// PoolStats are a shard client's connection pool counts.
type PoolStats struct {
	Total, Idle            uint32
	Hits, Misses, Timeouts uint32
}

// Answers of the shards' stock scripts.
var (
	// ErrUnknownHold: the shard has no hold with that reservation id.
	ErrUnknownHold = errors.New("no such hold on this shard")
	// ErrHoldReleased: confirm of a hold that was released before.
	ErrHoldReleased = errors.New("hold was released")
	// ErrHoldSold: release of a hold that was sold (paid) before.
	ErrHoldSold = errors.New("hold was sold")
	// ErrInitConflict: the product is initialised on the shard with
	// another definition.
	ErrInitConflict = errors.New("product initialised with another definition")
	// ErrShardLost: the shard was initialised for the product before and
	// no longer holds it (restarted without its data, flushed, replaced).
	ErrShardLost = errors.New("shard lost the product's data")
	// ErrShortOfUnits: a replayed transfer found fewer salable units than
	// SQL says it moved.
	ErrShortOfUnits = errors.New("fewer salable units than the transfer moved")
	// ErrNotOnShard: the product is not on the shard (never initialised
	// there, or the shard lost its data).
	ErrNotOnShard = errors.New("product not on this shard")
	// ErrForeignCatalog: the shard holds another catalog's stock.
	ErrForeignCatalog = errors.New("the shard holds another catalog's stock")
)

type resyncKey struct{}

// ResyncContext marks ctx as a restart resync's own: a shard that restarted
// answers nothing else until it is back in line with SQL (DESIGN.md).
func ResyncContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, resyncKey{}, true)
}

// IsResync says whether ctx is a resync's own (ResyncContext).
func IsResync(ctx context.Context) bool { return ctx.Value(resyncKey{}) != nil }
