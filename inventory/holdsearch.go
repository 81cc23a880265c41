package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardstock/shardstock"
)

// HoldFinder finds a reservation's hold on this coordinator's shards
// (shard.Set; order.HoldFinder).
type HoldFinder interface {
	FindHold(ctx context.Context, products []string, id string) (product, user string, shard int, found bool, err error)
}

// HoldSearch is the order service's search for a reservation that has no
// order row yet (order.HoldFinder): on this coordinator's shards; and when
// none holds it while a product lives on shards this coordinator does not
// list (a rolling grow, this coordinator still on the old list), it says
// it cannot tell rather than "not found". Answered "not found", a payment
// success for an order held on a new shard, its row not written yet, was
// refused for good ("does not exist here") on the old-list coordinator and
// dead-lettered: the money taken, the order cancelled unpaid (the model
// test's fast mode).
type HoldSearch struct {
	Finder   HoldFinder
	Products Products
}

// FindHold is Finder's, or ErrUnavailable (and Permanent) when the hold
// may be on a shard this coordinator lacks.
func (h HoldSearch) FindHold(ctx context.Context, products []string, id string) (string, string, int, bool, error) {
	product, user, shard, found, err := h.Finder.FindHold(ctx, products, id)
	if found || err != nil {
		return product, user, shard, found, err
	}
	for _, pid := range products {
		p, err := h.Products.Product(ctx, pid)
		switch {
		case errors.Is(err, shardstock.ErrNotFound):
			continue
		case err != nil:
			return "", "", -1, false, err
		}
		if p.Moved != "" && !p.Archived {
			// Permanent for this process, until it restarts on the whole
			// list: a message consumer parks it, for a coordinator with
			// the whole list to claim once it has idled ClaimIdle (retried
			// here every few seconds, it would never idle that long).
			return "", "", -1, false, shardstock.Permanent(fmt.Errorf("%w: reservation %s may be held on a shard this coordinator does not list: %s", shardstock.ErrUnavailable, id, p.Moved))
		}
	}
	return "", "", -1, false, nil
}
