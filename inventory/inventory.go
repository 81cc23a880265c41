// Package inventory is the operators' side of the stock, as small services,
// one per use case, each with the few-method ports it calls:
//
//   - Catalog: define a product (catalog row first, then its stock split
//     across the shards), the sale sessions, and the cached product with the
//     operators' controls applied (catalog.go);
//   - Views: a product's stock per shard, the buyers' stock view, the shared
//     snapshot, the shard overview (views.go, snapshot.go);
//   - Sale: a sale's life: pause, window, archive (sale.go);
//   - Stock: units added or taken back, rebalance, drain, and the transfers
//     that carry them, finished by Resume (stock.go; the plans, pure, in
//     plan.go);
//   - Restarts: a restarted shard's fence, opened once its run is resynced,
//     and an operator's resync or accept of a fenced one (restarts.go; the
//     catch-up of orders written meanwhile, catchup.go);
//   - Resync: a restarted shard brought back in line with SQL, and an
//     operator's accept of one that disagrees (resync.go, accept.go);
//   - Audit: reconcile the shards' counters with the orders (reconcile.go);
//   - Settlements: pay results applied to the shard holding the unit
//     (settle.go);
//   - HoldSearch: where a reservation with no order row may hold its unit,
//     asked only where its sale was open (holdsearch.go);
//   - the operators' controls of a product: paused, throttled (controls.go).
//
// The admin API's handlers are in http.go. Ports are interfaces named in the
// domain's types; the adapters (shard, sqlstore) satisfy them without this
// package importing either. It imports the domain and api.
package inventory

import (
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/shardstock/shardstock"
)

// Outside is the shard index of a stock change's other end: units an
// operator adds come from it, units removed go to it.
const Outside = -1

// orDefaults fills the clock and the logger a service was given without.
func orDefaults(now *func() time.Time, log **slog.Logger) {
	if *now == nil {
		*now = time.Now
	}
	if *log == nil {
		*log = slog.Default()
	}
}

func errArchived(id string) error {
	return shardstock.Conflict("product " + id + " is archived: its shard keys are gone on purpose, and the catalog keeps its final totals")
}

// split is p's allocation per shard (its first definition's).
func split(p *shardstock.Product, n int) []int64 {
	if len(p.Split) == n {
		return p.Split
	}
	return shardstock.SplitStock(p.Stock, n, spreadOffset(p.ID, n))
}

func spreadOffset(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

func newEpoch() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
