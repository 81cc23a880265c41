// Package inventory is the operators' side of the stock: defining a product
// (catalog row first, then its stock split across the shards), reading it
// back per shard, the shard overview, reconciling shard counters with the
// orders, and applying settlements (pay results) to the shard that holds
// each unit; and a sale's life (pause, stock and window changes, archive),
// rebalance and drain, restart resyncs, the admin API. Its ports to the
// shards (Shards) and to SQL (Catalog, Transfers, Controls, Ledger) are
// interfaces; it imports the domain, api and shard (for the shard set's
// value types).
package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Shards is what inventory needs of the shard set (shard.Set): shard i of
// Addrs, and the scripts that change a product's stock there.
type Shards interface {
	Addrs() []string
	Init(ctx context.Context, i int, product string, a shard.Allocation) (bool, error)
	Counters(ctx context.Context, i int, product string) (shard.Counters, error)
	Confirm(ctx context.Context, i int, product, id string) (bool, error)
	Release(ctx context.Context, i int, product, id string) (bool, error)
	Ping(ctx context.Context, i int) error
	Snapshot(ctx context.Context, products []string) []shard.ShardSnapshot
	TransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error)
	ReplayTransferOut(ctx context.Context, i int, product, id string, units int64, to int) (int64, error)
	Fenced(i int) bool
	TransferIn(ctx context.Context, i int, product, id string, units int64, from int) error
	RestoreHold(ctx context.Context, i int, o shardstock.Order, atMS int64) (bool, error)
	RepairRegister(ctx context.Context, p *shardstock.Product, i int) error
	SetWindow(ctx context.Context, i int, p *shardstock.Product) (changed bool, err error)
	DeleteProduct(ctx context.Context, i int, product string) error
}

var _ Shards = (*shard.Set)(nil)

// Catalog is the durable product catalog and the sale sessions
// (sqlstore.Store).
type Catalog interface {
	SaveSession(ctx context.Context, s shardstock.Session) (created bool, err error)
	Sessions(ctx context.Context) ([]shardstock.Session, error)
	DeleteSession(ctx context.Context, id string) (bool, error)
	SaveProduct(ctx context.Context, id, definition string) (created bool, stored string, err error)
	ProductDefinition(ctx context.Context, id string) (string, error)
	ProductIDs(ctx context.Context) ([]string, error)
	// InitialisedShards lists the shards on record as initialised for a
	// product; RecordInit puts one on record.
	InitialisedShards(ctx context.Context, product string) (map[int]bool, error)
	RecordInit(ctx context.Context, product string, shard int, epoch string) error
}

// Config tunes a Service; zero values mean the defaults.
type Config struct {
	CacheTTL    time.Duration // how long a known product is cached; default 30s
	NegativeTTL time.Duration // how long an unknown id is cached; default 1s
	Now         func() time.Time
	Logger      *slog.Logger
	OnSettle    func(action string) // optional: a settlement was applied (metrics)
	Breakers    func() []string     // optional: each shard's breaker state, for the shard overview
	Transfers   Transfers           // the transfer log and drain list; nil: no rebalance or drain
	// Controls keeps what operators change about a sale after defining it
	// (pause, window, archive, and stock changes through Transfers); nil:
	// none of that.
	Controls Controls
}

// Service defines products and answers for them. Safe for concurrent use.
type Service struct {
	shards  Shards
	catalog Catalog
	ledger  Ledger // may be nil: no reconcile
	cfg     Config
	mu      sync.Mutex // guards cache
	cache   map[string]cached
	snap    snapshotCache
	hook    stepHook // tests: stop a transfer after a step
	// controls are the operators' changes as last read from the catalog;
	// gen counts their changes, and a cached product read under an older
	// generation is read again (life.go).
	controls  atomic.Pointer[map[string]shardstock.Controls]
	sessions  atomic.Pointer[map[string]sessionWindow] // product -> the window of its sessions
	gen       atomic.Uint64
	movedOnce sync.Once // the shard-moved error is logged once
	problems  resyncProblems
}

type cached struct {
	p       *shardstock.Product // nil: unknown product
	expires time.Time
	gen     uint64
}

