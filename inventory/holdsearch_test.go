package inventory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

// nowhere is the holds of shards that hold nothing (only FindHold is
// called).
type nowhere struct{ Holds }

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
	old := NewCatalog(CatalogConfig{Addrs: f.mem.addrs[:2], Shards: f.mem, Catalog: f.store.Catalog, Sessions: f.store.Sessions, Controls: f.store.Controls, ShardLog: f.store.ShardLog})
	_, _, _, found, err := HoldSearch{Holds: nowhere{}, Products: old}.FindHold(ctx, []string{"grown"}, "r1")
	if found || !errors.Is(err, shardstock.ErrUnavailable) || !shardstock.IsPermanent(err) {
		t.Fatalf("on the old shard list: found %v, %v; want ErrUnavailable, and Permanent (it cannot tell; a coordinator with the whole list can)", found, err)
	}
	_, _, _, found, err = HoldSearch{Holds: nowhere{}, Products: f.catalog}.FindHold(ctx, []string{"grown"}, "r1")
	if found || err != nil {
		t.Fatalf("on every shard: found %v, %v; want not found", found, err)
	}
}

// TestAHoldIsLookedForOnlyWhereItsSaleWasOpen (issue 41, finding 2): a
// reservation without its order row is at most keep old and was made
// while its sale was open, so its hold can be only in a product whose
// sale has started and did not end more than keep ago (by the sale's
// clock), unless an operator changed the window since or it is a
// session's; never in an archived product.
func TestAHoldIsLookedForOnlyWhereItsSaleWasOpen(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	const keep = time.Hour
	for _, tc := range []struct {
		name string
		p    shardstock.Product
		want bool
	}{
		{"no window", shardstock.Product{}, true},
		{"open", shardstock.Product{StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour)}, true},
		{"opening within the clocks' margin", shardstock.Product{StartsAt: now.Add(30 * time.Second)}, true},
		{"opening tomorrow", shardstock.Product{StartsAt: now.Add(24 * time.Hour)}, false},
		{"ended within keep", shardstock.Product{EndsAt: now.Add(-30 * time.Minute)}, true},
		{"ended a day ago", shardstock.Product{EndsAt: now.Add(-24 * time.Hour)}, false},
		{"opening tomorrow, window changed", shardstock.Product{StartsAt: now.Add(24 * time.Hour), WindowVersion: 3}, true},
		{"ended a day ago, in a session's window (it may move)", shardstock.Product{EndsAt: now.Add(-24 * time.Hour), SessionWindow: true}, true},
		{"archived", shardstock.Product{Archived: true}, false},
	} {
		if got := MayHold(&tc.p, now, keep); got != tc.want {
			t.Errorf("%s: MayHold %v, want %v", tc.name, got, tc.want)
		}
	}
}

// asked is a HoldFinder that records the products it is asked about and
// holds id in held.
type asked struct {
	Holds    // only FindHold is called
	products []string
	held     string
}

func (a *asked) FindHold(_ context.Context, products []string, id string) (string, string, int, bool, error) {
	a.products = append(a.products, products...)
	for _, p := range products {
		if p == a.held {
			return p, "alice", 0, true, nil
		}
	}
	return "", "", -1, false, nil
}

// TestAHoldSearchAsksOnlyWhereTheHoldMayBe: the search asks the shards
// about the products that may hold the reservation and finds a hold there;
// a product this coordinator cannot read is asked about all the same.
func TestAHoldSearchAsksOnlyWhereTheHoldMayBe(t *testing.T) {
	f := newFixture(t)
	f.define("open", 30, 0)
	ctx := context.Background()
	if _, err := f.catalog.Define(ctx, shardstock.Product{ID: "later", Stock: 30, PerUserLimit: 1, StartsAt: time.Now().Add(24 * time.Hour).UTC()}); err != nil {
		t.Fatal(err)
	}
	finder := &asked{held: "open"}
	h := HoldSearch{Holds: finder, Products: f.catalog, Now: time.Now, Keep: time.Hour}
	product, _, _, found, err := h.FindHold(ctx, []string{"open", "later", "unknown"}, "r1")
	if err != nil || !found || product != "open" {
		t.Fatalf("the hold in the open product: %s %v %v", product, found, err)
	}
	if got := fmt.Sprint(finder.products); got != "[open unknown]" {
		t.Fatalf("the shards were asked about %s, want [open unknown] (not the sale that opens tomorrow)", got)
	}
}
