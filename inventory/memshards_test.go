package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardstock/shardstock"
)

// memShards is the shard set in memory: the counters, holds and transfer
// records the stock scripts keep (lua/), with their answers, and no
// purchase path. It lets the operators' side be tested in milliseconds;
// what only the scripts can show (a window judged by a shard, a purchase
// skipping a drained shard) is tested on real Redis.
type memShards struct {
	mu     sync.Mutex
	addrs  []string
	shards []*memShard
	claims map[string]bool // "product user id": the claims on the buyers' home (Reclaim, GiveBack)
}

type memShard struct {
	down     bool
	products map[string]*memProduct
}

type memProduct struct {
	c         shardstock.Counters
	def       string
	holds     map[string]string // reservation id -> "locked", "sold" or "released"
	transfers map[string]int64  // transfer id -> units it moved here or off here
}

var errDown = errors.New("shard down")

func newMemShards(n int) *memShards {
	m := &memShards{}
	for i := range n {
		m.addrs = append(m.addrs, fmt.Sprintf("mem-%d", i))
		m.shards = append(m.shards, &memShard{products: map[string]*memProduct{}})
	}
	return m
}

// product is product on shard i; errDown or ErrNotOnShard when there is
// none to read. Caller holds mu.
func (m *memShards) product(i int, product string) (*memProduct, error) {
	if m.shards[i].down {
		return nil, fmt.Errorf("shard %d: %w", i, errDown)
	}
	p := m.shards[i].products[product]
	if p == nil {
		return nil, fmt.Errorf("shard %d: %w", i, shardstock.ErrNotOnShard)
	}
	return p, nil
}

func (m *memShards) Init(_ context.Context, i int, product string, a shardstock.Allocation) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	switch {
	case errors.Is(err, errDown):
		return false, err
	case p != nil && p.def != a.Definition:
		return false, shardstock.ErrInitConflict
	case p != nil:
		return false, nil
	case a.Initialised:
		return false, shardstock.ErrShardLost
	}
	m.shards[i].products[product] = &memProduct{c: shardstock.Counters{Alloc: a.Alloc, Salable: a.Alloc, Known: true},
		def: a.Definition, holds: map[string]string{}, transfers: map[string]int64{}}
	return true, nil
}

func (m *memShards) Counters(_ context.Context, i int, product string) (shardstock.Counters, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	if errors.Is(err, shardstock.ErrNotOnShard) {
		return shardstock.Counters{}, nil
	}
	if err != nil {
		return shardstock.Counters{}, err
	}
	return p.c, nil
}

func (m *memShards) Snapshot(ctx context.Context, products []string) []shardstock.ShardSnapshot {
	var out []shardstock.ShardSnapshot
	for i, addr := range m.addrs {
		sn := shardstock.ShardSnapshot{Index: i, Addr: addr, Products: map[string]shardstock.Counters{}}
		for _, id := range products {
			c, err := m.Counters(ctx, i, id)
			sn.Products[id], sn.Err = c, err
		}
		out = append(out, sn)
	}
	return out
}

func (m *memShards) Ping(_ context.Context, i int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shards[i].down {
		return errDown
	}
	return nil
}

// The fake's fence never closes (a Restarts over it resyncs nothing: its
// tests use a fence of their own), and every shard carries this catalog.
func (m *memShards) Fenced(int) bool                                                    { return false }
func (m *memShards) Synced(int, string)                                                 {}
func (m *memShards) SeenRun(int) string                                                 { return "" }
func (m *memShards) ClaimCatalog(context.Context, int, string, func(string) bool) error { return nil }

func (m *memShards) TransferOut(_ context.Context, i int, product, id string, units int64, _ int) (int64, error) {
	return m.transferOut(i, product, id, units, false)
}

func (m *memShards) ReplayTransferOut(_ context.Context, i int, product, id string, units int64, _ int) (int64, error) {
	return m.transferOut(i, product, id, units, true)
}

// transferOut is lua/transfer_out.lua: once per transfer id, up to units
// (exact: all of them or none).
func (m *memShards) transferOut(i int, product, id string, units int64, exact bool) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	if err != nil {
		return 0, err
	}
	if n, ok := p.transfers[id]; ok {
		return n, nil
	}
	n := max(0, min(units, p.c.Salable))
	if exact && n < units {
		return 0, shardstock.ErrShortOfUnits
	}
	p.c.Salable -= n
	p.c.Alloc -= n
	p.transfers[id] = n
	return n, nil
}

