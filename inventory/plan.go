package inventory

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
)

// The plans of Stock's changes, pure functions of a product's shards as
// Views read them: which transfers a stock change or a rebalance records
// before the first of them runs.

// changePlan is a stock change of product id over its shards: add units
// spread over the live ones, or up to remove salable units taken back.
// Each shard's part is one transfer from or to Outside, named after the
// change and the shard (a retry with the same change id plans the same).
func changePlan(changeID, id string, shards []ShardStock, drained map[int]bool, add, remove int64) ([]shardstock.Transfer, error) {
	if add > 0 {
		return addPlan(changeID, id, shards, drained, add)
	}
	return removePlan(changeID, id, shards, remove), nil
}

// addPlan spreads add units over the shards that answer, hold the product
// and are not drained.
func addPlan(changeID, id string, shards []ShardStock, drained map[int]bool, add int64) ([]shardstock.Transfer, error) {
	var live []int
	up := 0
	for _, sh := range shards {
		if sh.Up {
			up++
		}
		if sh.Up && sh.Alloc != nil && !drained[sh.Index] {
			live = append(live, sh.Index)
		}
	}
	switch {
	case len(live) > 0:
	case up == 0: // an outage: try again
		return nil, fmt.Errorf("%w: no shard of %s answers to put units on", shardstock.ErrUnavailable, id)
	default: // the operator's own doing: say what to change
		return nil, shardstock.Conflict(fmt.Sprintf("no shard of %s can take units: each one that answers is drained "+
			"or does not hold the product; put a shard back (POST /admin/v1/shards/{index}/drain {\"drained\": false}) first", id))
	}
	var plan []shardstock.Transfer
	for j, n := range shardstock.SplitStock(add, len(live), spreadOffset(changeID, len(live))) {
		if n > 0 {
			plan = append(plan, changeTransfer(changeID, id, Outside, live[j], n))
		}
	}
	return plan, nil
}

// removePlan takes up to remove salable units, from the shards with the
// most first; never a locked or sold one.
func removePlan(changeID, id string, shards []ShardStock, remove int64) []shardstock.Transfer {
	shards = slices.Clone(shards)
	slices.SortStableFunc(shards, func(a, b ShardStock) int { return int(salable(b) - salable(a)) })
	var plan []shardstock.Transfer
	left := remove
	for _, sh := range shards {
		if left == 0 || salable(sh) == 0 {
			break
		}
		n := min(left, salable(sh))
		plan = append(plan, changeTransfer(changeID, id, sh.Index, Outside, n))
		left -= n
	}
	return plan
}

// changeTransfer is the part of stock change changeID on one shard.
func changeTransfer(changeID, id string, from, to int, n int64) shardstock.Transfer {
	shard := max(from, to)
	return shardstock.Transfer{ID: changeID + "-" + strconv.Itoa(shard), ProductID: id, From: from, To: to, Wanted: n}
}

func salable(sh ShardStock) int64 {
	if !sh.Up || sh.Salable == nil {
		return 0
	}
	return *sh.Salable
}

// rebalancePlan pairs shards above their target with shards below it. Targets: 0
// on drained shards, the total spread evenly (within one unit) on the others.
func rebalancePlan(shards []ShardStock, drained map[int]bool, product string) []shardstock.Transfer {
	var total int64
	var live []int
	for _, sh := range shards {
		if !sh.Up || sh.Salable == nil {
			continue
		}
		total += *sh.Salable
		if !drained[sh.Index] {
			live = append(live, sh.Index)
		}
	}
	if len(live) == 0 {
		return nil
	}
	target := map[int]int64{}
	for k, n := range shardstock.SplitStock(total, len(live), 0) {
		target[live[k]] = n
	}
	type delta struct {
		shard int
		n     int64
	}
	var over, under []delta
	for _, sh := range shards {
		if !sh.Up || sh.Salable == nil {
			continue
		}
		switch d := *sh.Salable - target[sh.Index]; {
		case d > 0:
			over = append(over, delta{sh.Index, d})
		case d < 0:
			under = append(under, delta{sh.Index, -d})
		}
	}
	var out []shardstock.Transfer
	for len(over) > 0 && len(under) > 0 {
		n := min(over[0].n, under[0].n)
		out = append(out, shardstock.Transfer{ID: ulid.Make().String(), ProductID: product, From: over[0].shard, To: under[0].shard, Wanted: n})
		over[0].n -= n
		under[0].n -= n
		if over[0].n == 0 {
			over = over[1:]
		}
		if under[0].n == 0 {
			under = under[1:]
		}
	}
	return out
}
