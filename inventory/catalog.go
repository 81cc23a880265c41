package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
)

// CatalogConfig is a Catalog's ports and settings; zero settings mean the
// defaults.
type CatalogConfig struct {
	Addrs    []string // the shards' addresses, in index order
	Shards   StockShards
	Catalog  CatalogStore
	Sessions SessionStore
	Controls ControlStore // nil: no operator changes (pause, window, archive)
	ShardLog ShardLog     // nil: no drained shards

	CacheTTL    time.Duration // how long a known product is cached; default 30s
	NegativeTTL time.Duration // how long an unknown id is cached; default 1s
	Now         func() time.Time
	Logger      *slog.Logger
}

// Catalog defines products and sale sessions and answers for them, from a
// cache that the operators' controls invalidate. Safe for concurrent use.
type Catalog struct {
	cfg   CatalogConfig
	mu    sync.Mutex // guards cache
	cache map[string]cached
	// controls are the operators' changes as last read from the catalog;
	// gen counts their changes, and a cached product read under an older
	// generation is read again (controls.go).
	controls  atomic.Pointer[map[string]shardstock.Controls]
	sessions  atomic.Pointer[map[string]sessionWindow] // product -> the window of its sessions
	gen       atomic.Uint64
	refresh   sync.Mutex // one RefreshControls at a time (controls.go)
	movedOnce sync.Once  // the shard-moved error is logged once
}

type cached struct {
	p       *shardstock.Product // nil: unknown product
	expires time.Time
	gen     uint64
}

// maxNegative bounds the cached unknown ids, so a flood of random ids
// cannot grow memory without bound.
const maxNegative = 10000

