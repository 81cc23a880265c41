// Package inventory is the operators' side of the stock: defining a product
// and splitting its stock across the shards, reading it back per shard, the
// shard overview, and the product catalog the purchase path reads.
package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard"
)

// Store is what inventory needs of the shard set (shard.Set).
type Store interface {
	Len() int
	Init(ctx context.Context, i int, product string, a shard.Allocation) (bool, error)
	Definition(ctx context.Context, i int, product string) (string, error)
	Counters(ctx context.Context, i int, product string) (shard.Counters, error)
	Ping(ctx context.Context, i int) error
	Shards() []*shard.Shard
}

var _ Store = (*shard.Set)(nil)

// Config tunes a Service; zero values mean the defaults.
type Config struct {
	CacheTTL    time.Duration // how long a known product is cached; default 30s
	NegativeTTL time.Duration // how long an unknown id is cached; default 1s
	Now         func() time.Time
}

// Service defines products and answers for them. Safe for concurrent use.
type Service struct {
	store Store
	cfg   Config
	mu    sync.Mutex // guards cache
	cache map[string]cached
}

type cached struct {
	p       *shardstock.Product // nil: unknown product
	expires time.Time
}

// maxNegative bounds the cached unknown ids, so a flood of random ids
// cannot grow memory without bound.
const maxNegative = 10000

// NewService returns a Service over store.
func NewService(store Store, cfg Config) *Service {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 30 * time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: store, cfg: cfg, cache: make(map[string]cached)}
}

// Define validates p, then allocates it on every shard: the allocations
// sum to p.Stock and differ by at most one unit. It returns created = true
// when any shard was newly initialised, false when every shard already held
// this exact definition (an idempotent repeat). Errors: ErrInvalid;
// ErrConflict when a shard holds another definition of the id;
// ErrUnavailable when a shard cannot answer (a repeat completes the work).
//
// Shards are initialised in index order and the walk stops at the first
// conflict, so two racing definitions of one id cannot both spread: the one
// that reaches shard 0 first wins every shard.
func (s *Service) Define(ctx context.Context, p shardstock.Product) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	p.StartsAt, p.EndsAt = p.StartsAt.UTC(), p.EndsAt.UTC()
	def, err := json.Marshal(p)
	if err != nil {
		return false, fmt.Errorf("encode definition: %w", err)
	}
	n := s.store.Len()
	alloc := shardstock.SplitStock(p.Stock, n, spreadOffset(p.ID, n))
	epoch := newEpoch()
	created := false
	for i := 0; i < n; i++ {
		c, err := s.store.Init(ctx, i, p.ID, shard.Allocation{
			Alloc: alloc[i], Limit: p.PerUserLimit,
			StartsMS: unixMS(p.StartsAt), EndsMS: unixMS(p.EndsAt),
			Definition: string(def), Epoch: epoch,
		})
		switch {
		case errors.Is(err, shard.ErrInitConflict):
			return false, shardstock.Conflict(fmt.Sprintf("product %s is already defined with another definition", p.ID))
		case err != nil:
			return created, fmt.Errorf("%w: define %s: %w", shardstock.ErrUnavailable, p.ID, err)
		}
		created = created || c
	}
	s.put(p.ID, &p)
	return created, nil
}

func spreadOffset(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func newEpoch() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Product returns the definition of product id, from the cache or else from
// the first shard that holds it. Errors: ErrNotFound when every shard
// answered without it; ErrUnavailable when none that answered holds it and
// some could not answer.
func (s *Service) Product(ctx context.Context, id string) (*shardstock.Product, error) {
	if p, ok := s.get(id); ok {
		if p == nil {
			return nil, shardstock.ErrNotFound
		}
		return p, nil
	}
	p, err := s.load(ctx, id)
	switch {
	case errors.Is(err, shardstock.ErrNotFound):
		s.put(id, nil)
	case err == nil:
		s.put(id, p)
	}
	return p, err
}

func (s *Service) load(ctx context.Context, id string) (*shardstock.Product, error) {
	var errs *multierror.Error
	for i := 0; i < s.store.Len(); i++ {
		def, err := s.store.Definition(ctx, i, id)
		if err != nil {
			errs = multierror.Append(errs, err)
			continue
		}
		if def == "" {
			continue
		}
		var p shardstock.Product
		if err := json.Unmarshal([]byte(def), &p); err != nil {
			return nil, fmt.Errorf("shard %d: decode definition of %s: %w", i, id, err)
		}
		return &p, nil
	}
	if errs != nil {
		return nil, fmt.Errorf("%w: %w", shardstock.ErrUnavailable, errs)
	}
	return nil, shardstock.ErrNotFound
}

func (s *Service) get(id string) (*shardstock.Product, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cache[id]
	if !ok || !s.cfg.Now().Before(c.expires) {
		return nil, false
	}
	return c.p, true
}

func (s *Service) put(id string, p *shardstock.Product) {
	ttl := s.cfg.CacheTTL
	if p == nil {
		ttl = s.cfg.NegativeTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxNegative+1000 {
		s.evictExpiredOrNegative()
	}
	s.cache[id] = cached{p: p, expires: s.cfg.Now().Add(ttl)}
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
