package inventory

import (
	"context"
	"errors"
	"testing"

	"github.com/shardstock/shardstock"
)

// nowhere is a HoldFinder on shards that hold nothing.
type nowhere struct{}

func (nowhere) FindHold(context.Context, []string, string) (string, string, int, bool, error) {
	return "", "", -1, false, nil
}

// TestAHoldSearchOnTheOldShardListCannotTell: during a rolling grow, a
// coordinator still on the old shard list that finds no hold for a
// reservation cannot say there is none (it may be on a shard it lacks), so
// a payment for it is retried instead of refused for good ("does not exist
// here": money taken, the order left unpaid; the model test's fast mode).
// A coordinator that lists every shard of every product says not found.
func TestAHoldSearchOnTheOldShardListCannotTell(t *testing.T) {
	f := newFixture(t)
	f.define("grown", 30, 0)
	ctx := context.Background()
	old := NewCatalog(CatalogConfig{Addrs: f.mem.addrs[:2], Shards: f.mem, Products: f.store, Sessions: f.store, Controls: f.store, Drains: f.store})
	_, _, _, found, err := HoldSearch{Finder: nowhere{}, Products: old}.FindHold(ctx, []string{"grown"}, "r1")
	if found || !errors.Is(err, shardstock.ErrUnavailable) || !shardstock.IsPermanent(err) {
		t.Fatalf("on the old shard list: found %v, %v; want ErrUnavailable, and Permanent (it cannot tell; a coordinator with the whole list can)", found, err)
	}
	_, _, _, found, err = HoldSearch{Finder: nowhere{}, Products: f.catalog}.FindHold(ctx, []string{"grown"}, "r1")
	if found || err != nil {
		t.Fatalf("on every shard: found %v, %v; want not found", found, err)
	}
}
