// Package shard is the set of N independent Redis masters that hold the
// stock. It owns one go-redis client per master, picks shards (the buyer's
// home first, failover to the others: purchase.go), runs the lua scripts with
// a per-call deadline, purchase steps batched per shard (batch.go), and
// combines per-shard errors with go-multierror. A Set is the pool of
// connections; each role the masters play is a type of its own (Purchases,
// Holds, Stock, Fence), and each port of the services to the shards is
// filled by one of them (ports_test.go lists which). The purchase
// protocol's decisions are walk.go, apart from Redis (step.go: the steps and statuses
// of purchase.lua); replies.go is the one place that reads go-redis's
// errors and Redis's error replies. It imports the domain and lua.
//
// Key layout of product P on every shard (one hash tag, so the keys of one
// product also share a slot on Redis Cluster):
//
//	ss:{p:P}:stock   hash   alloc salable locked sold limit starts ends def epoch
//	ss:{p:P}:holds   hash   reservation id -> "STATE user unix-ms"; STATE is
//	                        L (locked), S (sold) or R (released); or the
//	                        void marker "V g" (walk.go): no unit, fenced
//	ss:{p:P}:claims  hash   user -> space-separated claim ids: the per-user
//	                        limit register of the buyers whose home this
//	                        shard is (purchase.go); '#' -> the limit
//	ss:{p:P}:outbox  stream one entry per reservation (res user at)
//	ss:{p:P}:transfers hash transfer id -> "out N TO" or "in N FROM" (rebalance)
//	ss:products      set    ids of the products initialised on this shard
//
// On every shard that kept its data, salable + locked + sold = alloc.
package shard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/shardstock/shardstock/lua"
)

// MaxShards is the largest shard set supported.
const MaxShards = 64

// Config tunes a Set. Zero values mean the documented defaults.
type Config struct {
	// Timeout is the deadline of one call on one shard (dial, write and
	// read included). Default 250ms.
	Timeout time.Duration
	// RootCAs verify the certificates of rediss:// shards; nil: the
	// system's roots.
	RootCAs *x509.CertPool
	// EmptyTTL is how long a shard that answered "sold out" for a product
	// is skipped for it before one request probes it again. Default 1s.
	EmptyTTL time.Duration
	// PoolSize is the number of connections per shard; default go-redis's.
	PoolSize int
	// Dialer, if set, opens the shards' connections (tests: an in-memory
	// network); nil: go-redis's TCP dialer.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand returns a uniform int in [0, n); default math/rand/v2.IntN.
	Rand func(n int) int
	// Start picks the shard a purchase reserves on first; default StartHome.
	Start Start
	// Ledger and Inits, if set, let a per-user limit register lost with its
	// shard's data be rebuilt (register.go); nil: such buyers stay
	// unavailable.
	Ledger Ledger
	Inits  Inits
	// Resync, if set, fences a shard whose run id is not the one last
	// resynced and is told so (shard index, new run id), to bring it back
	// in line with SQL and call Synced (resync.go). It must not block.
	Resync func(shard int, runID string)
	// Health is told the outcome of every call and asked which shards to
	// skip; default: every shard is tried.
	Health Health
	// Coalesce runs concurrent purchase steps bound for one shard as one
	// script execution (batch.go); false: one execution per step.
	Coalesce bool
	// BatchGap spaces a shard's round trips under load (batch.go): while
	// the previous one carried more than one step, the next leaves no
	// sooner than BatchGap after it, with every step that came meanwhile.
	// 0: each leaves as soon as the previous is answered.
	BatchGap time.Duration
	// OnBatch, if set, is told the number of purchase steps of every round
	// trip (metrics).
	OnBatch func(calls int)
	// OnFailover, if set, is called each time a purchase moves on to
	// another shard (metrics).
	OnFailover func()
	// Logger logs what the caller cannot be told (a claim that could not
	// be given back, say). Default slog.Default().
	Logger *slog.Logger
}

// Health tracks which shards answer. Observe is called after each call with
// its error (nil on success); Up reports whether to try a shard at all.
type Health interface {
	Up(i int) bool
	Observe(i int, err error)
}

// DefaultTimeout is Config.Timeout's default, and SHARDSTOCK_SHARD_TIMEOUT's.
const DefaultTimeout = 250 * time.Millisecond

