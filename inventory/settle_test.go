package inventory

import (
	"testing"

	"github.com/shardstock/shardstock"
)

// Only what the order service publishes passes: a confirm of a paid order,
// a release of a cancelled or failed one, each on the order's shard, and a
// release_duplicate on another shard than the order's.
func TestSettlementMustMatchItsOrder(t *testing.T) {
	order := func(status shardstock.OrderStatus) *shardstock.Order {
		return &shardstock.Order{ID: "o1", ProductID: "p", UserID: "alice", Shard: 1, Status: status}
	}
	st := func(action shardstock.Action, shard int) shardstock.Settlement {
		return shardstock.Settlement{OrderID: "o1", ProductID: "p", UserID: "alice", Shard: shard, Action: action}
	}
	cases := []struct {
		name string
		o    *shardstock.Order
		st   shardstock.Settlement
		ok   bool
	}{
		{"confirm of a paid order", order(shardstock.StatusPaid), st(shardstock.Confirm, 1), true},
		{"release of a cancelled order", order(shardstock.StatusCancelled), st(shardstock.Release, 1), true},
		{"release of a failed order", order(shardstock.StatusFailed), st(shardstock.Release, 1), true},
		{"release_duplicate on another shard", order(shardstock.StatusAwaitingPayment), st(shardstock.ReleaseDuplicate, 2), true},
		{"release of an order awaiting payment", order(shardstock.StatusAwaitingPayment), st(shardstock.Release, 1), false},
		{"confirm of an order awaiting payment", order(shardstock.StatusAwaitingPayment), st(shardstock.Confirm, 1), false},
		{"confirm of a cancelled order", order(shardstock.StatusCancelled), st(shardstock.Confirm, 1), false},
		{"release of a paid order", order(shardstock.StatusPaid), st(shardstock.Release, 1), false},
		{"release of a pending order", order(shardstock.StatusPending), st(shardstock.Release, 1), false},
		{"release on another shard", order(shardstock.StatusCancelled), st(shardstock.Release, 2), false},
		{"confirm on another shard", order(shardstock.StatusPaid), st(shardstock.Confirm, 0), false},
		{"release_duplicate on the order's shard", order(shardstock.StatusAwaitingPayment), st(shardstock.ReleaseDuplicate, 1), false},
		{"no such order", nil, st(shardstock.Release, 1), false},
		{"another buyer", order(shardstock.StatusCancelled), shardstock.Settlement{OrderID: "o1", ProductID: "p", UserID: "bob", Shard: 1, Action: shardstock.Release}, false},
		{"another product", order(shardstock.StatusCancelled), shardstock.Settlement{OrderID: "o1", ProductID: "q", UserID: "alice", Shard: 1, Action: shardstock.Release}, false},
		{"unknown action", order(shardstock.StatusCancelled), st("refund", 1), false},
	}
	for _, c := range cases {
		why := contradiction(c.o, c.st)
		if (why == "") != c.ok {
			t.Errorf("%s: contradiction %q, want accepted %v", c.name, why, c.ok)
		}
	}
}