// maxNegative bounds the cached unknown ids, so a flood of random ids
// cannot grow memory without bound.
const maxNegative = 10000

// NewService returns a Service over the shards and the catalog; ledger
// (the order counts, for reconcile) may be nil.
func NewService(store Shards, catalog Catalog, ledger Ledger, cfg Config) *Service {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 30 * time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{shards: store, catalog: catalog, ledger: ledger, cfg: cfg, cache: make(map[string]cached)}
}

// Define validates p, records it in the catalog, then allocates it on every
// shard: the allocations sum to p.Stock and differ by at most one unit. It
// returns created = true on the product's first definition, false when the
// catalog already held this exact definition (an idempotent repeat, which
// also completes shards a failed earlier attempt left out). Errors:
// ErrInvalid; ErrConflict when the id is defined differently;
// ErrUnavailable when the catalog or a shard cannot answer (a repeat
// completes the work).
//
// The catalog row comes first, so a restarted coordinator knows the
// product and a conflicting definition is refused before any shard is
// touched. Shards are initialised in index order and each init is refused
// by a shard that holds another definition.
func (s *Service) Define(ctx context.Context, p shardstock.Product) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	p.StartsAt, p.EndsAt = p.StartsAt.UTC(), p.EndsAt.UTC()
	if err := s.placeOnShards(ctx, &p); err != nil {
		return false, err
	}
	def, err := json.Marshal(p)
	if err != nil {
		return false, fmt.Errorf("encode definition: %w", err)
	}
	created, stored, err := s.catalog.SaveProduct(ctx, p.ID, string(def))
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	case stored != string(def):
		return false, shardstock.Conflict(fmt.Sprintf("product %s is already defined with another definition", p.ID))
	}
	if err := s.allocate(ctx, p, string(def)); err != nil {
		return false, err
	}
	s.put(p.ID, &p)
	return created, nil
}