// TransferIn is lua/transfer_in.lua: once per transfer id.
func (m *memShards) TransferIn(_ context.Context, i int, product, id string, units int64, _ int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	if err != nil {
		return err
	}
	if _, ok := p.transfers[id]; !ok {
		p.c.Salable += units
		p.c.Alloc += units
		p.transfers[id] = units
	}
	return nil
}

func (m *memShards) SetWindow(_ context.Context, i int, p *shardstock.Product) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.product(i, p.ID)
	return err == nil, err
}

func (m *memShards) DeleteProduct(_ context.Context, i int, product string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shards[i].down {
		return errDown
	}
	delete(m.shards[i].products, product)
	return nil
}

func (m *memShards) RepairRegister(context.Context, *shardstock.Product, int) error { return nil }

func (m *memShards) Confirm(_ context.Context, i int, product, id string) (bool, error) {
	return m.settle(i, product, id, "sold", shardstock.ErrHoldReleased)
}

func (m *memShards) Release(_ context.Context, i int, product, id string) (bool, error) {
	return m.settle(i, product, id, "released", shardstock.ErrHoldSold)
}

// settle moves a locked hold to state (lua/confirm.lua, lua/release.lua).
func (m *memShards) settle(i int, product, id, state string, wrongState error) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	if errors.Is(err, shardstock.ErrNotOnShard) {
		return false, shardstock.ErrUnknownHold
	}
	if err != nil {
		return false, err
	}
	switch p.holds[id] {
	case "":
		return false, shardstock.ErrUnknownHold
	case state:
		return false, nil
	case "locked":
	default:
		return false, wrongState
	}
	p.holds[id] = state
	p.c.Locked--
	if state == "sold" {
		p.c.Sold++
	} else {
		p.c.Salable++
	}
	return true, nil
}

// RestoreHold is lua/restore_hold.lua: a missing hold written again.
func (m *memShards) RestoreHold(_ context.Context, i int, o shardstock.Order, _ int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, o.ProductID)
	switch {
	case err != nil:
		return false, err
	case p.holds[o.ID] != "":
		return false, nil
	case p.c.Salable <= 0:
		return false, shardstock.ErrShortOfUnits
	}
	p.c.Salable--
	if o.Status == shardstock.StatusPaid {
		p.holds[o.ID] = "sold"
		p.c.Sold++
	} else {
		p.holds[o.ID] = "locked"
		p.c.Locked++
	}
	return true, nil
}

// FindHold finds reservation id's hold, as shard.Holds does: not found
// with no error only when every shard answered (the fake keeps no buyer
// on its holds: user is "").
func (m *memShards) FindHold(_ context.Context, products []string, id string) (string, string, int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var down error
	for i, sh := range m.shards {
		if sh.down {
			down = fmt.Errorf("shard %d: find hold: %w", i, errDown)
			continue
		}
		for _, product := range products {
			if p := sh.products[product]; p != nil && p.holds[id] != "" {
				return product, "", i, true, nil
			}
		}
	}
	return "", "", -1, false, down
}

// Reclaim records claim id of user: the fake keeps no limit, so every
// claim fits.
func (m *memShards) Reclaim(_ context.Context, p *shardstock.Product, user, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shards[0].down {
		return false, errDown
	}
	if m.claims == nil {
		m.claims = map[string]bool{}
	}
	m.claims[p.ID+" "+user+" "+id] = true
	return true, nil
}

// GiveBack forgets claim id of user.
func (m *memShards) GiveBack(_ context.Context, p *shardstock.Product, user, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shards[0].down {
		return errDown
	}
	delete(m.claims, p.ID+" "+user+" "+id)
	return nil
}

// claimed says whether user holds claim id on product.
func (m *memShards) claimed(product, user, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims[product+" "+user+" "+id]
}

// HomeOf: the fake lists every shard; the home is the first.
func (m *memShards) HomeOf(*shardstock.Product, string) (int, error) { return 0, nil }

// sell locks n units of product on shard i, as n purchases would.
func (m *memShards) sell(i int, product string, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.product(i, product)
	if err != nil {
		return err
	}
	if p.c.Salable < n {
		return shardstock.ErrSoldOut
	}
	for range n {
		p.holds[fmt.Sprintf("%s-r%d", product, len(p.holds))] = "locked"
	}
	p.c.Salable -= n
	p.c.Locked += n
	return nil
}

// wipe loses everything shard i held (a restart without its data).
func (m *memShards) wipe(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shards[i].products = map[string]*memProduct{}
}
