package inventory

import (
	"errors"
	"testing"

	"github.com/shardstock/shardstock"
)

// shardsOf is a product's shards as Views read them: salable units per
// shard, -1 for one that did not answer.
func shardsOf(salable ...int64) []ShardStock {
	var out []ShardStock
	for i, n := range salable {
		sh := ShardStock{Index: i, Up: n >= 0}
		if sh.Up {
			sh.Salable, sh.Alloc = &salable[i], &salable[i]
		}
		out = append(out, sh)
	}
	return out
}

// moves sums a plan's units per shard: taken off (negative) or put on.
func moves(plan []shardstock.Transfer) map[int]int64 {
	out := map[int]int64{}
	for _, t := range plan {
		if t.From != Outside {
			out[t.From] -= t.Wanted
		}
		if t.To != Outside {
			out[t.To] += t.Wanted
		}
	}
	return out
}

func TestChangePlan(t *testing.T) {
	cases := []struct {
		name        string
		shards      []ShardStock
		drained     map[int]bool
		add, remove int64
		want        map[int]int64
		err         error
	}{
		{"add over every live shard", shardsOf(5, 5, 5), nil, 9, 0, map[int]int64{0: 3, 1: 3, 2: 3}, nil},
		{"add skips a drained shard", shardsOf(5, 5, 5), map[int]bool{1: true}, 10, 0, map[int]int64{0: 5, 2: 5}, nil},
		{"add skips a shard that does not answer", shardsOf(5, -1, 5), nil, 4, 0, map[int]int64{0: 2, 2: 2}, nil},
		{"add with every shard drained", shardsOf(5, 5), map[int]bool{0: true, 1: true}, 4, 0, nil, shardstock.ErrConflict},
		{"add with no shard answering", shardsOf(-1, -1), nil, 4, 0, nil, shardstock.ErrUnavailable},
		{"remove from the fullest first", shardsOf(2, 7, 4), nil, 0, 9, map[int]int64{1: -7, 2: -2}, nil},
		{"remove no more than is salable", shardsOf(1, 0, 2), nil, 0, 50, map[int]int64{0: -1, 2: -2}, nil},
	}
	for _, c := range cases {
		plan, err := changePlan("c1", "lamp", c.shards, c.drained, c.add, c.remove)
		if !errors.Is(err, c.err) || err == nil && len(moves(plan)) != len(c.want) {
			t.Errorf("%s: plan %+v, err %v; want %v, %v", c.name, plan, err, c.want, c.err)
			continue
		}
		for i, n := range moves(plan) {
			if c.want[i] != n {
				t.Errorf("%s: shard %d moves %d, want %d (plan %+v)", c.name, i, n, c.want[i], plan)
			}
		}
	}
}

// The same change planned twice names the same transfers: a retry with the
// same Idempotency-Key finds its record.
func TestChangePlanIsRepeatable(t *testing.T) {
	a, _ := changePlan("k1", "lamp", shardsOf(3, 3, 3), nil, 7, 0)
	b, _ := changePlan("k1", "lamp", shardsOf(3, 3, 3), nil, 7, 0)
	if len(a) != len(b) {
		t.Fatalf("%+v, then %+v", a, b)
	}
	for k := range a {
		if a[k] != b[k] {
			t.Fatalf("%+v, then %+v", a, b)
		}
	}
}

func TestRebalancePlan(t *testing.T) {
	cases := []struct {
		name    string
		shards  []ShardStock
		drained map[int]bool
		want    map[int]int64
	}{
		{"evens out", shardsOf(2, 10, 9), nil, map[int]int64{0: 5, 1: -3, 2: -2}},
		{"balanced: nothing", shardsOf(5, 4, 4), nil, map[int]int64{}},
		{"empties a drained shard", shardsOf(4, 4, 4), map[int]bool{2: true}, map[int]int64{0: 2, 1: 2, 2: -4}},
		{"leaves a shard that does not answer", shardsOf(0, -1, 6), nil, map[int]int64{0: 3, 2: -3}},
	}
	for _, c := range cases {
		got := moves(rebalancePlan(c.shards, c.drained, "lamp"))
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		for i, n := range got {
			if c.want[i] != n {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
}