// placeOnShards sets the shards p lives on: those of its first definition
// when there is one (a repeat after the coordinators gained a shard still
// describes the product as it was split), else every shard of this
// coordinator. A product is never split again over another shard count:
// the shards that hold its units, and its buyers' homes, stay where they are.
func (s *Service) placeOnShards(ctx context.Context, p *shardstock.Product) error {
	stored, err := s.catalog.ProductDefinition(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	if c, ok := s.controlsOf(p.ID); ok && c.Archive != shardstock.ArchiveNone {
		return shardstock.Conflict(fmt.Sprintf("product %s is archived: define the next sale under another id", p.ID))
	}
	if stored == "" {
		if err := s.notOnShards(ctx, p.ID); err != nil {
			return err
		}
		p.ShardCount = len(s.shards.Addrs())
		p.ShardAddrs = s.shards.Addrs()
		return s.splitOverLiveShards(ctx, p)
	}
	var old shardstock.Product
	if err := json.Unmarshal([]byte(stored), &old); err != nil {
		return fmt.Errorf("decode definition of %s: %w", p.ID, err)
	}
	p.ShardCount, p.Split, p.ShardAddrs = old.ShardCount, old.Split, old.ShardAddrs
	return nil
}

// notOnShards refuses (409) a first definition of a product some shard
// already holds. The catalog is written before any shard, so a shard that
// has a product this catalog never defined holds another catalog's stock
// (or this database lost its record): answering 201 would sell next to
// units and holds it knows nothing of. A shard that does not answer is
// checked by its init later (a different definition there is a conflict).
func (s *Service) notOnShards(ctx context.Context, id string) error {
	for i := range len(s.shards.Addrs()) {
		c, err := s.shards.Counters(ctx, i, id)
		if err == nil && c.Known {
			return shardstock.Conflict(fmt.Sprintf("product %s is already on shard %d (salable %d, locked %d, sold %d) but not in this catalog: "+
				"those shards hold stock of another database; point SHARDSTOCK_DB at it, or use empty shards", id, i, c.Salable, c.Locked, c.Sold))
		}
	}
	return nil
}

// splitOverLiveShards sets the first definition's split: the stock spread
// over the shards that are not drained (a drained shard gets no unit, but is
// still initialised: it keeps the per-user limit registers of its buyers).
func (s *Service) splitOverLiveShards(ctx context.Context, p *shardstock.Product) error {
	n := p.ShardCount
	drained := map[int]bool{}
	if s.cfg.Transfers != nil {
		d, err := s.cfg.Transfers.DrainedShards(ctx)
		if err != nil {
			return fmt.Errorf("%w: drained shards: %w", shardstock.ErrUnavailable, err)
		}
		drained = d
	}
	var live []int
	for i := 0; i < n; i++ {
		if !drained[i] {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		live = make([]int, n) // every shard drained: spread over all of them
		for i := range live {
			live[i] = i
		}
	}
	p.Split = make([]int64, n)
	for k, a := range shardstock.SplitStock(p.Stock, len(live), spreadOffset(p.ID, len(live))) {
		p.Split[live[k]] = a
	}
	return nil
}

// split is p's allocation per shard (its first definition's).
func split(p *shardstock.Product, n int) []int64 {
	if len(p.Split) == n {
		return p.Split
	}
	return shardstock.SplitStock(p.Stock, n, spreadOffset(p.ID, n))
}

// allocate initialises p on every shard it lives on not yet on record, and
// records each. A shard on record that no longer holds p lost its data: it is not
// initialised again (its units may have been sold already) and the call
// answers ErrConflict naming it, the other shards being completed.
//
// Shard data loss, what happens: the lost shard's allocation is given up.
// Its salable units are out of the sale, its holds are gone (settlements for
// them are logged and reconcile reports the drift), and nothing it sold is
// ever sold again. Conservation then holds on every shard that kept its data.
func (s *Service) allocate(ctx context.Context, p shardstock.Product, def string) error {
	n := p.Shards(len(s.shards.Addrs()))
	if n > len(s.shards.Addrs()) {
		return fmt.Errorf("%w: %s is split over %d shards and this coordinator has %d (SHARDSTOCK_SHARDS)", shardstock.ErrUnavailable, p.ID, n, len(s.shards.Addrs()))
	}
	alloc := split(&p, n)
	epoch := newEpoch()
	known, err := s.catalog.InitialisedShards(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	var lost []int
	for i := 0; i < n; i++ {
		_, err := s.shards.Init(ctx, i, p.ID, shard.Allocation{
			Alloc: alloc[i], Limit: p.PerUserLimit,
			StartsMS: shardstock.UnixMS(p.StartsAt), EndsMS: shardstock.UnixMS(p.EndsAt),
			Definition: def, Epoch: epoch, Initialised: known[i],
		})
		switch {
		case errors.Is(err, shard.ErrShardLost):
			s.cfg.Logger.Error("shard lost a product's data; its allocation is given up", "shard", i, "product", p.ID)
			lost = append(lost, i)
			continue
		case errors.Is(err, shard.ErrInitConflict):
			return shardstock.Conflict(fmt.Sprintf("shard %d holds another definition of %s", i, p.ID))
		case err != nil:
			return fmt.Errorf("%w: define %s: %w", shardstock.ErrUnavailable, p.ID, err)
		}
		if !known[i] {
			if err := s.catalog.RecordInit(ctx, p.ID, i, epoch); err != nil {
				return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
			}
		}
	}
	if len(lost) > 0 {
		return shardstock.Conflict(fmt.Sprintf("shards %v lost their data for %s and were not initialised again (their units may have been sold); their allocation is given up", lost, p.ID))
	}
	return nil
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

// DefineSession creates or replaces a sale session after checking that
// each of its products is defined. Errors: ErrInvalid, ErrUnavailable.
func (s *Service) DefineSession(ctx context.Context, ss shardstock.Session) (bool, error) {
	if err := ss.Validate(); err != nil {
		return false, err
	}
	for _, id := range ss.Products {
		if _, err := s.Product(ctx, id); errors.Is(err, shardstock.ErrNotFound) {
			return false, shardstock.Invalid("unknown product " + id)
		} else if err != nil {
			return false, err
		}
	}
	created, err := s.catalog.SaveSession(ctx, ss)
	if err != nil {
		return false, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.RefreshControls(ctx); err != nil { // this coordinator obeys the session's window at once
		return created, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return created, nil
}

// Sessions lists every session, by start. Errors: ErrUnavailable.
func (s *Service) Sessions(ctx context.Context) ([]shardstock.Session, error) {
	ss, err := s.catalog.Sessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return ss, nil
}

// DeleteSession removes session id; its products keep selling only in a
// window of their own or of their other sessions. Errors: ErrNotFound,
// ErrUnavailable.
func (s *Service) DeleteSession(ctx context.Context, id string) error {
	found, err := s.catalog.DeleteSession(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if !found {
		return shardstock.ErrNotFound
	}
	if err := s.RefreshControls(ctx); err != nil { // this coordinator stops obeying its window at once
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return nil
}

// Product returns the definition of product id from the catalog (cached).
// Errors: ErrNotFound; ErrUnavailable when the catalog cannot answer.
func (s *Service) Product(ctx context.Context, id string) (*shardstock.Product, error) {
	if p, ok := s.get(id); ok {
		if p == nil {
			return nil, shardstock.ErrNotFound
		}
		return p, nil
	}
	def, err := s.catalog.ProductDefinition(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	if def == "" {
		s.put(id, nil)
		return nil, shardstock.ErrNotFound
	}
	gen := s.gen.Load()
	var p shardstock.Product
	if err := json.Unmarshal([]byte(def), &p); err != nil {
		return nil, fmt.Errorf("decode definition of %s: %w", id, err)
	}
	if c, ok := s.controlsOf(id); ok {
		p = c.Apply(p)
	}
	p.Moved = s.moved(&p)
	if w, ok := s.sessionWindowOf(id); ok && p.StartsAt.IsZero() && p.EndsAt.IsZero() {
		p.StartsAt, p.EndsAt = w.StartsAt, w.EndsAt // a product without a window of its own sells in its sessions'
	}
	s.putGen(id, &p, gen)
	return &p, nil
}

// moved says how this coordinator's shards differ from those p was defined
// on ("" when they are the same, or p predates the record): a master
// missing, or listed in another place, would have its units sold, settled
// and counted on the wrong master.
func (s *Service) moved(p *shardstock.Product) string {
	shards := s.shards.Addrs()
	if len(p.ShardAddrs) > len(shards) {
		return fmt.Sprintf("%s lives on %d shards and SHARDSTOCK_SHARDS lists %d: add the missing masters back", p.ID, len(p.ShardAddrs), len(shards))
	}
	for i, addr := range p.ShardAddrs {
		if shards[i] != addr {
			s.movedOnce.Do(func() {
				s.cfg.Logger.Error("a product's shard moved: keep the masters a product was defined on first, in the same order, and add new ones after them",
					"product", p.ID, "shard", i, "defined_on", addr, "now", shards[i])
			})
			return fmt.Sprintf("%s was defined with shard %d at %s, and SHARDSTOCK_SHARDS has %s there: keep the old masters first, in the same order", p.ID, i, addr, shards[i])
		}
	}
	return ""
}

// Cached returns product id if this process has it (or knows it is not
// defined: nil) without reading the catalog.
func (s *Service) Cached(id string) (*shardstock.Product, bool) { return s.get(id) }

func (s *Service) get(id string) (*shardstock.Product, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cache[id]
	if !ok || !s.cfg.Now().Before(c.expires) || c.gen != s.gen.Load() {
		return nil, false
	}
	return c.p, true
}

func (s *Service) put(id string, p *shardstock.Product) { s.putGen(id, p, s.gen.Load()) }

func (s *Service) putGen(id string, p *shardstock.Product, gen uint64) {
	ttl := s.cfg.CacheTTL
	if p == nil {
		ttl = s.cfg.NegativeTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxNegative+1000 {
		s.evictExpiredOrNegative()
	}
	s.cache[id] = cached{p: p, expires: s.cfg.Now().Add(ttl), gen: gen}
}

// evictExpiredOrNegative drops expired entries and unknown ids. Caller
// holds mu.
func (s *Service) evictExpiredOrNegative() {
	now := s.cfg.Now()
	for id, c := range s.cache {
		if c.p == nil || !now.Before(c.expires) {
			delete(s.cache, id)
		}
	}
}
