package inventory

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

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

// TestAHoldIsLookedForOnlyWhereItsSaleWasOpen (issue 41, finding 2): a
// reservation id is a ULID stamped when its purchase was made, so its hold
// can be only in a product whose sale was open then, unless an operator
// changed the window since; never in an archived product.
func TestAHoldIsLookedForOnlyWhereItsSaleWasOpen(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	id := ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
	for _, tc := range []struct {
		name string
		p    shardstock.Product
		want bool
	}{
		{"no window", shardstock.Product{}, true},
		{"open then", shardstock.Product{StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour)}, true},
		{"opening within the clocks' skew", shardstock.Product{StartsAt: now.Add(30 * time.Second)}, true},
		{"opening tomorrow", shardstock.Product{StartsAt: now.Add(24 * time.Hour)}, false},
		{"ended an hour before", shardstock.Product{EndsAt: now.Add(-time.Hour)}, false},
		{"ended an hour before, window changed since", shardstock.Product{EndsAt: now.Add(-time.Hour), WindowVersion: 3}, true},
		{"ended an hour before, in a session's window (it may move)", shardstock.Product{EndsAt: now.Add(-time.Hour), SessionWindow: true}, true},
		{"archived", shardstock.Product{Archived: true}, false},
	} {
		if got := MayHold(&tc.p, id); got != tc.want {
			t.Errorf("%s: MayHold %v, want %v", tc.name, got, tc.want)
		}
	}
	if !MayHold(&shardstock.Product{StartsAt: now.Add(24 * time.Hour)}, "not-a-ulid") {
		t.Error("an id that is not a ULID: MayHold false, want true (its time is unknown)")
	}
}