func (c *Config) fill() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.EmptyTTL <= 0 {
		c.EmptyTTL = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.IntN
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Shard is one Redis master of the set.
type Shard struct {
	Index  int
	Addr   string // host:port/db, never a password
	Client *redis.Client
	steps  *batcher // runs the purchase steps (batch.go)
	fence  fence    // restart fence (resync.go)
}

// Set is the shard set: the connections to the masters, their health,
// scripts and batchers, and one type per role the masters play, each
// filling the ports of that role. It is safe for concurrent use.
type Set struct {
	*pool
	Purchases *Purchases // a purchase's walk, its steps and the per-user limit registers (purchase.go, register.go)
	Holds     *Holds     // holds settled, found and restored (holds.go)
	Stock     *Stock     // a product's units: init, counters, transfers, window, snapshot (stock.go, snapshot.go)
	Fence     *Fence     // a restarted shard fenced until its resync (resync.go, catalog.go)
}

// The roles: each holds the pool, and nothing else.
type (
	Purchases struct{ *pool }
	Holds     struct{ *pool }
	Stock     struct{ *pool }
	Fence     struct{ *pool }
)

// pool is what every role uses: the shards (clients, health, fences,
// batchers), the scripts, the empty marks and the give-back queue.
type pool struct {
	shards    []*Shard
	scripts   *lua.Scripts
	cfg       Config
	empty     *emptyMarks
	giveBacks *giveBacks
	rebuilds  singleflight.Group // register rebuilds in progress, by product/shard
}

// Open builds a Set from Redis URLs (redis:// or rediss://), URL i being
// shard i. It does not dial; a shard that is down is found out per call.
func Open(urls []string, cfg Config) (*Set, error) {
	if len(urls) == 0 || len(urls) > MaxShards {
		return nil, fmt.Errorf("need 1 to %d shard URLs, got %d", MaxShards, len(urls))
	}
	cfg.fill()
	p := &pool{scripts: lua.NewScripts(), cfg: cfg, empty: newEmptyMarks(cfg.EmptyTTL)}
	s := &Set{pool: p, Purchases: &Purchases{p}, Holds: &Holds{p}, Stock: &Stock{p}, Fence: &Fence{p}}
	for i, u := range urls {
		opt, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		if opt.TLSConfig != nil {
			opt.TLSConfig.RootCAs = cfg.RootCAs
			opt.TLSConfig.MinVersion = tls.VersionTLS12
		}
		if cfg.Resync != nil {
			opt.OnConnect = s.onConnect(i)
		}
		sh := newShard(i, opt, cfg)
		if cfg.Resync != nil {
			sh.Client.AddHook(fenceHook{&sh.fence})
		}
		sh.steps = newBatcher(sh, s.scripts.Purchase, cfg)
		s.shards = append(s.shards, sh)
	}
	s.startGiveBacks()
	return s, nil
}

func newShard(i int, opt *redis.Options, cfg Config) *Shard {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	opt.ContextTimeoutEnabled = true
	// No retries inside go-redis: failing over to another shard is the retry.
	opt.MaxRetries = -1
	// One dial per attempt: a refused connection fails over at once instead
	// of sleeping through go-redis's dial retries.
	opt.DialerRetries = 1
	if cfg.PoolSize > 0 {
		opt.PoolSize = cfg.PoolSize
	}
	if cfg.Dialer != nil {
		opt.Dialer = cfg.Dialer
	}
	return &Shard{Index: i, Addr: fmt.Sprintf("%s/%d", opt.Addr, opt.DB), Client: redis.NewClient(opt)}
}

// Len is the number of shards.
func (s *pool) Len() int { return len(s.shards) }

// Addrs returns every shard's address (host:port/db, never a password), in
// index order: a new slice.
func (s *pool) Addrs() []string {
	out := make([]string, len(s.shards))
	for i, sh := range s.shards {
		out[i] = sh.Addr
	}
	return out
}

// Shards returns the shards in index order. The slice must not be changed.
func (s *pool) Shards() []*Shard { return s.shards }

// Close closes every client and returns their errors combined.
func (s *Set) Close() error {
	if s.giveBacks != nil {
		s.stopGiveBacks()
	}
	var errs *multierror.Error
	for i := len(s.shards) - 1; i >= 0; i-- {
		s.shards[i].steps.close()
		if err := s.shards[i].Client.Close(); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("shard %d: close: %w", i, err))
		}
	}
	return errs.ErrorOrNil()
}

// runScript runs script on shard sh under the per-call deadline and reports the
// outcome to Health.
func (s *pool) runScript(ctx context.Context, sh *Shard, script *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	v, err := script.Run(ctx, sh.Client, keys, args...).Result()
	s.observe(sh.Index, err)
	return v, err
}

func (s *pool) observe(i int, err error) {
	if errors.Is(err, redis.Nil) { // "no such key" is an answer
		err = nil
	}
	if s.cfg.Health != nil {
		s.cfg.Health.Observe(i, err)
	}
}

func (s *pool) up(i int) bool { return s.cfg.Health == nil || s.cfg.Health.Up(i) }

// errShardDown is the error recorded for a shard that Health says is down;
// no call was made.
var errShardDown = errors.New("down, not tried")

// callCtx detaches ctx from the caller's cancellation for clean-up work
// that must run even when the buyer has gone away.
func callCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