// NewCatalog returns a Catalog over cfg's ports.
func NewCatalog(cfg CatalogConfig) *Catalog {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 30 * time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	orDefaults(&cfg.Now, &cfg.Logger)
	return &Catalog{cfg: cfg, cache: make(map[string]cached)}
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
func (s *Catalog) Define(ctx context.Context, p shardstock.Product) (bool, error) {
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
	created, stored, err := s.cfg.Catalog.SaveProduct(ctx, p.ID, string(def))
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
func (s *Catalog) placeOnShards(ctx context.Context, p *shardstock.Product) error {
	stored, err := s.cfg.Catalog.ProductDefinition(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	if c, ok := s.Controls(p.ID); ok && c.Archive != shardstock.ArchiveNone {
		return shardstock.Conflict(fmt.Sprintf("product %s is archived: define the next sale under another id", p.ID))
	}
	if stored == "" {
		if err := s.notOnShards(ctx, p.ID); err != nil {
			return err
		}
		p.ShardCount = len(s.cfg.Addrs)
		p.ShardAddrs = s.cfg.Addrs
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
func (s *Catalog) notOnShards(ctx context.Context, id string) error {
	for i := range len(s.cfg.Addrs) {
		c, err := s.cfg.Shards.Counters(ctx, i, id)
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
func (s *Catalog) splitOverLiveShards(ctx context.Context, p *shardstock.Product) error {
	n := p.ShardCount
	drained := map[int]bool{}
	if s.cfg.ShardLog != nil {
		d, err := s.cfg.ShardLog.DrainedShards(ctx)
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

// allocate initialises p on every shard it lives on not yet on record, and
// records each. A shard on record that no longer holds p lost its data: it is not
// initialised again (its units may have been sold already) and the call
// answers ErrConflict naming it, the other shards being completed.
//
// Shard data loss, what happens: the lost shard's allocation is given up.
// Its salable units are out of the sale, its holds are gone (settlements for
// them are logged and reconcile reports the drift), and nothing it sold is
// ever sold again. Conservation then holds on every shard that kept its data.
func (s *Catalog) allocate(ctx context.Context, p shardstock.Product, def string) error {
	n := p.Shards(len(s.cfg.Addrs))
	if n > len(s.cfg.Addrs) {
		return fmt.Errorf("%w: %s is split over %d shards and this coordinator has %d (SHARDSTOCK_SHARDS)", shardstock.ErrUnavailable, p.ID, n, len(s.cfg.Addrs))
	}
	alloc := split(&p, n)
	epoch := newEpoch()
	known, err := s.cfg.Catalog.InitialisedShards(ctx, p.ID)
	if err != nil {
		return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	var lost []int
	for i := 0; i < n; i++ {
		_, err := s.cfg.Shards.Init(ctx, i, p.ID, shardstock.Allocation{
			Alloc: alloc[i], Limit: p.PerUserLimit,
			StartsMS: shardstock.UnixMS(p.StartsAt), EndsMS: shardstock.UnixMS(p.EndsAt),
			Definition: def, Epoch: epoch, Initialised: known[i],
		})
		switch {
		case errors.Is(err, shardstock.ErrShardLost):
			s.cfg.Logger.Error("shard lost a product's data; its allocation is given up", "shard", i, "product", p.ID)
			lost = append(lost, i)
			continue
		case errors.Is(err, shardstock.ErrInitConflict):
			return shardstock.Conflict(fmt.Sprintf("shard %d holds another definition of %s", i, p.ID))
		case err != nil:
			return fmt.Errorf("%w: define %s: %w", shardstock.ErrUnavailable, p.ID, err)
		}
		if !known[i] {
			if err := s.cfg.Catalog.RecordInit(ctx, p.ID, i, epoch); err != nil {
				return fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
			}
		}
	}
	if len(lost) > 0 {
		return shardstock.Conflict(fmt.Sprintf("shards %v lost their data for %s and were not initialised again (their units may have been sold); their allocation is given up", lost, p.ID))
	}
	return nil
}

// DefineSession creates or replaces a sale session after checking that
// each of its products is defined. Errors: ErrInvalid, ErrUnavailable.
func (s *Catalog) DefineSession(ctx context.Context, ss shardstock.Session) (bool, error) {
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
	created, err := s.cfg.Sessions.SaveSession(ctx, ss)
	if err != nil {
		return false, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if err := s.RefreshControls(ctx); err != nil { // this coordinator obeys the session's window at once
		return created, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return created, nil
}

// Sessions lists every session, by start. Errors: ErrUnavailable.
func (s *Catalog) Sessions(ctx context.Context) ([]shardstock.Session, error) {
	ss, err := s.cfg.Sessions.Sessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return ss, nil
}

// DeleteSession removes session id; its products keep selling only in a
// window of their own or of their other sessions. Errors: ErrNotFound,
// ErrUnavailable.
func (s *Catalog) DeleteSession(ctx context.Context, id string) error {
	found, err := s.cfg.Sessions.DeleteSession(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if !found {
		return shardstock.ErrNoSession
	}
	if err := s.RefreshControls(ctx); err != nil { // this coordinator stops obeying its window at once
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return nil
}

// Product returns the definition of product id from the catalog (cached).
// Errors: ErrNotFound; ErrUnavailable when the catalog cannot answer.
func (s *Catalog) Product(ctx context.Context, id string) (*shardstock.Product, error) {
	if p, ok := s.get(id); ok {
		if p == nil {
			return nil, shardstock.ErrNoProduct
		}
		return p, nil
	}
	def, err := s.cfg.Catalog.ProductDefinition(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: catalog: %w", shardstock.ErrUnavailable, err)
	}
	if def == "" {
		s.put(id, nil)
		return nil, shardstock.ErrNoProduct
	}
	gen := s.gen.Load()
	var p shardstock.Product
	if err := json.Unmarshal([]byte(def), &p); err != nil {
		return nil, fmt.Errorf("decode definition of %s: %w", id, err)
	}
	if c, ok := s.Controls(id); ok {
		p = c.Apply(p)
	}
	p.Moved = s.moved(&p)
	if w, ok := s.sessionWindowOf(id); ok && p.StartsAt.IsZero() && p.EndsAt.IsZero() {
		p.StartsAt, p.EndsAt, p.SessionWindow = w.StartsAt, w.EndsAt, true // a product without a window of its own sells in its sessions'
	}
	s.putGen(id, &p, gen)
	return &p, nil
}

// moved says how this coordinator's shards differ from those p was defined
// on ("" when they are the same, or p predates the record): a master
// missing, or listed in another place, would have its units sold, settled
// and counted on the wrong master.
func (s *Catalog) moved(p *shardstock.Product) string {
	shards := s.cfg.Addrs
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

// CheckShards compares this coordinator's shards with those the products
// ids were defined on, at start. A master listed at another index than a
// product still on sale was defined with (masters reordered, or one
// replaced) is an error: that product's units would be sold and counted on
// the wrong master (it answers 503 until the list is put right). beyond
// are the products it will not sell: those that live on more shards than
// it lists (the old list of a rolling grow, or masters left out), and
// those whose sale has ended on masters listed elsewhere now; which is the
// caller's to say.
func (s *Catalog) CheckShards(ctx context.Context, ids []string) (beyond []string, err error) {
	shards := s.cfg.Addrs
	now := s.cfg.Now()
	for _, id := range ids {
		p, err := s.Product(ctx, id)
		switch {
		case errors.Is(err, shardstock.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		case p.Archived:
			continue // its keys are gone from the shards
		}
		ended := !p.EndsAt.IsZero() && !now.Before(p.EndsAt)
		moved := false
		for i, addr := range p.ShardAddrs[:min(len(p.ShardAddrs), len(shards))] {
			if shards[i] == addr {
				continue
			}
			if !ended {
				return nil, fmt.Errorf("shard %d is %s here, and product %s, on sale, was defined with %s there: keep the masters in the order they were first listed, and add new ones after them", i, shards[i], id, addr)
			}
			moved = true
		}
		if moved || len(p.ShardAddrs) > len(shards) {
			beyond = append(beyond, id)
		}
	}
	return beyond, nil
}

// Cached returns product id if this process has it (or knows it is not
// defined: nil) without reading the catalog.
func (s *Catalog) Cached(id string) (*shardstock.Product, bool) { return s.get(id) }

func (s *Catalog) get(id string) (*shardstock.Product, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cache[id]
	if !ok || !s.cfg.Now().Before(c.expires) || c.gen != s.gen.Load() {
		return nil, false
	}
	return c.p, true
}

func (s *Catalog) put(id string, p *shardstock.Product) { s.putGen(id, p, s.gen.Load()) }

func (s *Catalog) putGen(id string, p *shardstock.Product, gen uint64) {
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
func (s *Catalog) evictExpiredOrNegative() {
	now := s.cfg.Now()
	for id, c := range s.cache {
		if c.p == nil || !now.Before(c.expires) {
			delete(s.cache, id)
		}
	}
}
