package main

// The model-based test of the stock path (issue 24). It generates histories
// of operations (purchase, pay, fail, cancel, timeout, rebalance, drain,
// stock add/remove, window changes, pause, archive, a burst of buyers) and
// faults (shard kill, freeze, machine crash with the AOF cut back, wipe,
// coordinator restart, a cut or slow link) with pgregory.net/rapid, runs each on two coordinators
// sharing three real redis-servers and one database (SQLite, or MariaDB in
// the second run), and checks the invariants of DESIGN.md against what the
// history did: after every step the ones that must hold at every moment (no
// oversell, conservation, the per-user limit), and once the faults are
// healed and the messages drained the ones that hold at rest (no lost sale,
// convergence, no stranded stock, truthful answers). A failing history is
// shrunk by rapid and printed as a numbered list of steps; rapid keeps it in
// testdata/rapid/ and replays it first on every later run. A calm history
// (quiesce) waits for each step's messages, so its draws replay it.
//
// make test runs it for SHARDSTOCK_MODEL_BUDGET (default 4m per database);
// make soak SOAK=30m runs it for as long as asked, printing progress.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore"
)

const modelShards = 3

// modelEnv lives for one run of the test: the shards, their proxies, the
// budget and the figures.
type modelEnv struct {
	t      *testing.T
	redis  modelMasters
	links  []modelLink     // between the coordinators and each master
	urls   []string        // through the links: what the coordinators use
	direct []*redis.Client // straight to the masters: what the checks read
	client *http.Client    // to the coordinators
	// net, in the fast mode, is the in-memory network the coordinators
	// listen on and reach the masters by: the whole run is in a
	// testing/synctest bubble, on its fake clock.
	net     *shardtest.Net
	mem     *shardtest.Mem
	newDB   func(dir string) string // a fresh database for a history whose files go in dir
	scratch string                  // where the histories' files go (scratchDir)
	// products are the sale's ids: one on SQLite (every step on one
	// product), two that differ only in case on MariaDB (its collation).
	products []string
	budget   time.Duration
	start    time.Time
	failed   atomic.Bool // a history failed: rapid is shrinking it, run everything
	soak     bool

	modelCounts
}

// modelMasters are the shards' masters: real redis-servers
// (shardtest.Redis), or in memory in the fast mode (shardtest.Mem).
type modelMasters interface {
	URLs() []string
	URLsAs(name string) []string
	Kill(i int)
	Restart(i int)
	Freeze(i int)
	Thaw(i int)
	Wipe(i int)
	CheckpointAs(i int, name string)
	RewindTo(i int, name string)
	DropCheckpoint(i int, name string)
}

// modelLink is the link between the coordinators and one master: toxiproxy
// before a real redis-server, the in-memory masters' own link in the fast
// mode.
type modelLink interface {
	cut()                       // refuse new connections, close those open
	slow(d time.Duration) error // delay everything the master sends by d
	mend() error                // neither cut nor slow
}

type toxiLink struct{ p *toxiproxy.Proxy }

func (l toxiLink) cut() { l.p.Stop() }
func (l toxiLink) slow(d time.Duration) error {
	_, err := l.p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds())))
	return err
}
func (l toxiLink) mend() error {
	l.p.Toxics.ResetToxics(context.Background())
	if err := l.p.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		return err
	}
	return nil
}

type memLink struct {
	mem *shardtest.Mem
	i   int
}

func (l memLink) cut()                       { l.mem.Cut(l.i) }
func (l memLink) slow(d time.Duration) error { l.mem.Slow(l.i, d); return nil }
func (l memLink) mend() error                { l.mem.Mend(l.i); return nil }

// modelFast is the fast mode (SHARDSTOCK_MODEL_FAST=1, make soak
// MODE=fast): the same generator and checks on in-memory masters that run
// the real Lua scripts (shardtest.Mem, miniredis), SQLite only.
func modelFast() bool { return os.Getenv("SHARDSTOCK_MODEL_FAST") != "" }

func modelBudget(t *testing.T) time.Duration {
	d := 4 * time.Minute
	if v := os.Getenv("SHARDSTOCK_MODEL_BUDGET"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SHARDSTOCK_MODEL_BUDGET=%q: %v", v, err)
		}
	}
	return d
}

// TestModelStockPath runs generated histories against the real stock path
// until its budget is spent, on SQLite and on MariaDB.
func TestModelStockPath(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		flag.Set("rapid.checks", "1000000") // the budget ends the run, not a count
	}
	if f := flag.Lookup("rapid.shrinktime"); f != nil && f.Value.String() == "30s" {
		flag.Set("rapid.shrinktime", "4m") // a history costs seconds: shrinking needs time
	}
	budget := modelBudget(t)
	if !modelFast() {
		for _, db := range []string{"sqlite", "mariadb"} {
			t.Run(db, func(t *testing.T) { runModel(t, db, budget, nil) })
		}
		return
	}
	// The fast mode: every timer of a run on its bubble's fake clock, one
	// run per core (a run is one history at a time, about one core busy),
	// each with its own masters, bubble and seed. The first is named
	// sqlite, as in the real mode, so that its kept histories replay; the
	// others sqlite-2, ... (their own testdata/rapid directories).
	//
	// A fast run is CPU bound, a fifth of it the collector's: memory is
	// cheap here (a run stays under 1 GiB).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	stop := watchModel()
	defer stop()
	var total modelCounts
	began := time.Now() // (outside the bubbles: real time)
	t.Cleanup(func() { total.report(t, "all runs together", time.Since(began)) })
	for w := range modelWorkers(t) {
		name := "sqlite"
		if w > 0 {
			name = fmt.Sprintf("sqlite-%d", w+1)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { runModel(t, "sqlite", budget, &total) })
		})
	}
}

// modelWorkers is how many fast runs go side by side:
// SHARDSTOCK_MODEL_WORKERS, by default one per core (GOMAXPROCS).
func modelWorkers(t *testing.T) int {
	n := runtime.GOMAXPROCS(0)
	if v := os.Getenv("SHARDSTOCK_MODEL_WORKERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SHARDSTOCK_MODEL_WORKERS=%q: a number of runs, at least 1", v)
		}
	}
	return n
}

// modelCounts are a run's histories, steps and faults (and, summed, every
// run's).
type modelCounts struct {
	histories, steps, faults atomic.Int64
	mu                       sync.Mutex
	ops                      map[string]int64 // the steps done, by kind
}

func (c *modelCounts) add(o *modelCounts) {
	c.histories.Add(o.histories.Load())
	c.steps.Add(o.steps.Load())
	c.faults.Add(o.faults.Load())
	o.mu.Lock()
	defer o.mu.Unlock()
	for op, n := range o.ops {
		c.did(op, n)
	}
}

// did counts n steps of kind op.
func (c *modelCounts) did(op string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int64{}
	}
	c.ops[op] += n
}

func (c *modelCounts) report(t *testing.T, what string, elapsed time.Duration) {
	h, s, f := c.histories.Load(), c.steps.Load(), c.faults.Load()
	t.Logf("model test, %s: %d histories, %d steps, %d faults in %s (%.1f histories/min, %.0f steps/min, %.1f faults per history)",
		what, h, s, f, elapsed.Round(time.Second), float64(h)/elapsed.Minutes(), float64(s)/elapsed.Minutes(), float64(f)/max(1, float64(h)))
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds := slices.Sorted(maps.Keys(c.ops))
	for k, op := range kinds {
		kinds[k] = fmt.Sprintf("%s %d", op, c.ops[op])
	}
	t.Logf("model test, %s, the steps by kind: %s", what, strings.Join(kinds, ", "))
}

// modelProgress counts the steps of every history, for watchModel.
var modelProgress atomic.Int64

// watchModel stops the fast mode's run with every goroutine's stack when
// no step has been made for two minutes of real time: in a synctest bubble
// the fake clock moves only when every goroutine waits durably, and one
// that waits on a sync.Mutex held by a goroutine waiting on a timer stops
// it for good (a hang, not a failure, without this).
func watchModel() (stop func()) {
	done := make(chan struct{})
	go func() {
		last, since := modelProgress.Load(), time.Now()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if n := modelProgress.Load(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) > 2*time.Minute {
				debug.SetTraceback("all")
				panic("model test (fast mode): no step in 2 minutes of real time: the bubble's clock is stuck (a goroutine waits on a lock held by one that waits on a timer); every goroutine follows")
			}
		}
	}()
	return func() { close(done) }
}

// scratchDir is where the histories' files go (SQLite databases, spools):
// t.TempDir, or in the fast mode a directory on tmpfs when there is one. An
// fsync takes real time, which the bubble's clock waits for: on this
// machine's disk the fast mode's histories spent most of theirs so.
func scratchDir(t *testing.T) string {
	if !modelFast() {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("/dev/shm", "shardstock-model-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// runModel runs histories on db until the budget (real time) is spent,
// adding its counts to total (nil: none).
func runModel(t *testing.T, db string, budget time.Duration, total *modelCounts) {
	if modelFast() { // (the last cleanup: what the closed clients left, a redial's sleep, ends before the bubble does)
		t.Cleanup(func() { time.Sleep(5 * time.Second) })
	}
	env := newModelEnv(t, budget)
	if db == "sqlite" {
		env.newDB = func(dir string) string { return "sqlite:" + dir + "/orders.db" }
		env.products = []string{"sku"}
	} else {
		env.newDB = func(string) string { return freshMySQL(t) }
		env.products = []string{"sku", "Sku"}
	}
	defer func() { // (also when a history failed)
		env.report(t, strings.TrimPrefix(t.Name(), "TestModelStockPath/"), env.elapsed())
		if total != nil {
			total.add(&env.modelCounts)
		}
	}()
	// Round after round: rapid ends a run once its test has run 24 hours by
	// time.Now, which in the fast mode is the bubble's fake clock (16
	// minutes pass at each payment timeout: a 30-minute soak stopped after
	// under 5 minutes, "23h49m").
	rapid.Check(rapidTB{t}, env.history)
	for !t.Failed() && env.elapsed() < env.budget {
		rapid.Check(rapidTB{t}, env.history)
	}
	if env.histories.Load() == 0 {
		t.Fatal("no history ran")
	}
}

// prefixed writes each line with a prefix.
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	_, err := fmt.Fprintf(p.w, "%s%s", p.prefix, b)
	return len(b), err
}

// rapidTB is t without its Deadline, which rapid asks a *testing.T for and
// a test in a synctest bubble may not call (the budget ends the run).
type rapidTB struct{ rapid.TB }

// quiet is go-redis's logger in the model test: shards are down on purpose.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func newModelEnv(t *testing.T, budget time.Duration) *modelEnv {
	redis.SetLogger(quiet{})
	// The masters as deploy/redis.sh runs them by default: the coordinators
	// log in as their ACL user, and no master may refuse them anything in
	// any history (shardtest reads the ACL LOG at the end); the model's own
	// reads and flushes go in as admin.
	opts := shardtest.Options{ACLUser: "shardstock:model-test-pw"}
	env := &modelEnv{t: t, budget: budget, soak: os.Getenv("SHARDSTOCK_MODEL_SOAK") != ""}
	env.start = env.realNow()
	env.scratch = scratchDir(t)
	var admin []string
	if modelFast() {
		env.mem = shardtest.StartMemNet(t, modelShards, opts)
		env.redis, env.net = env.mem, shardtest.NewNet()
		env.urls, admin = env.mem.URLs(), env.mem.URLsAs("admin")
		for i := range modelShards {
			env.links = append(env.links, memLink{env.mem, i})
		}
		tr := &http.Transport{DialContext: env.net.Dial}
		env.client = &http.Client{Timeout: 5 * time.Second, Transport: tr}
		t.Cleanup(tr.CloseIdleConnections)
	} else {
		r := shardtest.StartWith(t, modelShards, opts)
		env.redis, env.urls, admin = r, r.URLs(), r.URLsAs("admin")
		for i := range modelShards {
			p, urls := r.BehindToxiproxy(t, i)
			env.links = append(env.links, toxiLink{p})
			env.urls[i] = urls[i]
		}
		env.client = modelClient
	}
	for i := range modelShards {
		opt, err := redis.ParseURL(admin[i])
		if err != nil {
			t.Fatal(err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = time.Second, time.Second, time.Second, -1
		if env.mem != nil {
			opt.Dialer = env.mem.DialDirect
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { c.Close() })
		env.direct = append(env.direct, c)
	}
	return env
}

// mproduct is the model's product.
type mproduct struct {
	id       string
	stock    int64 // as defined
	limit    int64
	archived bool
	paused   bool // the kill switch is on (a pause answered 200, no resume since)
	queued   bool // sold through a waiting room (modelroom_test.go)
	ended    bool // its window was ended (and not reopened)
	// archiveDue: its window ended more than serve's ARCHIVE_AFTER (24 h)
	// ago, so the automatic archive takes it once its orders are final.
	archiveDue bool
}

// attempt is one purchase and what the buyer was told.
type attempt struct {
	step           int
	seq            int // its index among the history's attempts
	user, product  string
	status         int
	code           string // the error code, or the ticket status once resolved
	order, ticket  string
	shard          int
	unknown        bool      // no answer (the connection or the deadline): the outcome is unknown to the buyer
	lostByRewind   bool      // answered 200 on a shard later cut back before its order was written
	at             time.Time // when it was sent
	failFastMay    bool      // its order was not written when it grew older than the fail-fast age
	resolvedOrders string
}

// history is one generated run.
type history struct {
	env      *modelEnv
	t        *rapid.T
	db       string
	dir      string
	clock    *offsetClock
	coords   [2]*Main
	skew     [2]time.Duration // how far each coordinator's clock is ahead of the shards'
	start    [2]shard.Start   // where each coordinator's purchases reserve first (SHARDSTOCK_START)
	products []*mproduct
	users    []string
	steps    []string
	attempts []*attempt

	sql *sqlstore.Store // the order table, read by the checks (not through a coordinator: one may be stopped)
	// lists is each coordinator's shard count: the first lists[c] masters
	// (a rolling grow: coordinator 1 may still run on the old list, the
	// masters before the last; "grow" restarts it on all of them).
	lists [2]int
	// stopped coordinators are away (stop-coordinator) until started again.
	stopped [2]bool
	nets    [2]*severable // each coordinator's network, as a kill ends it
	// dbNet is the coordinators' network to a MariaDB (nil on SQLite):
	// a db-down step ends it (modeldb_test.go), dbAway until db-up.
	dbNet     *severable
	dbNetName string
	dbAway    bool
	places    map[string]string // each buyer's place in a waiting room's line, by product and buyer
	// crashAt, per coordinator, is the step of a stock transfer after which
	// the coordinator "dies" (crash-mid-change): the transfer stops there.
	crashAt [2]atomic.Pointer[string]
	// leaked: a coordinator was stopped or restarted with claims it had
	// not given back yet (a known limit: the per-user limit errs on the
	// side of refusing), so a 409 is not checked any more.
	leaked bool
	// stalled coordinators' order writers wait (a slow database) with the
	// reservations they read in hand (stall-orders).
	stalled [2]atomic.Bool
	// pendingSince is when the model first saw each claim give-back pending.
	pendingSince map[string]time.Time
	// claimsLost: buyers (product, user) whose home lost the claim of a
	// reservation answered 200 before its order was written (markLost)
	claimsLost map[[2]string]bool
	payMsgs    []*payMsg // the payment results sent as messages
	// paySecrets: each coordinator's payment secret and the previous one
	// (a rotation under way); centreSecret: what the payment centre signs with
	paySecrets   [2][2][]byte
	centreSecret []byte

	killed, frozen, cut, slow, wiped [modelShards]bool
	snaps                            [modelShards]map[int]int64    // step → the AOF's size: the points a machine crash can go back to
	sigs                             [modelShards]map[int]shardSig // step → what the shard had done by then
	losses                           [modelShards][]int            // when the shard lost writes (crash, wipe): how many attempts were made by then
	step                             int
	crowd                            int  // units new buyers buy after every step (crowdAll: until sold out)
	crowdCap                         int  // at most this many new buyers per product in one burst
	crashy                           int  // after every step a machine crash with a chance of 1 in 2^crashy (0: none)
	hurried                          bool // the next step does not wait for the last one's messages (quiesce)
	fresh                            int  // buyers made up by the crowd and the final sell-out
	began                            time.Time
}

// realNow is the time on the machine's clock: in the fast mode time.Now
// is the bubble's fake clock, which runs ahead of the real one by every
// wait the run did not have to wait, and the budget is real time.
func (env *modelEnv) realNow() time.Time {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		env.t.Fatal(err)
	}
	return time.Unix(tv.Unix())
}

func (env *modelEnv) elapsed() time.Duration { return env.realNow().Sub(env.start) }

func (env *modelEnv) history(t *rapid.T) {
	if !env.failed.Load() && env.elapsed() > env.budget {
		return // the budget is spent: the remaining checks pass at once
	}
	env.histories.Add(1)
	began := env.realNow()
	dir, err := os.MkdirTemp(env.scratch, "h")
	if err != nil {
		t.Fatal(err)
	}
	h := &history{env: env, t: t, dir: dir, db: env.newDB(dir), clock: &offsetClock{}, began: began}
	for i := range h.snaps {
		h.snaps[i], h.sigs[i] = map[int]int64{}, map[int]shardSig{}
	}
	env.reset(t)
	defer h.close()
	h.lists = [2]int{modelShards, modelShards}
	if h.coin(2, "rolling grow") {
		h.lists[1] = modelShards - 1
		h.logf("a rolling grow: coordinator 1 runs on the old shard list (shards 0-%d) until it is grown", modelShards-2)
	}
	// A coordinator's clock may be off the shards' (NTP lost, a VM paused
	// and resumed): the sale's clock corrects it by the skew it measures
	// (shard.Clock), the order service keeps the coordinator's own, as in
	// production. (At most 20 s: the timeout step moves the order clock
	// 16 minutes, a minute past the payment timeout.)
	for c := range h.skew {
		if h.coin(2, fmt.Sprintf("coordinator %d's clock is off", c)) {
			h.skew[c] = rapid.SampledFrom([]time.Duration{-20 * time.Second, -3 * time.Second, -1500 * time.Millisecond,
				1500 * time.Millisecond, 3 * time.Second, 20 * time.Second}).Draw(t, "skew")
			h.logf("coordinator %d's clock is %s off the shards'", c, h.skew[c])
		}
	}
	// Where a purchase reserves first (SHARDSTOCK_START), per coordinator
	// as a rolling deploy may leave it: at random, a buyer's unit is
	// mostly on another shard than the buyer's claim, so a home away holds
	// up claims whose settlements went out (hundreds of them in a large
	// sale: the give-back sweep's pages, break 5 of issue 40).
	switch rapid.IntRange(0, 3).Draw(t, "where purchases start") {
	case 1, 2:
		h.start = [2]shard.Start{shard.StartRandom, shard.StartRandom}
		h.logf("both coordinators reserve first on a random shard")
	case 3:
		c := rapid.IntRange(0, 1).Draw(t, "coordinator")
		h.start[c] = shard.StartRandom
		h.logf("coordinator %d reserves first on a random shard, the other at the buyer's home", c)
	}
	h.drawPaySecrets()
	for c := range h.coords {
		h.coords[c] = h.startCoordinator(c)
	}
	if h.sql, err = sqlstore.Open(h.db); err != nil {
		t.Fatal(err)
	}
	// A large sale (1 history in 16) crosses the batch boundaries a small one
	// never reaches: more than 500 outbox entries in one read, more than
	// 200 settlements and claim give-backs in one sweep (a timeout of
	// hundreds of orders), more than one page of everything.
	lo, hi := 2, 6
	h.crowdCap = 64
	if h.coin(4, "a large sale") {
		h.crowdCap, lo, hi = 1500, 220, 1500
		h.logf("a large sale")
	}
	for k, id := range env.products {
		p := &mproduct{id: id, stock: int64(rapid.IntRange(lo, hi).Draw(t, "stock_"+id)), limit: int64(rapid.IntRange(1, 2).Draw(t, "limit_"+id))}
		rep := h.define(k%2, id, fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, p.stock, p.limit))
		if rep.status != 201 {
			h.fail("define %s: %d %s", id, rep.status, rep.raw)
		}
		h.products = append(h.products, p)
		h.logf("define %s: stock %d, limit %d", id, p.stock, p.limit)
		h.queueRoom(k%2, p)
	}
	for k := range rapid.IntRange(3, 8).Draw(t, "buyers") {
		h.users = append(h.users, fmt.Sprintf("u%d", k))
	}
	enabled := h.swarm()
	h.crowd = rapid.SampledFrom([]int{0, 1, crowdAll, crowdAll}).Draw(t, "crowd")
	if h.crowd > 0 {
		h.logf("the crowd: after every step, new buyers buy up to %s", map[bool]string{true: "every salable unit", false: strconv.Itoa(h.crowd) + " units"}[h.crowd == crowdAll])
	}
	h.hurried = h.coin(2, "hurried")
	if h.hurried {
		h.logf("hurried: a step does not wait for the messages of the last one")
	}
	h.quiesce()
	h.snapshot() // the sale as defined: the first point a crash can go back to
	h.crashy = rapid.IntRange(0, 2).Draw(t, "crashes")
	if h.crashy > 0 {
		h.logf("machine crashes: after every step, one shard crashes with a chance of 1 in %d", 1<<h.crashy)
	}
	n := rapid.IntRange(10, 40).Draw(t, "steps")
	for h.step = 1; h.step <= n; h.step++ {
		var ops []string // only what can do something now
		for _, op := range enabled {
			if h.applicable(op) {
				ops = append(ops, op)
			}
		}
		op := rapid.SampledFrom(ops).Draw(t, "op")
		h.do(op)
		h.quiesce()
		h.buyCrowd()
		h.quiesce()
		if h.crashy > 0 && h.canCrash(h.step) && h.coin(h.crashy, "crash after the step") {
			h.env.faults.Add(1)
			h.env.did("crash-after-step", 1)
			h.crash(h.step)
			h.quiesce()
		}
		h.snapshot()
		env.steps.Add(1)
		modelProgress.Add(1)
		h.readArchives()
		h.checkSafety()
		h.checkGiveBacks()
	}
	stepped := env.realNow()
	h.settle()
	h.t.Logf("history ok: %d steps in %s", n, env.realNow().Sub(began).Round(time.Millisecond))
	if env.soak {
		fmt.Fprintf(os.Stderr, "model %s: history %d ok: %d steps in %s, settled in %s (%s elapsed; %d histories, %d steps, %d faults so far)\n",
			strings.TrimPrefix(env.t.Name(), "TestModelStockPath/"), env.histories.Load(), n, stepped.Sub(began).Round(10*time.Millisecond), env.realNow().Sub(stepped).Round(10*time.Millisecond),
			env.elapsed().Round(time.Second), env.histories.Load(), env.steps.Load(), env.faults.Load())
	}
}

// modelOps are the operations and faults a step draws from, with their
// weights.
var modelOps = []struct {
	name   string
	weight int
}{
	{"buy", 8}, {"pay", 2}, {"pay-fail", 1}, {"cancel", 3}, {"timeout", 1},
	{"pay-message", 2}, {"fail-message", 1}, // a payment centre's results on the queue
	{"rebalance", 2}, {"drain", 1}, {"undrain", 1}, {"stock-add", 1}, {"stock-remove", 2},
	{"pause", 1}, {"resume", 1}, {"end-window", 1}, {"reopen-window", 1}, {"archive", 1},
	{"kill", 1}, {"restart", 1}, {"freeze", 1}, {"thaw", 1}, {"rewind", 3}, {"wipe", 1},
	{"restart-coordinator", 1}, {"cut-link", 1}, {"mend-link", 1}, {"slow-link", 1}, {"wait", 1},
	{"sell-out", 2},
	// A rolling deploy, coordinators away, operators' calls in the middle
	// of a sale, and a coordinator that dies between the steps of a
	// stock change (issue 40).
	{"grow", 1}, {"stop-coordinator", 1}, {"kill-coordinator", 1}, {"start-coordinator", 1},
	{"reconcile", 1}, {"resync-shard", 1}, {"accept-shard", 1}, {"crash-mid-change", 2},
	{"stall-orders", 1}, {"unstall-orders", 1},
	{"db-down", 1}, {"db-up", 1}, // (MariaDB only: modeldb_test.go)
}

// swarm draws which kinds of step this history has (every one but the
// purchase is in or out by a coin): "swarm testing" (Groce et al., ISSTA
// 2012). A history of few kinds repeats each of them often, so the deep
// combinations of a few (a sell-out, a cancel, a purchase again and a crash
// of that shard) turn up far more often than among all the kinds at once,
// and rapid shrinks a failure towards the fewest kinds.
func (h *history) swarm() []string {
	var ops, kinds []string
	for _, op := range modelOps {
		if op.name != "buy" && !rapid.Bool().Draw(h.t, "with "+op.name) {
			continue
		}
		kinds = append(kinds, op.name)
		for range op.weight {
			ops = append(ops, op.name)
		}
	}
	h.logf("the kinds of step in this history: %s", strings.Join(kinds, ", "))
	return ops
}

var faultOps = map[string]bool{"kill": true, "freeze": true, "rewind": true, "wipe": true, "restart-coordinator": true, "cut-link": true, "slow-link": true,
	"stop-coordinator": true, "kill-coordinator": true, "crash-mid-change": true, "stall-orders": true, "db-down": true}

// reset puts the shards back as new between histories: thawed, running,
// reachable, empty.
func (env *modelEnv) reset(t *rapid.T) {
	for i := range modelShards {
		env.redis.Thaw(i)
		if err := env.links[i].mend(); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	for i, c := range env.direct {
		// (A client that failed to dial a killed master goes on answering
		// that error for up to a second, until its own redial: a few tries.)
		for try := 0; ; try++ {
			if c.Ping(context.Background()).Err() != nil {
				env.redis.Restart(i)
			}
			err := c.FlushAll(context.Background()).Err()
			if err == nil {
				break
			}
			if try == 30 {
				t.Fatalf("flush shard %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (h *history) close() {
	for c, m := range h.coords {
		if m != nil {
			m.Close()
			h.coords[c] = nil
		}
	}
	if h.sql != nil {
		h.sql.Close()
	}
	if !h.t.Failed() {
		os.RemoveAll(h.dir) // a failed history's files stay until the test ends
	}
}

// running is coordinator c, or the other one when c is stopped (one at
// most is).
func (h *history) running(c int) int {
	if h.stopped[c] {
		return 1 - c
	}
	return c
}

// coordinators are the coordinators that run.
func (h *history) coordinators() []*Main {
	var out []*Main
	for _, m := range h.coords {
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// stopCoordinator closes coordinator c, as a crash or a deploy's stop
// would leave it (claims it still had to give back are left: leaked).
func (h *history) stopCoordinator(c int) {
	if h.coords[c].set.PendingGiveBacks() > 0 {
		h.leaked = true
	}
	h.coords[c].Close()
	h.coords[c] = nil
}

func (h *history) startCoordinator(c int) *Main {
	// Coordinator 0 runs serve's defaults (purchase steps batched, 3 ms
	// between a busy shard's round trips); coordinator 1 runs one script
	// execution per step, so both ways of sending steps meet the faults.
	cfg := &config.Config{HTTPAddr: "127.0.0.1:0", Shards: h.env.urls[:h.lists[c]], AdminToken: testToken, UserAuth: "header",
		ShardTimeout: 250 * time.Millisecond, LogFormat: "text", LogLevel: 12, // quiet: the steps tell the story
		Start: h.start[c], MQ: "streams", DB: h.coordinatorDB(), PayTimeout: 15 * time.Minute, FailFastAge: h.failFastAge(),
		OrderRate: 100000, PaySecret: h.paySecrets[c][0], PayPrevious: h.paySecrets[c][1],
		SpoolDir: fmt.Sprintf("%s/spool%d", h.dir, c), // (ClaimIdle: serve's 30 s, as in production)
		Test: config.TestKnobs{EmptyTTL: modelEmptyTTL, TransferStep: func(step string) error {
			if at := h.crashAt[c].Load(); at != nil && *at == step {
				return fmt.Errorf("the coordinator died after the step %q", step)
			}
			return nil
		}, BeforeIngest: func(ctx context.Context) {
			for h.stalled[c].Load() && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}}}
	if skew := h.skew[c]; skew != 0 {
		cfg.Test.Clock = func() time.Time { return time.Now().Add(skew) }
		cfg.Test.OrderClock = func() time.Time { return h.clock.now().Add(skew) }
	} else {
		cfg.Test.OrderClock = h.clock.now
	}
	cfg.ArchiveAfter = modelArchiveAfter // (every minute, serve's, in the fast mode; every second in the real mode, which waits in real time)
	if !modelFast() {
		cfg.Test.ArchiveEvery = time.Second
	}
	if c == 0 {
		cfg.Coalesce, cfg.BatchGap = true, 3*time.Millisecond
	}
	dial, listen := realDial, realListen
	if h.env.net != nil {
		dial, listen = h.env.mem.Dial, h.env.net.Listen
	}
	h.nets[c] = newSeverable() // (a new process: killCoordinator)
	cfg.Test.Dial, cfg.Test.Listen = h.nets[c].dial(dial), h.nets[c].listen(listen)
	var logs io.Writer = io.Discard
	if os.Getenv("SHARDSTOCK_MODEL_LOG") != "" { // (a failing history's replay, with what the coordinators said)
		cfg.LogLevel, logs = 0, prefixed{os.Stderr, fmt.Sprintf("coordinator %d: ", c)}
	}
	m := NewMain(cfg, logs)
	if err := m.Run(context.Background()); err != nil {
		h.fail("start coordinator %d: %v", c, err)
	}
	return m
}

func (h *history) logf(format string, args ...any) {
	s := fmt.Sprintf("%2d. ", h.step) + fmt.Sprintf(format, args...)
	h.steps = append(h.steps, s)
	if h.env.soak && os.Getenv("SHARDSTOCK_MODEL_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "%s [%s]\n", s, time.Since(h.began).Round(time.Millisecond))
	}
}

// coin is true with a chance of 1 in 2^k (k coins, all heads); it shrinks
// to false.
func (h *history) coin(k int, label string) bool {
	for range k {
		if !rapid.Bool().Draw(h.t, label) {
			return false
		}
	}
	return true
}

// crowdAll: the crowd buys until sold out.
const crowdAll = 1 << 20

// buyCrowd is the demand of a flash sale, which always exceeds the supply:
// new buyers (each once) buy up to h.crowd units of every product after a
// step, so a unit released by a cancel or a timeout is bought again at
// once, as it is late in a real sale. The buyers are attempts like any
// other: every invariant holds for them.
func (h *history) buyCrowd() { h.burst(h.crowd) }

// burst has new buyers buy up to n units of every product.
func (h *history) burst(n int) {
	for _, p := range h.products {
		for range min(n, h.crowdCap) {
			h.fresh++
			n := len(h.attempts)
			h.buy(h.running(h.fresh%2), fmt.Sprintf("c%d", h.fresh), p)
			if a := h.attempts[n]; a.status != 200 {
				break // sold out, or not selling now: the crowd waits for the next step
			}
		}
	}
}

// fail stops the history with a violation, printing the steps that led to it.
func (h *history) fail(format string, args ...any) {
	h.env.failed.Store(true)
	h.t.Fatalf("%s\n\nthe history (step. what was done: what it answered):\n%s", fmt.Sprintf(format, args...), strings.Join(h.steps, "\n"))
}

type modelReply struct {
	status int
	body   map[string]any
	raw    string
	err    error
}

func (r modelReply) str(k string) string { s, _ := r.body[k].(string); return s }

var modelClient = &http.Client{Timeout: 5 * time.Second}

func (h *history) call(c int, method, path, body string, headers ...string) modelReply {
	r := h.env.send(h.coords[c].URL(), method, path, body, headers...)
	h.no500(c, method+" "+path, r)
	return r
}

// no500: a failure has its own answer (API.md); a 500 is a bug (a panic,
// an error nobody mapped). (A coordinator that "dies" mid-change answers
// what nobody hears.)
func (h *history) no500(c int, what string, r modelReply) {
	if r.status == http.StatusInternalServerError && h.crashAt[c].Load() == nil {
		h.fail("%s via coordinator %d: %d %s", what, c, r.status, r.raw)
	}
}

// send sends one request to the coordinator at url and reads its answer
// (any goroutine may: it checks nothing).
func (env *modelEnv) send(url, method, path, body string, headers ...string) modelReply {
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		return modelReply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := env.client.Do(req)
	if err != nil {
		return modelReply{err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := modelReply{status: resp.StatusCode, raw: strings.TrimSpace(string(raw))}
	json.Unmarshal(raw, &r.body)
	return r
}

// define puts a product on sale through coordinator c as an operator
// would: a 503 says retry later (a shard slower than the shard timeout
// once, on a loaded machine), and the definition is a PUT, so it is sent
// again, a few times, before the history fails.
func (h *history) define(c int, id, body string) modelReply {
	for try := 1; ; try++ {
		rep := h.admin(c, "PUT", "/admin/v1/products/"+id, body)
		if rep.status != 503 || try == 10 {
			return rep
		}
		h.logf("define %s: %s, sent again", id, rep.short())
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *history) admin(c int, method, path, body string) modelReply {
	return h.call(c, method, path, body, "Authorization", "Bearer "+testToken)
}

func (r modelReply) short() string {
	if r.err != nil {
		return "no answer (" + r.err.Error() + ")"
	}
	code := r.str("error")
	if code == "" {
		code = r.str("status")
	}
	return fmt.Sprintf("%d %s", r.status, code)
}

func (h *history) product(label string) *mproduct {
	return h.products[rapid.IntRange(0, len(h.products)-1).Draw(h.t, label)]
}

func (h *history) shardArg() int { return rapid.IntRange(0, modelShards-1).Draw(h.t, "shard") }

func (h *history) coordArg() int { return h.running(rapid.IntRange(0, 1).Draw(h.t, "coordinator")) }

// orderArg picks one of the orders buyers were told about that is not
// final yet (none: false).
func (h *history) orderArg(draw bool) (*attempt, bool) {
	var orders []*attempt
	for _, a := range h.attempts {
		if a.order == "" {
			continue
		}
		if o, err := h.store().Orders.Order(context.Background(), a.order); err == nil && (o == nil || o.Status == shardstock.StatusAwaitingPayment) {
			orders = append(orders, a)
		}
	}
	if len(orders) == 0 {
		return nil, false
	}
	if !draw {
		return nil, true
	}
	return orders[rapid.IntRange(0, len(orders)-1).Draw(h.t, "order")], true
}

// applicable reports whether op can do anything in the history's state
// (a thaw with nothing frozen, a payment with no order, is a step wasted).
func (h *history) applicable(op string) bool {
	some := func(f func(i int) bool) bool {
		for i := range modelShards {
			if f(i) {
				return true
			}
		}
		return false
	}
	switch op {
	case "pay", "pay-fail", "cancel", "pay-message", "fail-message":
		_, ok := h.orderArg(false)
		return ok
	case "timeout": // (the real mode's order clock runs 16 minutes ahead after one: failFastAge)
		return modelFast() || h.clock.ahead() == 0
	case "restart":
		return some(func(i int) bool { return h.killed[i] })
	case "kill", "wipe":
		return some(func(i int) bool { return !h.killed[i] })
	case "freeze":
		return some(func(i int) bool { return !h.killed[i] && !h.frozen[i] })
	case "thaw":
		return some(func(i int) bool { return h.frozen[i] })
	case "cut-link":
		return some(func(i int) bool { return !h.cut[i] })
	case "slow-link":
		return some(func(i int) bool { return !h.slow[i] })
	case "mend-link":
		return some(func(i int) bool { return h.cut[i] || h.slow[i] })
	case "rewind": // a crash that loses nothing is a restart
		return h.canCrash(h.step - 1)
	case "resume":
		return h.any(func(p *mproduct) bool { return p.paused })
	case "grow": // (a coordinator cannot start without its database)
		return h.lists[1] < modelShards && !h.stopped[1] && !h.dbAway
	case "stop-coordinator", "kill-coordinator":
		return !h.stopped[0] && !h.stopped[1]
	case "start-coordinator":
		return (h.stopped[0] || h.stopped[1]) && !h.dbAway
	case "restart-coordinator", "crash-mid-change":
		return !h.dbAway
	case "db-down":
		return h.dbNet != nil && !h.dbAway
	case "db-up":
		return h.dbAway
	case "stall-orders":
		return !h.stalled[0].Load() || !h.stalled[1].Load()
	case "unstall-orders":
		return h.stalled[0].Load() || h.stalled[1].Load()
	case "reopen-window":
		return h.any(func(p *mproduct) bool { return p.ended })
	case "end-window", "pause": // one at a time: most steps stay purchases that can sell
		return !h.any(func(p *mproduct) bool { return p.ended || p.paused })
	}
	return true
}

// readControls sets the model's ended of p from the catalog (by its exact
// id): what a window change recorded, whatever it answered (a 503 may say
// the window is recorded and not yet on every shard).
func (h *history) readControls(p *mproduct) {
	cs, err := h.sql.Controls.ProductControls(context.Background())
	if err != nil {
		h.fail("read the controls: %v", err)
	}
	c := cs[p.id]
	p.ended = c.WindowSet && !c.EndsAt.IsZero() && !time.Now().Before(c.EndsAt)
	p.archiveDue = p.ended && time.Now().After(c.EndsAt.Add(modelArchiveAfter))
}

// modelArchiveAfter is the coordinators' ARCHIVE_AFTER: serve's default.
const modelArchiveAfter = 24 * time.Hour

// readArchives marks the products the automatic archive took (or began:
// the catalog takes a product as archived from the archive's start).
func (h *history) readArchives() {
	cs, err := h.sql.Controls.ProductControls(context.Background())
	if err != nil {
		h.fail("read the controls: %v", err)
	}
	for _, p := range h.products {
		if !p.archived && cs[p.id].Archive != shardstock.ArchiveNone {
			p.archived = true
			h.logf("the automatic archive took %s", p.id)
		}
	}
}

// any reports whether f holds for some product.
func (h *history) any(f func(p *mproduct) bool) bool {
	for _, p := range h.products {
		if f(p) {
			return true
		}
	}
	return false
}

// productWhere picks one of the products f holds for.
func (h *history) productWhere(f func(p *mproduct) bool) *mproduct {
	var in []*mproduct
	for _, p := range h.products {
		if f(p) {
			in = append(in, p)
		}
	}
	return rapid.SampledFrom(in).Draw(h.t, "product")
}

// shardWhere picks one of the shards f holds for.
func (h *history) shardWhere(f func(i int) bool) int {
	var in []int
	for i := range modelShards {
		if f(i) {
			in = append(in, i)
		}
	}
	return rapid.SampledFrom(in).Draw(h.t, "shard")
}

func (h *history) do(op string) {
	if faultOps[op] {
		h.env.faults.Add(1)
	}
	h.env.did(op, 1)
	switch op {
	case "buy":
		h.buy(h.coordArg(), rapid.SampledFrom(h.users).Draw(h.t, "user"), h.product("product"))
	case "pay", "pay-fail", "cancel":
		a, ok := h.orderArg(true)
		if !ok {
			h.logf("%s: no order yet", op)
			return
		}
		c := h.coordArg()
		var rep modelReply
		switch op {
		case "pay", "pay-fail":
			body := h.paymentResult(a.order, op == "pay")
			rep = h.call(c, "POST", "/api/v1/orders/"+a.order+"/pay", string(body),
				"X-User-ID", a.user, "X-Signature", order.SignPayment(h.centreSecret, body))
		default:
			rep = h.call(c, "POST", "/api/v1/orders/"+a.order+"/cancel", "", "X-User-ID", a.user)
		}
		h.logf("%s %s's order %s (step %d) via coordinator %d: %s", op, a.user, a.order, a.step, c, rep.short())
	case "pay-message", "fail-message":
		h.payMessage(op == "pay-message")
	case "timeout":
		// A shard may die as the timeout passes: the orders' claims whose
		// units were on the others go back to every home but that one,
		// hundreds of them in a large sale (the give-back sweep's pages).
		if h.coin(1, "a shard dies as the timeout passes") {
			i := h.shardArg()
			if !h.killed[i] {
				h.env.faults.Add(1)
				h.env.did("kill-at-timeout", 1)
				h.env.redis.Kill(i)
				h.killed[i], h.frozen[i] = true, false
			}
			h.logf("kill shard %d (SIGKILL) as the payment timeout passes", i)
		}
		if modelFast() {
			// Sixteen minutes pass for everyone, shards and coordinators
			// alike, on the fake clock: the serve defaults' payment timeout
			// and fail-fast age, which a reservation its writer has not
			// written by then may pass (allowed: failFastMay).
			h.mayFailFast(16 * time.Minute)
			h.pass(16 * time.Minute)
			h.logf("16 minutes pass: the payment timeout passes for every order awaiting payment")
			return
		}
		h.clock.advance(16 * time.Minute)
		time.Sleep(400 * time.Millisecond) // a sweep or two
		h.logf("the payment timeout passes for every order awaiting payment")
	case "rebalance":
		p := h.product("product")
		rep := h.admin(h.coordArg(), "POST", "/admin/v1/products/"+p.id+"/rebalance", "")
		h.logf("rebalance %s: %s", p.id, rep.short())
	case "drain", "undrain":
		i := h.shardArg()
		rep := h.admin(h.coordArg(), "POST", fmt.Sprintf("/admin/v1/shards/%d/drain", i), fmt.Sprintf(`{"drained":%v}`, op == "drain"))
		h.logf("%s shard %d: %s", op, i, rep.short())
	case "stock-add", "stock-remove":
		p := h.product("product")
		n := rapid.IntRange(1, 3).Draw(h.t, "units")
		field := map[string]string{"stock-add": "add", "stock-remove": "remove"}[op]
		// An Idempotency-Key, sometimes one sent before: a repeat changes
		// nothing more, the key with another request is refused.
		key := rapid.SampledFrom([]string{"", "", "k1", "k2"}).Draw(h.t, "idempotency key")
		rep := h.call(h.coordArg(), "POST", "/admin/v1/products/"+p.id+"/stock", fmt.Sprintf(`{"%s":%d}`, field, n),
			"Authorization", "Bearer "+testToken, "Idempotency-Key", key)
		h.logf("%s %d units of %s (key %q): %s (stock now %v)", field, n, p.id, key, rep.short(), rep.body["stock"])
	case "pause", "resume":
		p := h.product("product")
		if op == "resume" {
			p = h.productWhere(func(p *mproduct) bool { return p.paused })
		}
		rep := h.admin(h.coordArg(), "POST", "/admin/v1/products/"+p.id+"/"+op, "")
		h.logf("%s %s: %s", op, p.id, rep.short())
		if rep.status == 200 { // (what the operator was told is what the model expects)
			p.paused = op == "pause"
		}
		h.controlsEverywhere()
	case "end-window", "reopen-window":
		p := h.product("product")
		if op == "reopen-window" {
			p = h.productWhere(func(p *mproduct) bool { return p.ended })
		}
		at := time.Now().Add(-time.Second)
		if op == "reopen-window" {
			at = time.Now().Add(time.Hour)
		} else if rapid.Bool().Draw(h.t, "ended a day ago") {
			at = time.Now().Add(-modelArchiveAfter - time.Hour) // the automatic archive is due
		}
		rep := h.admin(h.coordArg(), "PATCH", "/admin/v1/products/"+p.id, fmt.Sprintf(`{"ends_at":%q}`, at.UTC().Format(time.RFC3339)))
		h.logf("%s of %s: %s", op, p.id, rep.short())
		h.controlsEverywhere()
		h.readControls(p) // (a 503 may say the window is recorded and not yet on every shard)
	case "archive":
		p := h.product("product")
		rep := h.admin(h.coordArg(), "POST", "/admin/v1/products/"+p.id+"/archive", "")
		if rep.status == 200 {
			p.archived = true
		}
		h.logf("archive %s: %s %s", p.id, rep.short(), firstLine(rep.str("message")))
	case "kill":
		i := h.shardArg()
		if !h.killed[i] {
			h.env.redis.Kill(i)
			h.killed[i], h.frozen[i] = true, false
		}
		h.logf("kill shard %d (SIGKILL)", i)
	case "restart":
		i := h.shardWhere(func(i int) bool { return h.killed[i] })
		if h.killed[i] {
			h.env.redis.Restart(i)
			h.killed[i] = false
		}
		h.logf("restart shard %d from its AOF", i)
	case "freeze":
		i := h.shardArg()
		if !h.killed[i] {
			h.env.redis.Freeze(i)
			h.frozen[i] = true
		}
		h.logf("freeze shard %d (SIGSTOP)", i)
	case "thaw":
		i := h.shardWhere(func(i int) bool { return h.frozen[i] })
		h.env.redis.Thaw(i)
		h.frozen[i] = false
		h.logf("thaw shard %d", i)
	case "rewind":
		h.crash(h.step - 1)
	case "wipe":
		i := h.shardArg()
		h.markLost(i, 0)
		h.payMessagesLost(i, 0)
		h.losses[i] = append(h.losses[i], len(h.attempts))
		h.env.redis.Thaw(i)
		h.env.redis.Wipe(i)
		h.killed[i], h.frozen[i], h.wiped[i] = false, false, true
		h.dropSnaps(i, -1)
		h.logf("wipe shard %d (back without its data)", i)
	case "restart-coordinator":
		c := h.coordArg()
		h.stopCoordinator(c)
		h.coords[c] = h.startCoordinator(c)
		h.logf("restart coordinator %d", c)
	case "grow":
		h.stopCoordinator(1)
		h.lists[1] = modelShards
		h.coords[1] = h.startCoordinator(1)
		h.logf("grow: coordinator 1 restarts on every shard (the rolling grow's second half)")
	case "stop-coordinator":
		c := rapid.IntRange(0, 1).Draw(h.t, "coordinator")
		h.stopCoordinator(c)
		h.stopped[c] = true
		h.logf("stop coordinator %d (away until it is started)", c)
	case "kill-coordinator":
		h.killCoordinator()
	case "db-down":
		h.dbDown()
	case "db-up":
		h.dbUp()
	case "start-coordinator":
		c := 0
		if h.stopped[1] {
			c = 1
		}
		h.coords[c] = h.startCoordinator(c)
		h.stopped[c] = false
		h.logf("start coordinator %d", c)
	case "stall-orders", "unstall-orders":
		c := rapid.IntRange(0, 1).Draw(h.t, "coordinator")
		h.stalled[c].Store(op == "stall-orders")
		h.logf("%s: coordinator %d's order writer %s", op, c, map[bool]string{true: "waits (a slow database), the reservations it read in hand", false: "goes on"}[op == "stall-orders"])
	case "reconcile":
		p := h.product("product")
		rep := h.admin(h.coordArg(), "POST", "/admin/v1/products/"+p.id+"/reconcile", "")
		h.logf("an operator's reconcile (fix) of %s: %s", p.id, rep.short())
	case "resync-shard", "accept-shard":
		i := h.shardArg()
		body := map[string]string{"resync-shard": "", "accept-shard": `{"accept":true}`}[op]
		c := h.coordArg()
		rep := h.admin(c, "POST", fmt.Sprintf("/admin/v1/shards/%d/resync", i), body)
		h.logf("an operator's %s of shard %d via coordinator %d: %s %s", op, i, c, rep.short(), firstLine(rep.str("message")))
	case "crash-mid-change":
		c := h.coordArg()
		step := rapid.SampledFrom([]string{"recorded", "out", "marked", "in"}).Draw(h.t, "dies after")
		change := rapid.SampledFrom([]string{"add", "remove", "rebalance"}).Draw(h.t, "change")
		p := h.product("product")
		h.crashAt[c].Store(&step)
		var rep modelReply
		if change == "rebalance" {
			rep = h.admin(c, "POST", "/admin/v1/products/"+p.id+"/rebalance", "")
		} else {
			rep = h.admin(c, "POST", "/admin/v1/products/"+p.id+"/stock", fmt.Sprintf(`{"%s":%d}`, change, rapid.IntRange(1, 3).Draw(h.t, "units")))
		}
		h.crashAt[c].Store(nil)
		h.stopCoordinator(c) // what it had in memory dies with it
		h.coords[c] = h.startCoordinator(c)
		h.logf("coordinator %d dies after the step %q of a %s of %s (%s), and is restarted", c, step, change, p.id, rep.short())
	case "cut-link":
		i := h.shardWhere(func(i int) bool { return !h.cut[i] })
		h.env.links[i].cut()
		h.cut[i] = true
		// A coordinator may skip a shard that answered sold out within
		// EmptyTTL (the sold-out fast path): a 410 then rests on that
		// answer, though a release landed since. Past EmptyTTL, it probes
		// the shard, finds the link cut, and may no longer say sold out:
		// what checkSoldOutIsTrue holds it to.
		time.Sleep(modelEmptyTTL + 50*time.Millisecond)
		h.logf("cut the link to shard %d", i)
	case "mend-link":
		i := h.shardWhere(func(i int) bool { return h.cut[i] || h.slow[i] })
		h.mend(i)
		h.logf("mend the link to shard %d", i)
	case "slow-link":
		i := h.shardArg()
		if !h.slow[i] {
			if err := h.env.links[i].slow(modelSlowLatency); err != nil {
				h.fail("slow link: %v", err)
			}
			h.slow[i] = true
		}
		h.logf("slow link to shard %d (%s each way down)", i, modelSlowLatency)
	case "wait":
		// Time passes with the faults as they stand: the sweeps, the
		// breakers' probes and the claims of entries left pending go on.
		// The fast mode also waits 20 s (its fake clock), longer than a
		// give-back may take once its home answers (giveBackWithin).
		d := 300 * time.Millisecond
		if modelFast() {
			d = rapid.SampledFrom([]time.Duration{d, 20 * time.Second}).Draw(h.t, "wait")
		}
		h.pass(d)
		h.logf("wait %s", d)
	case "sell-out": // a burst of demand: the state a released unit is sold from again
		h.logf("a burst of new buyers buys every salable unit")
		h.burst(crowdAll)
	default:
		h.fail("unknown op %s", op)
	}
}

// pass lets d pass. The claim give-backs are also looked at 20 s before
// its end, so that one held up for longer than giveBackWithin inside a
// long step (the payment timeout's 16 minutes: orders cancelled at its
// 15th minute) is seen at the step's end, not only a step later.
func (h *history) pass(d time.Duration) {
	const look = 20 * time.Second
	if d > 2*look {
		time.Sleep(d - look)
		h.checkGiveBacks()
		d = look
	}
	time.Sleep(d)
}

// controlsEverywhere has both coordinators read the operators' controls
// now, as each does on its own every half second: the history goes on in a
// known state without waiting for that.
func (h *history) controlsEverywhere() {
	if h.dbAway {
		return // (nothing was recorded, and each coordinator keeps what it read)
	}
	for c, m := range h.coords {
		if m == nil {
			continue
		}
		if err := m.inv.catalog.RefreshControls(context.Background()); err != nil {
			h.fail("coordinator %d reads the controls: %v", c, err)
		}
	}
}

// crashPoint is a point a machine crash can put a shard back to.
type crashPoint struct {
	shard, at int      // the shard, and the step after which its AOF was saved
	lost      int64    // the bytes of its AOF written since
	kinds     []string // the kinds of write it loses (shardSig.lost)
}

// crashPoints are, for each shard that wrote something since, the latest
// point at or before step last-back (back 1: the writes of step last are
// lost).
func (h *history) crashPoints(last, back int) []crashPoint {
	var out []crashPoint
	for j := range modelShards {
		t := -1
		for st := range h.snaps[j] {
			if st <= last-back && st > t {
				t = st
			}
		}
		if t < 0 {
			continue
		}
		if grew := h.aofSize(j) - h.snaps[j][t]; grew > 0 {
			out = append(out, crashPoint{j, t, grew, h.sigs[j][t].lost(h.sig(j))})
		}
	}
	return out
}

// canCrash reports whether a crash now (the writes up to step last done)
// would lose anything.
func (h *history) canCrash(last int) bool {
	for back := 1; back <= keptSnaps; back++ {
		if len(h.crashPoints(last, back)) > 0 {
			return true
		}
	}
	return false
}

// crash is a machine crash: a shard comes back from its AOF as it was a few
// steps ago (appendfsync everysec loses the last second of writes; a step
// here stands for well under one). It draws how far back, going further
// when nothing was written since, and which of the shards that lose
// something; or, steered (a coin), the point that loses the most kinds of
// write (purchases, settlements, stock moves): every break of a restarted
// shard found so far lost a settlement and something after it (a purchase
// of the released unit, a transfer or removal of it), and a uniform draw
// meets that combination too rarely.
func (h *history) crash(last int) {
	back := rapid.IntRange(1, keptSnaps).Draw(h.t, "steps back")
	points := h.crashPoints(last, back)
	for b := back + 1; len(points) == 0 && b <= keptSnaps; b++ {
		points = h.crashPoints(last, b) // nothing written since: a crash further back
	}
	if len(points) == 0 {
		h.logf("machine crash: no shard wrote anything since a point it can go back to, skipped")
		return
	}
	if rapid.Bool().Draw(h.t, "steered crash") {
		points = h.mostLost(last)
	}
	c := rapid.SampledFrom(points).Draw(h.t, "crashed shard")
	i, at := c.shard, c.at
	h.markLost(i, at+1)
	h.payMessagesLost(i, at+1)
	h.losses[i] = append(h.losses[i], len(h.attempts))
	h.env.redis.Thaw(i)
	h.env.redis.RewindTo(i, fmt.Sprintf("s%d", at))
	for st := range h.snaps[i] {
		if st > at { // a future this shard no longer has
			h.env.redis.DropCheckpoint(i, fmt.Sprintf("s%d", st))
			delete(h.snaps[i], st)
		}
	}
	h.killed[i], h.frozen[i] = false, false
	h.logf("machine crash of shard %d: back from its AOF as it was after step %d (%d bytes of it lost: %s)", i, at, c.lost, strings.Join(c.kinds, ", "))
}

// mostLost are the points a crash now can go back to that lose the most
// kinds of write.
func (h *history) mostLost(last int) []crashPoint {
	var best []crashPoint
	for back := 1; back <= keptSnaps; back++ {
		for _, c := range h.crashPoints(last, back) {
			switch {
			case len(best) > 0 && len(c.kinds) < len(best[0].kinds):
			case len(best) > 0 && len(c.kinds) > len(best[0].kinds):
				best = []crashPoint{c}
			case !slices.ContainsFunc(best, func(b crashPoint) bool { return b.shard == c.shard && b.at == c.at }):
				best = append(best, c)
			}
		}
	}
	return best
}

// shardSig is what a shard has done, from its own counts: the settlements
// and reservations ever added to its streams, and its allocation of each
// product.
type shardSig struct {
	settlements, reservations int64
	alloc                     string
}

// lost names the kinds of write done between s and later.
func (s shardSig) lost(later shardSig) []string {
	var kinds []string
	if later.reservations > s.reservations {
		kinds = append(kinds, "purchases")
	}
	if later.settlements > s.settlements {
		kinds = append(kinds, "settlements")
	}
	if later.alloc != s.alloc {
		kinds = append(kinds, "stock moves")
	}
	return kinds
}

// sig reads shard i's shardSig (the zero one when it cannot answer).
func (h *history) sig(i int) shardSig {
	var s shardSig
	if h.killed[i] || h.frozen[i] {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	added := func(stream string) int64 {
		st, err := h.env.direct[i].XInfoStream(ctx, stream).Result()
		if err != nil {
			return 0
		}
		return st.EntriesAdded
	}
	s.settlements = added(shard.SettleKey)
	for _, p := range h.products {
		s.reservations += added(shard.OutboxKey(p.id))
		c, _ := h.counters(i, p.id)
		s.alloc += fmt.Sprintf("%d ", c[3])
	}
	return s
}

// modelEmptyTTL is the coordinators' EmptyTTL in the model test: serve's
// (shard.Config's default), as in production.
const modelEmptyTTL = time.Second

// keptSnaps is how many steps back a machine crash can go.
const keptSnaps = 4

// snapshot saves the AOF of every shard that runs as it is after this step,
// as a point a later machine crash can go back to, and drops the points
// older than keptSnaps steps.
func (h *history) snapshot() {
	for i := range modelShards {
		if !h.killed[i] && !h.frozen[i] {
			h.env.redis.CheckpointAs(i, fmt.Sprintf("s%d", h.step))
			h.snaps[i][h.step] = h.aofSize(i)
			h.sigs[i][h.step] = h.sig(i)
		}
		h.dropSnaps(i, h.step-keptSnaps)
	}
}

// dropSnaps drops shard i's points of steps before step (-1: all).
func (h *history) dropSnaps(i, before int) {
	for st := range h.snaps[i] {
		if before < 0 || st < before {
			h.env.redis.DropCheckpoint(i, fmt.Sprintf("s%d", st))
			delete(h.snaps[i], st)
		}
	}
}

func firstLine(s string) string {
	if len(s) > 90 {
		return s[:90] + "…"
	}
	return s
}

func (h *history) mend(i int) {
	if h.cut[i] || h.slow[i] {
		if err := h.env.links[i].mend(); err != nil {
			h.fail("mend link %d: %v", i, err)
		}
		if h.slow[i] {
			// What was sent before the mend still comes late (as through
			// Toxiproxy's latency): its calls time out after the mend and
			// may open a breaker again. Let it through first, so what
			// follows (at rest: every breaker closed, new buyers served)
			// meets the mended link.
			time.Sleep(2*modelSlowLatency + 250*time.Millisecond)
		}
		h.cut[i], h.slow[i] = false, false
	}
}

// modelSlowLatency is a slow link's latency, each way.
const modelSlowLatency = 400 * time.Millisecond

func (h *history) buy(c int, user string, p *mproduct) {
	at := time.Now()
	rep := h.purchase(c, user, p, false)
	a := h.answered(c, user, p, at, rep)
	if rep.status == 410 {
		h.checkSoldOutIsTrue(p)
	}
	if rep.status == 409 && a.code == "limit_reached" {
		h.checkLimitIsTrue(user, p)
	}
	h.checkControlsObeyed(p, rep)
}

// answered records user's purchase of p via coordinator c, sent at at,
// and what it answered.
func (h *history) answered(c int, user string, p *mproduct, at time.Time, rep modelReply) *attempt {
	a := &attempt{step: h.step, seq: len(h.attempts), user: user, product: p.id, shard: -1, at: at}
	switch {
	case rep.err != nil:
		a.unknown = true
	case rep.status == 200:
		a.order = rep.str("order_id")
		if s, ok := rep.body["shard"].(float64); ok {
			a.shard = int(s)
		}
	case rep.status == 202:
		a.ticket = rep.str("ticket")
	default:
		a.code = rep.str("error")
	}
	a.status = rep.status
	h.attempts = append(h.attempts, a)
	where := ""
	if a.order != "" {
		where = fmt.Sprintf(" order %s on shard %d", a.order, a.shard)
	}
	h.logf("%s buys %s via coordinator %d: %s%s", user, p.id, c, rep.short(), where)
	return a
}

// checkControlsObeyed: every coordinator has read the operators' controls
// (controlsEverywhere), so a purchase obeys exactly its own product's: a
// paused, ended or archived sale sells nothing and queues nothing, and an
// open one is never answered paused or ended (MariaDB compares ids
// exactly: pausing Sku leaves sku selling).
func (h *history) checkControlsObeyed(p *mproduct, rep modelReply) {
	closed := p.paused || p.ended || p.archived
	code := rep.str("error")
	switch {
	case closed && (rep.status == 200 || rep.status == 202):
		h.fail("the operators' controls: %s (paused %v, ended %v, archived %v) answered a purchase %s", p.id, p.paused, p.ended, p.archived, rep.short())
	case rep.status == 403 && code == "paused" && !p.paused:
		h.fail("truthful answers: %s is not paused and a purchase was answered paused", p.id)
	case rep.status == 403 && code == "ended" && !p.ended && !p.archived:
		h.fail("truthful answers: %s's window is open and it is not archived, and a purchase was answered ended", p.id)
	}
}

// holdsOf says what each shard holds under reservation id, and its outbox.
func (h *history) holdsOf(product, id string) string {
	var b strings.Builder
	ctx := context.Background()
	for i, c := range h.env.direct {
		v, _ := c.HGet(ctx, "ss:{p:"+product+"}:holds", id).Result()
		n, _ := c.XLen(ctx, "ss:{p:"+product+"}:outbox").Result()
		xs, _ := c.XRange(ctx, "ss:{p:"+product+"}:outbox", "-", "+").Result()
		found := false
		for _, x := range xs {
			for _, f := range x.Values {
				if s, ok := f.(string); ok && strings.Contains(s, id) {
					found = true
				}
			}
		}
		fmt.Fprintf(&b, "shard %d: hold %q, outbox %d entries (this one: %v); ", i, v, n, found)
	}
	return b.String()
}

// ticketLost reports whether ticket a, reserved, may have lost its
// reservation to its shard losing writes after the ticket was taken (its
// replay ran at some time the test does not know) and has no order row, or
// one written failed (the resync found its hold gone and no unit to put it
// back on): a lost sale the crash or wipe explains. It marks it so.
func (h *history) ticketLost(a *attempt) bool {
	for _, m := range h.coordinators() {
		if _, r, ok := m.spool.Ticket(a.ticket); ok && r.Status == "reserved" {
			for _, made := range h.losses[r.Shard] {
				if made > a.seq { // (the loss came after the purchase, in its step or later)
					if o, err := h.store().Orders.Order(context.Background(), a.resolvedOrders); err == nil && (o == nil || o.Status == shardstock.StatusFailed) {
						a.lostByRewind = true
						return true
					}
				}
			}
		}
	}
	return false
}

// markLost marks the purchases answered on shard i since step (0: ever)
// whose orders are not written yet: a crash that takes the shard's last
// writes takes their holds and outbox entries with them (the lost second of
// appendfsync everysec); the test allows them to be lost.
//
// It also marks the buyers whose claims it may take: a purchase answered
// since on any shard, whose order is not written yet, with its claim on
// shard i, the buyer's home. Their orders may still come (a writer that
// read them before the crash), and the home, its claim gone, may have
// answered the buyer 200 past the limit meanwhile: one of those 200s is
// then the sale the crash lost, written failed (Resync.Admit).
func (h *history) markLost(i, since int) {
	for _, a := range h.attempts {
		if a.order == "" || a.step < since {
			continue
		}
		o, err := h.store().Orders.Order(context.Background(), a.order)
		if err != nil {
			h.fail("order %s: %v", a.order, err)
		}
		if o != nil {
			continue
		}
		if a.shard == i {
			a.lostByRewind = true
		}
		if h.homeOf(a.product, a.user) == i {
			if h.claimsLost == nil {
				h.claimsLost = map[[2]string]bool{}
			}
			h.claimsLost[[2]string{a.product, a.user}] = true
		}
	}
}

// failFastAge is the coordinators' fail-fast age: serve's in the fast mode,
// where the payment timeout is waited out on the fake clock; in the real
// mode, where it moves the order clock ahead by 16 minutes instead, past
// any reservation's age (each would fail fast after two timeouts).
// failFastAge is serve's in both modes. The real mode's payment timeout
// moves only the order clock, 16 minutes ahead of the shards' and the
// sale's, so every reservation after it is 16 minutes old to the order
// service: a second one would make them 32, past the age, and so a
// history of the real mode has one payment timeout at most.
func (h *history) failFastAge() time.Duration { return 30 * time.Minute }

// mayFailFast marks the purchases answered (200, or a ticket) whose order
// is not written yet and that will be older than the fail-fast age once d
// has passed: their order may be written failed (a sale lost to a writer
// that could not write it in time, order.Service.firstStatus).
func (h *history) mayFailFast(d time.Duration) {
	for _, a := range h.attempts {
		if a.failFastMay || time.Since(a.at)+d <= h.failFastAge() {
			continue
		}
		id := a.order
		if a.code == "reserved" {
			id = a.resolvedOrders
		}
		if id == "" && a.ticket == "" {
			continue
		}
		if id != "" {
			if o, err := h.store().Orders.Order(context.Background(), id); err != nil || o != nil {
				continue // written: its status was decided then
			}
		}
		a.failFastMay = true
	}
}

// homeOf is the shard of user's claims for product (-1: no coordinator
// can tell now).
func (h *history) homeOf(product, user string) int {
	for _, m := range h.coordinators() {
		p, err := m.inv.catalog.Product(context.Background(), product)
		if err != nil || p.Moved != "" {
			continue
		}
		if i, err := m.set.Purchases.HomeOf(p, user); err == nil {
			return i
		}
	}
	return -1
}

// pastLimit: user was answered more purchases of p than its limit (a
// home that lost their claims let them through).
func (h *history) pastLimit(p *mproduct, user string) bool {
	n := 0
	for _, a := range h.attempts {
		if a.product == p.id && a.user == user && (a.order != "" || a.code == "reserved") {
			n++
		}
	}
	return int64(n) > p.limit
}

func (h *history) store() *sqlstore.Store { return h.sql }

// aofSize is shard i's AOF size in bytes (-1: it cannot answer).
func (h *history) aofSize(i int) int64 {
	if h.killed[i] || h.frozen[i] {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := h.env.direct[i].Info(ctx, "persistence").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_current_size:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// counters reads product's counters on shard i straight from the master
// (not through the coordinators); ok is false when it cannot answer or does
// not hold the product.
func (h *history) counters(i int, product string) (c [4]int64, ok bool) {
	if h.killed[i] || h.frozen[i] {
		return c, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := h.env.direct[i].HMGet(ctx, "ss:{p:"+product+"}:stock", "salable", "locked", "sold", "alloc").Result()
	if err != nil || v[0] == nil {
		return c, false
	}
	for k, x := range v {
		n, err := strconv.ParseInt(fmt.Sprint(x), 10, 64)
		if err != nil {
			h.fail("shard %d %s: field %d = %v", i, product, k, x)
		}
		c[k] = n
	}
	return c, true
}

// resynced reports whether shard i runs as it was last resynced. A shard
// back from a crash or a wipe has a new run id, which every connection to
// it meets first and every coordinator fences until the resync has put it
// back in line with SQL and recorded the run: until then its counters are
// what the AOF kept (a release or a removal it lost still counted), and
// nothing is sold from them. A hurried history checks right after a crash,
// before the resync; the lost settlements and moves are the resync's to
// replay, and settle checks that they were.
func (h *history) resynced(i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := h.env.direct[i].Info(ctx, "server").Result()
	if err != nil {
		return false
	}
	synced, err := h.sql.ShardLog.SyncedRunID(ctx, i)
	if err != nil {
		h.fail("the run id shard %d was resynced at: %v", i, err)
	}
	return runIDOf(info) == synced
}

// currentStock is p's stock as defined plus the finished stock changes.
func (h *history) currentStock(p *mproduct) int64 {
	added, removed, err := h.sql.Transfers.StockChanges(context.Background(), p.id)
	if err != nil {
		h.fail("stock changes of %s: %v", p.id, err)
	}
	return p.stock + added - removed
}

// stockBound is the most p's stock can be now: currentStock and the units
// of additions under way (recorded, perhaps on their shard already: they
// finish by themselves, and count as made when their shard lost the
// product). Removals under way still count: their units are off sale,
// which errs the safe way.
func (h *history) stockBound(p *mproduct) int64 {
	open, err := h.sql.Transfers.UnfinishedTransfers(context.Background())
	if err != nil {
		h.fail("unfinished transfers: %v", err)
	}
	n := h.currentStock(p)
	for _, t := range open {
		if t.ProductID == p.id && t.From == -1 {
			n += t.Wanted
		}
	}
	return n
}

// checkSafety checks what must hold at every moment: no oversell,
// conservation on every shard that answers, the per-user limit in SQL.
func (h *history) checkSafety() {
	ctx := context.Background()
	for _, p := range h.products {
		stock := h.stockBound(p)
		if !p.archived {
			var held int64
			for i := range modelShards {
				c, ok := h.counters(i, p.id)
				if !ok {
					continue
				}
				if c[0] < 0 || c[1] < 0 || c[2] < 0 || c[0]+c[1]+c[2] != c[3] {
					h.fail("conservation broken on shard %d for %s: salable %d + locked %d + sold %d != alloc %d", i, p.id, c[0], c[1], c[2], c[3])
				}
				if h.resynced(i) {
					held += c[1] + c[2]
				}
			}
			if held > stock {
				h.fail("oversell: %s has %d units locked or sold on the shards that answer, stock %d", p.id, held, stock)
			}
		}
		counts, err := h.sql.Orders.CountByStatus(ctx, p.id)
		if err != nil {
			h.fail("count orders: %v", err)
		}
		if live := counts[shardstock.StatusAwaitingPayment] + counts[shardstock.StatusPaid]; live > stock {
			var desc []string
			for _, o := range h.orders(p.id) {
				if o.Status == shardstock.StatusAwaitingPayment || o.Status == shardstock.StatusPaid {
					desc = append(desc, fmt.Sprintf("%s of %s on shard %d (%s)", o.ID, o.UserID, o.Shard, o.Status))
				}
			}
			h.fail("oversell: %s has %d orders awaiting payment or paid, stock %d: %s; shards: %s", p.id, live, stock, strings.Join(desc, ", "), h.describe(p))
		}
		for _, u := range h.users {
			if n := h.liveOrders(p.id, u); n > p.limit {
				h.fail("per-user limit: %s holds %d live orders of %s, limit %d", u, n, p.id, p.limit)
			}
		}
		for u, ids := range h.heldUnits(p) {
			if int64(len(ids)) > p.limit {
				h.fail("per-user limit: %s holds %d units of %s on the shards and in SQL (%v), limit %d", u, len(ids), p.id, ids, p.limit)
			}
		}
	}
}

// heldUnits are, per buyer, the units of p the buyer holds: live orders
// in SQL, and holds locked or sold on the shards that answer and are
// resynced, unless SQL says their order is cancelled or failed (its
// release may be on its way). Each reservation id once.
func (h *history) heldUnits(p *mproduct) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(user, id string) {
		if out[user] == nil {
			out[user] = map[string]bool{}
		}
		out[user][id] = true
	}
	final := map[string]bool{}
	for _, o := range h.orders(p.id) {
		switch o.Status {
		case shardstock.StatusAwaitingPayment, shardstock.StatusPaid:
			add(o.UserID, o.ID)
		default:
			final[o.ID] = true
		}
	}
	for i := range modelShards {
		if h.killed[i] || h.frozen[i] || h.wiped[i] || !h.resynced(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := h.env.direct[i].HGetAll(ctx, "ss:{p:"+p.id+"}:holds").Result()
		cancel()
		if err != nil {
			continue
		}
		for id, v := range m {
			f := strings.Fields(v)
			if len(f) >= 2 && (f[0] == "L" || f[0] == "S") && !final[id] {
				add(f[1], id)
			}
		}
	}
	return out
}

// giveBackWithin bounds how long a claim give-back to a home that answers
// may wait: the sweep runs every 250 ms, every 5 s at most after failures.
const giveBackWithin = 15 * time.Second

// checkGiveBacks: a claim whose order was released goes back to its
// buyer's home within giveBackWithin once a running coordinator can reach
// that home, whatever other homes do (a sweep held up by a home that does
// not answer kept every buyer behind it refused).
func (h *history) checkGiveBacks() {
	ctx := context.Background()
	pending, err := h.sql.Orders.ClaimsPending(ctx, "", 100_000)
	if err != nil {
		h.fail("claims pending: %v", err)
	}
	now := time.Now()
	seen := map[string]time.Time{}
	for _, o := range pending {
		since, ok := h.pendingSince[o.ID]
		if !ok {
			since = now
		}
		reaches, home := -1, -1
		for c, m := range h.coords {
			if m == nil {
				continue
			}
			p, err := m.inv.catalog.Product(ctx, o.ProductID)
			if err != nil {
				continue
			}
			i, err := m.set.Purchases.HomeOf(p, o.UserID)
			if err != nil || h.killed[i] || h.frozen[i] || h.cut[i] || h.slow[i] || !h.resynced(i) || m.set.Fence.Fenced(i) {
				continue
			}
			reaches, home = c, i
		}
		if reaches < 0 || h.dbAway {
			since = now // the wait is counted from when a coordinator reaches the home (and its database)
		}
		seen[o.ID] = since
		if reaches >= 0 && now.Sub(since) > giveBackWithin {
			h.fail("claims: the give-back of %s's claim %s to shard %d has waited %s since coordinator %d reaches that shard",
				o.UserID, o.ID, home, now.Sub(since).Round(time.Second), reaches)
		}
	}
	h.pendingSince = seen
}

// checkLimitIsTrue: a 409 limit_reached is true when it is said: the
// buyer holds the limit. Not checked while the answer may rest on a
// claim in flight: a shard away (its give-backs wait in memory), a
// give-back queued or pending in SQL, the buyer's own attempts without
// an answer, queued or answered 503, or claims a stopped coordinator took
// with it.
func (h *history) checkLimitIsTrue(user string, p *mproduct) {
	if h.leaked {
		return
	}
	for i := range modelShards {
		if h.killed[i] || h.frozen[i] || h.cut[i] || h.slow[i] || !h.resynced(i) {
			return
		}
	}
	for _, m := range h.coordinators() {
		if m.set.PendingGiveBacks() > 0 {
			return
		}
	}
	for _, a := range h.attempts {
		if a.user == user && a.product == p.id && (a.unknown || a.status == 202 || a.status == 503) {
			return // (an attempt abandoned while a shard could not answer keeps its claim: DESIGN.md's known limit)
		}
		if a.user == user && a.product == p.id && a.lostByRewind {
			// A reservation a machine crash took (the lost last writes of
			// appendfsync everysec) whose claim lives on the buyer's home,
			// another shard that kept it: nothing tells that claim its
			// reservation is gone, so it keeps one unit of the limit used
			// (DESIGN.md's known limits; found by the fast mode, seed
			// 16239486677731182805).
			return
		}
	}
	// A cancelled or failed order's claim is given back once its settlement
	// is published, to the shard that held the unit, which may be crashing
	// again and again: until then the buyer's home rightly counts it, and
	// ClaimsPending does not list it yet (DESIGN.md's known limits; found by
	// the fast mode, seed 1850497203556740258).
	if os, err := h.sql.Orders.Unsettled(context.Background(), 1, nil); err != nil || len(os) > 0 {
		return
	}
	if os, err := h.sql.Orders.ClaimsPending(context.Background(), "", 1); err != nil || len(os) > 0 {
		return
	}
	if held := h.heldUnits(p)[user]; int64(len(held)) < p.limit {
		h.fail("truthful answers: %s was told 409 limit_reached for %s holding %d units (%v), limit %d", user, p.id, len(held), held, p.limit)
	}
}

// orders are every order row of product (each once).
func (h *history) orders(product string) []shardstock.Order {
	var out []shardstock.Order
	seen := map[string]bool{}
	for i := range modelShards {
		for _, f := range []func(context.Context, string, int) ([]shardstock.Order, error){h.sql.Orders.LiveOrders, h.sql.Orders.FinalOrders} {
			os, err := f(context.Background(), product, i)
			if err != nil {
				h.fail("orders of %s: %v", product, err)
			}
			for _, o := range os {
				if !seen[o.ID] {
					seen[o.ID] = true
					out = append(out, o)
				}
			}
		}
	}
	return out
}

func (h *history) liveOrders(product, user string) int64 {
	var n int64
	for _, o := range h.orders(product) {
		if o.UserID == user && (o.Status == shardstock.StatusAwaitingPayment || o.Status == shardstock.StatusPaid) {
			n++
		}
	}
	return n
}

// checkSoldOutIsTrue: a 410 is never an outage. A shard the buyer's
// coordinator could not reach (a cut link) holding salable units of p, not
// drained, makes a "sold out" untrue.
func (h *history) checkSoldOutIsTrue(p *mproduct) {
	drained, _ := h.sql.ShardLog.DrainedShards(context.Background())
	for i := range modelShards {
		if !h.cut[i] || drained[i] {
			continue
		}
		if c, ok := h.counters(i, p.id); ok && c[0] > 0 {
			h.fail("truthful answers: %s answered sold out while shard %d (link cut) holds %d salable units", p.id, i, c[0])
		}
	}
}

// settle heals every fault, lets the messages drain and checks what holds
// at rest.
func (h *history) settle() {
	h.step = 99
	if h.dbAway {
		h.dbUp()
	}
	for c := range h.coords {
		h.stalled[c].Store(false)
		if h.stopped[c] {
			h.coords[c] = h.startCoordinator(c)
			h.stopped[c] = false
			h.logf("heal: start coordinator %d", c)
		}
	}
	h.logf("heal: thaw, restart and reconnect every shard")
	for i := range modelShards {
		h.env.redis.Thaw(i)
		h.frozen[i] = false
		if h.killed[i] {
			h.env.redis.Restart(i)
			h.killed[i] = false
		}
		h.mend(i)
	}
	h.waitFor(20*time.Second, "every shard back in line with the order table (unfenced on both coordinators)", func() (bool, string) {
		var fenced []string
		for c, m := range h.coords {
			for i := range h.lists[c] {
				if m.set.Fence.Fenced(i) {
					fenced = append(fenced, fmt.Sprintf("coordinator %d shard %d (%s)", c, i, m.inv.resync.Problem(i)))
				}
			}
		}
		return len(fenced) == 0, strings.Join(fenced, ", ")
	})
	h.waitFor(20*time.Second, "every shard up with its breaker closed on both coordinators", func() (bool, string) {
		for c, m := range h.coords {
			for _, sh := range m.inv.views.Shards(context.Background()) {
				if !sh.Up || (sh.Breaker != "" && sh.Breaker != "closed") {
					return false, fmt.Sprintf("coordinator %d: %+v", c, sh)
				}
			}
		}
		return true, ""
	})
	if h.any(func(p *mproduct) bool { return p.paused }) { // a paused sale's queued purchases wait for its resume
		for _, p := range h.products {
			h.admin(0, "POST", "/admin/v1/products/"+p.id+"/resume", "")
			p.paused = false
		}
		h.controlsEverywhere()
		h.logf("resume every sale (its queued purchases wait for that)")
	}
	h.waitFor(claimWait, "every queued purchase resolved", func() (bool, string) {
		for _, m := range h.coordinators() {
			m.spool.RetryNow() // the faults are healed: no need to wait out a backoff
		}
		for _, a := range h.attempts {
			if a.ticket == "" || (a.code != "" && a.code != "queued") {
				continue
			}
			for c := range h.coords {
				rep := h.call(c, "GET", "/api/v1/tickets/"+a.ticket, "", "X-User-ID", a.user)
				if rep.status == 200 && rep.str("status") != "queued" {
					a.code, a.resolvedOrders = rep.str("status"), rep.str("order_id")
					h.logf("ticket %s of %s (step %d): %s %s %s", a.ticket, a.user, a.step, a.code, a.resolvedOrders, rep.str("error"))
					break
				}
			}
			if a.code == "" || a.code == "queued" {
				return false, fmt.Sprintf("ticket %s of %s still queued", a.ticket, a.user)
			}
		}
		return true, ""
	})
	h.waitFor(claimWait, "every purchase answered 200 or reserved written as an order", func() (bool, string) {
		for _, a := range h.attempts {
			id := a.order
			if a.code == "reserved" {
				id = a.resolvedOrders
			}
			if id == "" || a.lostByRewind {
				continue
			}
			if a.code == "reserved" && h.ticketLost(a) {
				continue
			}
			if o, err := h.store().Orders.Order(context.Background(), id); err != nil || o == nil {
				where := ""
				for _, m := range h.coordinators() {
					if _, r, ok := m.spool.Ticket(a.ticket); ok && a.ticket != "" {
						where = fmt.Sprintf(" (ticket reserved on shard %d; shards' losses after attempts %v; holds %s)", r.Shard, h.losses, h.holdsOf(a.product, id))
					}
				}
				return false, fmt.Sprintf("no order row for %s's %s (step %d)%s: %v", a.user, id, a.step, where, err)
			}
		}
		return true, ""
	})
	h.checkAwaitingHeld()
	// Every order final: cancel those awaiting payment (again while a
	// cancel is refused: 503 is a retry-later).
	h.logf("cancel every order still awaiting payment")
	for _, p := range h.products {
		if p.archived {
			continue
		}
		cancel := h.cancelAwaiting(p)
		h.waitFor(claimWait, "convergence of "+p.id, func() (bool, string) {
			cancel()
			if p.archiveDue {
				if h.readArchives(); p.archived {
					return true, "" // the automatic archive took it, its keys with it
				}
			}
			return h.converged(p)
		})
	}
	// Every order final: a product whose window ended a day ago is archived
	// by the coordinators (ArchiveDue, every ArchiveEvery) without anyone
	// asking.
	for _, p := range h.products {
		if p.archiveDue && !p.archived {
			h.waitFor(claimWait+2*time.Minute, "the automatic archive of "+p.id+" (its window ended a day ago, every order final)", func() (bool, string) {
				h.readArchives()
				return p.archived, "not archived"
			})
		}
	}
	// Checked before any repair an operator could make (a reconcile fix
	// finishes transfers and settles again), which would hide what the
	// system left undone by itself; then repaired, and checked again.
	for _, p := range h.products {
		if !p.archived {
			rep := h.admin(0, "POST", "/admin/v1/products/"+p.id+"/reconcile", "")
			h.logf("reconcile %s (fix): %s", p.id, rep.short())
		}
	}
	for _, p := range h.products {
		if !p.archived {
			// (An order a writer that had its reservation in hand writes
			// only now, its ticket's shard having lost writes, is cancelled
			// as the others were: the soak found one still awaiting payment.)
			cancel := h.cancelAwaiting(p)
			h.waitFor(claimWait, "convergence of "+p.id+" after the reconcile", func() (bool, string) {
				cancel()
				return h.converged(p)
			})
		}
	}
	h.checkAnswers()
	if h.lists[1] < modelShards { // the rolling grow ends: every coordinator sells every product
		h.stopCoordinator(1)
		h.lists[1] = modelShards
		h.coords[1] = h.startCoordinator(1)
		h.logf("grow: coordinator 1 restarts on every shard")
	}
	// (after the grow: a coordinator on the old list cannot tell that an
	// order held on a shard it lacks does not exist, and parks its payment
	// for one with the whole list, which it may claim back first)
	h.checkPayMessages()
	h.checkNoStrandedStock()
}

// converged: Σ sold = paid orders, Σ locked = 0 (every order final), Σ
// salable = stock − paid on shards that kept their data, and every order's
// hold in the state its status says.
func (h *history) converged(p *mproduct) (bool, string) {
	var sold, locked, salable int64
	paid := map[int]int64{}
	for _, o := range h.orders(p.id) {
		if o.Status == shardstock.StatusPaid {
			paid[o.Shard]++
		}
		if o.Status == shardstock.StatusAwaitingPayment {
			return false, "order " + o.ID + " still awaiting payment"
		}
	}
	lost := false
	for i := range modelShards {
		c, ok := h.counters(i, p.id)
		if !ok || h.wiped[i] {
			lost = lost || h.wiped[i]
			continue
		}
		if c[2] != paid[i] {
			return false, fmt.Sprintf("shard %d: sold %d, paid orders there %d", i, c[2], paid[i])
		}
		sold, locked, salable = sold+c[2], locked+c[1], salable+c[0]
	}
	if locked != 0 {
		return false, fmt.Sprintf("%d units locked with every order final (%s)", locked, h.lockedHolds(p))
	}
	if stock := h.currentStock(p); !lost && salable != stock-sold {
		return false, fmt.Sprintf("salable %d, stock %d - sold %d", salable, stock, sold)
	}
	holds := map[int]map[string]string{}
	for i := range modelShards {
		if h.wiped[i] {
			continue
		}
		m, err := h.env.direct[i].HGetAll(context.Background(), "ss:{p:"+p.id+"}:holds").Result()
		if err != nil {
			return false, err.Error()
		}
		holds[i] = m
	}
	for _, o := range h.orders(p.id) {
		m, ok := holds[o.Shard]
		if !ok {
			continue
		}
		st := m[o.ID]
		switch {
		case o.Status == shardstock.StatusPaid && !strings.HasPrefix(st, "S "):
			return false, fmt.Sprintf("order %s is paid and its hold on shard %d is %q", o.ID, o.Shard, st)
		case o.Status != shardstock.StatusPaid && strings.HasPrefix(st, "S "):
			return false, fmt.Sprintf("order %s is %s and its hold on shard %d is sold", o.ID, o.Status, o.Shard)
		}
	}
	return true, ""
}

// checkAwaitingHeld: at rest, before the heal cancels them, every order
// awaiting payment has its unit locked on its shard. An order whose hold a
// crash took gets it back (its shard's resync, or Resync.Admit for one
// written after that) or is written failed: one left payable with no unit
// behind it is an oversell waiting for its payment, or a cancel that hides
// it (break 6 of issue 40). A wiped shard's holds are not looked at.
func (h *history) checkAwaitingHeld() {
	for _, p := range h.products {
		if p.archived {
			continue
		}
		h.waitFor(5*time.Second, "every order of "+p.id+" awaiting payment has its unit locked", func() (bool, string) {
			for _, o := range h.orders(p.id) {
				if o.Status != shardstock.StatusAwaitingPayment || o.Shard < 0 || o.Shard >= modelShards || h.wiped[o.Shard] {
					continue
				}
				st, err := h.env.direct[o.Shard].HGet(context.Background(), "ss:{p:"+p.id+"}:holds", o.ID).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					return false, err.Error()
				}
				if !strings.HasPrefix(st, "L ") {
					return false, fmt.Sprintf("order %s of %s awaits payment and its hold on shard %d is %q", o.ID, o.UserID, o.Shard, st)
				}
			}
			return true, ""
		})
	}
}

// lockedHolds names the locked holds on every shard that kept its data, with
// their orders' status, for a failure message.
func (h *history) lockedHolds(p *mproduct) string {
	status := map[string]shardstock.OrderStatus{}
	for _, o := range h.orders(p.id) {
		status[o.ID] = o.Status
	}
	var b strings.Builder
	for i := range modelShards {
		if h.wiped[i] {
			continue
		}
		m, err := h.env.direct[i].HGetAll(context.Background(), "ss:{p:"+p.id+"}:holds").Result()
		if err != nil {
			fmt.Fprintf(&b, "shard %d: %v; ", i, err)
			continue
		}
		for id, v := range m {
			if strings.HasPrefix(v, "L ") {
				st, ok := status[id]
				if !ok {
					st = "no order row"
				}
				fmt.Fprintf(&b, "shard %d holds %s for %q, its order %s; ", i, id, v, st)
			}
		}
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// checkAnswers: every 200 and every reserved ticket is exactly one order
// row of that buyer and product; no buyer has an order the answers do not
// explain (a 410, 409, 403 or rejected holds nothing; only an attempt with
// no answer may have gone either way).
func (h *history) checkAnswers() {
	for _, p := range h.products {
		told := map[string]*attempt{}
		unknown := map[string]int{}
		for _, a := range h.attempts {
			if a.product != p.id {
				continue
			}
			id := a.order
			if a.code == "reserved" {
				id = a.resolvedOrders
			}
			if id != "" {
				if prev := told[id]; prev != nil {
					h.fail("truthful answers: order %s was answered twice (steps %d and %d)", id, prev.step, a.step)
				}
				told[id] = a
			}
			if a.unknown {
				unknown[a.user]++
			}
		}
		for _, o := range h.orders(p.id) {
			a := told[o.ID]
			if a == nil {
				if unknown[o.UserID] == 0 {
					h.fail("truthful answers: %s has order %s (%s, shard %d) of %s that no answer told them of", o.UserID, o.ID, o.Status, o.Shard, p.id)
				}
				unknown[o.UserID]--
				continue
			}
			if a.user != o.UserID {
				h.fail("order %s was answered to %s and belongs to %s", o.ID, a.user, o.UserID)
			}
			if o.Status == shardstock.StatusFailed && !a.lostByRewind && !a.failFastMay && !(h.claimsLost[[2]string{p.id, a.user}] && h.pastLimit(p, a.user)) {
				h.fail("truthful answers: %s was answered %d (step %d) and order %s was written failed", a.user, a.status, a.step, o.ID)
			}
		}
	}
}

// checkNoStrandedStock: with every order final and the faults healed, the
// sale can sell its whole stock: resume, reopen, undrain, rebalance, then
// new buyers buy until sold out, and no salable unit is left behind.
func (h *history) checkNoStrandedStock() {
	for i := range modelShards {
		h.admin(0, "POST", fmt.Sprintf("/admin/v1/shards/%d/drain", i), `{"drained":false}`)
	}
	for _, p := range h.products {
		if p.archived {
			continue
		}
		h.admin(0, "POST", "/admin/v1/products/"+p.id+"/resume", "")
		h.admin(0, "PATCH", "/admin/v1/products/"+p.id, fmt.Sprintf(`{"ends_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
		p.paused, p.ended = false, false
	}
	h.controlsEverywhere()
	h.logf("undrain every shard, resume and reopen every sale")
	for _, p := range h.products {
		if p.archived {
			continue
		}
		rep := h.admin(0, "POST", "/admin/v1/products/"+p.id+"/rebalance", "")
		if rep.status != 200 {
			h.fail("rebalance %s at rest: %s %s", p.id, rep.short(), rep.raw)
		}
		h.roomsEverywhere() // (a line held while sold out runs again: the units are back)
		// Each coordinator sells until it answers sold out; a shard it
		// found empty is skipped for a second (shard.Config.EmptyTTL), so
		// the round is repeated after that until a round sells nothing.
		var bought int
		for round := 0; ; round++ {
			n := 0
			for c := range h.coords {
				for {
					h.fresh++
					// (Through its waiting room, if it has one: a 403 not
					// admitted after a patient buyer's looks ends the round as
					// a sold out does, and stock left salable is stranded.)
					rep := h.purchase(c, fmt.Sprintf("z%d", h.fresh), p, true)
					if rep.status == 410 || (rep.status == 403 && (rep.str("error") == "ended" || rep.str("error") == "not_admitted")) {
						break // (ended: a window that could not be reopened)
					}
					if rep.status != 200 {
						h.fail("selling the rest of %s: %s %s", p.id, rep.short(), rep.raw)
					}
					n++
					if bought+n > int(h.currentStock(p)) {
						h.fail("oversell: new buyers bought %d units of %s at rest, its stock is %d; shards: %s", bought+n, p.id, h.currentStock(p), h.describe(p))
					}
				}
			}
			bought += n
			if n == 0 && round > 0 {
				break
			}
			time.Sleep(150 * time.Millisecond)
		}
		h.logf("new buyers buy the rest of %s: %d units, then sold out", p.id, bought)
		for i := range modelShards {
			if c, ok := h.counters(i, p.id); ok && c[0] != 0 {
				h.fail("stranded stock: %s answered sold out with %d salable units on shard %d", p.id, c[0], i)
			}
		}
		h.checkSafety()
	}
}

// cancelAwaiting returns a func that cancels every order of p still
// awaiting payment, at most every half second (again while a cancel is
// refused: 503 is a retry-later).
func (h *history) cancelAwaiting(p *mproduct) func() {
	var last time.Time
	return func() {
		if time.Since(last) < 500*time.Millisecond {
			return
		}
		last = time.Now()
		for _, o := range h.orders(p.id) {
			if o.Status == shardstock.StatusAwaitingPayment {
				h.call(0, "POST", "/api/v1/orders/"+o.ID+"/cancel", "", "X-User-ID", o.UserID)
			}
		}
	}
}

// describe is p's counters on every shard and its transfer log, for a
// failure's message.
func (h *history) describe(p *mproduct) string {
	var b strings.Builder
	for i := range modelShards {
		c, ok := h.counters(i, p.id)
		fmt.Fprintf(&b, "shard %d %v (read %v); ", i, c, ok)
	}
	for i := range modelShards {
		ts, _ := h.sql.Transfers.ShardTransfers(context.Background(), i)
		for _, t := range ts {
			if t.ProductID == p.id && (t.From == i || t.From == -1 && t.To == i) {
				fmt.Fprintf(&b, "transfer %s %d->%d wanted %d moved %d %s; ", t.ID, t.From, t.To, t.Wanted, t.Moved, t.State)
			}
		}
	}
	return b.String()
}

func (h *history) waitFor(d time.Duration, what string, cond func() (bool, string)) {
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.fail("%s: not within %s; last state: %s", what, d, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// claimWait bounds the waits at rest for messages: an entry a stopped
// coordinator had read is taken over by another after ClaimIdle (30 s, as
// serve's default), looked for every ClaimIdle/2.
const claimWait = 60 * time.Second

// quietFor bounds a wait for the history's messages to do their work.
const quietFor = 2 * time.Second

// quiesce waits (up to quietFor) until the work a step set going has landed
// on every shard that can be reached: a restarted shard resynced on both
// coordinators (or kept fenced, saying why), every reservation and
// settlement on its streams consumed and acknowledged, no settlement in SQL
// waiting to be published to it, no claim waiting to be given back and,
// with every shard reachable, no purchase waiting in a spool. A step's
// effects then land within the step, so the AOF saved after it and a
// history replayed from its draws (rapid's shrinking, the kept fail files)
// do not depend on how fast the consumers ran. A hurried history skips it:
// a crash or a step then meets messages still in flight.
func (h *history) quiesce() {
	if h.hurried || h.dbAway { // (nothing waited for here can end without the database)
		return
	}
	deadline := time.Now().Add(quietFor)
	for {
		busy := h.busy()
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			h.logf("(still busy after %s: %s)", quietFor, busy)
			return
		}
		for _, m := range h.coordinators() {
			m.spool.RetryNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busy says what is still under way ("": nothing).
func (h *history) busy() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var away []int // shards nothing can reach or change now
	for i := range modelShards {
		if h.killed[i] || h.frozen[i] || h.cut[i] || h.slow[i] { // (a slow link times out every call)
			away = append(away, i)
		}
	}
	othersAway := len(away) > 0
	for i := range modelShards {
		if slices.Contains(away, i) {
			continue
		}
		why, stuck := h.shardBusy(ctx, i, othersAway)
		if stuck {
			away = append(away, i)
		} else if why != "" {
			return fmt.Sprintf("shard %d: %s", i, why)
		}
	}
	if os, err := h.sql.Orders.Unsettled(ctx, 1, away); err != nil || len(os) > 0 {
		return fmt.Sprintf("settlements to publish (%v)", err)
	}
	if len(away) > 0 {
		return ""
	}
	if os, err := h.sql.Orders.ClaimsPending(ctx, "", 1); err != nil || len(os) > 0 {
		return fmt.Sprintf("claims to give back (%v)", err)
	}
	for c, m := range h.coords {
		if m == nil {
			continue
		}
		if n := m.spool.Depth(); n > 0 && !h.any(func(p *mproduct) bool { return p.paused || p.ended || p.archived }) {
			return fmt.Sprintf("coordinator %d: %d purchases in its spool", c, n)
		}
	}
	return ""
}

// shardBusy says what shard i still has to do ("": nothing): a restart
// not yet seen or resynced by a coordinator, or entries of its settle
// stream or its outboxes not yet consumed and acknowledged. stuck: it is
// kept fenced by a disagreement, or, with another shard away, fenced by a
// resync that may wait for that shard (the registers are rebuilt from
// every shard's holds); nothing moves on it until then.
func (h *history) shardBusy(ctx context.Context, i int, othersAway bool) (why string, stuck bool) {
	info, err := h.env.direct[i].Info(ctx, "server").Result()
	if err != nil {
		return err.Error(), false
	}
	run := runIDOf(info)
	for c, m := range h.coords {
		if m == nil || i >= h.lists[c] {
			continue // away, or without this shard (the old list)
		}
		switch {
		case m.set.Fence.Fenced(i) && (othersAway || m.inv.resync.Problem(i) != ""):
			return "", true
		case m.set.Fence.SeenRun(i) != run:
			return fmt.Sprintf("coordinator %d has not seen its restart", c), false
		case m.set.Fence.Fenced(i):
			return fmt.Sprintf("coordinator %d resyncs it", c), false
		}
	}
	streams := map[string]string{shard.SettleKey: "inventory", shard.PaymentsKey: "payments"}
	for _, p := range h.products {
		streams[shard.OutboxKey(p.id)] = "orders"
	}
	for stream, group := range streams {
		gs, err := h.env.direct[i].XInfoGroups(ctx, stream).Result()
		if err != nil && !strings.Contains(err.Error(), "no such key") {
			return err.Error(), false
		}
		if why := groupBusy(ctx, h.env.direct[i], stream, group, gs); why != "" {
			return stream + ": " + why, false
		}
	}
	return "", false
}

// groupBusy says whether group has entries of stream to read or to
// acknowledge (gs: the stream's groups).
func groupBusy(ctx context.Context, c *redis.Client, stream, group string, gs []redis.XInfoGroup) string {
	for _, g := range gs {
		if g.Name != group {
			continue
		}
		if g.Pending > 0 || g.Lag > 0 {
			return fmt.Sprintf("%d pending, lag %d", g.Pending, g.Lag)
		}
		if g.Lag < 0 { // not known (entries deleted): compare the last ids
			st, err := c.XInfoStream(ctx, stream).Result()
			if err != nil || st.LastGeneratedID != g.LastDeliveredID {
				return fmt.Sprintf("delivered up to %s of %s (%v)", g.LastDeliveredID, st.LastGeneratedID, err)
			}
		}
		return ""
	}
	if n, err := c.XLen(ctx, stream).Result(); err != nil || n > 0 {
		return fmt.Sprintf("%d entries and no group %s yet (%v)", n, group, err)
	}
	return ""
}

func runIDOf(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v
		}
	}
	return ""
}

// The model's payment secrets: the one in use, and the next one a
// rotation brings in.
var (
	modelPaySecret = []byte("the-model-tests-payment-secret-0123456789")
	modelPayNext   = []byte("the-model-tests-next-payment-secret-987654")
)

// drawPaySecrets draws the stage of a payment secret rotation the
// coordinators are in, each step a rolling deploy (OPERATIONS.md): the
// coordinators then differ, and whatever the payment centre signs must be
// accepted by both (a result refused for its signature is dead-lettered:
// money taken, order unpaid).
func (h *history) drawPaySecrets() {
	old, next := modelPaySecret, modelPayNext
	stage := rapid.SampledFrom([]string{"none", "none", "deploying the new secret", "switching the centre", "removing the old secret"}).Draw(h.t, "payment secret rotation")
	h.paySecrets = [2][2][]byte{{old, nil}, {old, nil}}
	h.centreSecret = old
	switch stage {
	case "deploying the new secret": // coordinator 1 first
		h.paySecrets[1] = [2][]byte{next, old}
	case "switching the centre":
		h.paySecrets = [2][2][]byte{{next, old}, {next, old}}
		h.centreSecret = rapid.SampledFrom([][]byte{old, next}).Draw(h.t, "the centre signs with")
	case "removing the old secret": // coordinator 1 first
		h.paySecrets = [2][2][]byte{{next, old}, {next, nil}}
		h.centreSecret = next
	}
	if stage != "none" {
		h.logf("a payment secret rotation, %s: coordinator 0 accepts %s, coordinator 1 %s; the centre signs with the %s one",
			stage, secretNames(h.paySecrets[0]), secretNames(h.paySecrets[1]), secretName(h.centreSecret))
	}
}

func secretName(s []byte) string {
	if string(s) == string(modelPayNext) {
		return "new"
	}
	return "old"
}

func secretNames(s [2][]byte) string {
	if s[1] == nil {
		return "the " + secretName(s[0])
	}
	return "the " + secretName(s[0]) + " and the " + secretName(s[1])
}

// paymentResult is a payment centre's signed result for order id (the
// amount: the model's products are free; one transaction per order, so a
// repeat binds to the same order).
func (h *history) paymentResult(id string, success bool) []byte {
	result := "fail"
	if success {
		result = "success"
	}
	return fmt.Appendf(nil, `{"result":%q,"order_id":%q,"amount_cents":0,"transaction_id":"t-%s","timestamp":%d}`,
		result, id, id, h.clock.now().Unix())
}

// payMsg is a payment result sent on a shard's payments stream.
type payMsg struct {
	a       *attempt
	success bool
	shard   int
	step    int
	entry   string
	lost    bool // its shard lost it (a crash past it, a wipe) before it may have been read
}

// payMessage sends a payment result for an order as a payment centre
// does: on the payments stream of a shard that takes it (one drawn, else
// the next).
func (h *history) payMessage(success bool) {
	a, ok := h.orderArg(true)
	if !ok {
		h.logf("payment message: no order yet")
		return
	}
	body := h.paymentResult(a.order, success)
	first := rapid.IntRange(0, modelShards-1).Draw(h.t, "payments stream of shard")
	for k := range modelShards {
		i := (first + k) % modelShards
		if h.killed[i] || h.frozen[i] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		id, err := h.env.direct[i].XAdd(ctx, &redis.XAddArgs{Stream: shard.PaymentsKey,
			Values: []any{"body", string(body), "signature", order.SignPayment(h.centreSecret, body)}}).Result()
		cancel()
		if err != nil {
			continue
		}
		h.payMsgs = append(h.payMsgs, &payMsg{a: a, success: success, shard: i, step: h.step, entry: id})
		h.logf("payment message %s for %s's order %s (step %d) on shard %d", map[bool]string{true: "success", false: "fail"}[success], a.user, a.order, a.step, i)
		return
	}
	h.logf("payment message for %s: no shard takes it", a.order)
}

// payMessagesLost marks the payment messages sent on shard i since step
// (0: ever) lost with its last writes.
func (h *history) payMessagesLost(i, since int) {
	for _, m := range h.payMsgs {
		if m.shard == i && m.step >= since {
			m.lost = true
		}
	}
}

// checkPayMessages: every payment success sent as a message, and not lost
// with its shard's last writes, paid its order or is in the dead-letter
// stream asking for a refund (its order was released before it came, or
// never came to be: a sale lost with a shard's writes). A success refused
// for any other reason is money taken for an order that stays unpaid.
func (h *history) checkPayMessages() {
	ctx := context.Background()
	for _, m := range h.payMsgs {
		if !m.success || m.lost {
			continue
		}
		// (a result retried while its order was not written waits, once
		// its reader is gone, for another coordinator to claim it: ClaimIdle)
		h.waitFor(claimWait, fmt.Sprintf("the payment success for %s's order %s (step %d), sent on shard %d at step %d, to pay it or ask a refund",
			m.a.user, m.a.order, m.a.step, m.shard, m.step), func() (bool, string) {
			o, err := h.store().Orders.Order(ctx, m.a.order)
			if err != nil {
				return false, err.Error()
			}
			if o != nil && o.Status == shardstock.StatusPaid {
				return true, ""
			}
			dead, _ := h.env.direct[m.shard].XRange(ctx, shard.DeadPaymentsKey, "-", "+").Result()
			reason := ""
			for _, d := range dead {
				if d.Values["entry"] == m.entry {
					reason, _ = d.Values["reason"].(string)
				}
			}
			switch {
			case reason == "":
				return false, fmt.Sprintf("neither paid (%v) nor dead-lettered", o)
			case strings.Contains(reason, "refund"):
			case strings.Contains(reason, "does not exist") && (o == nil || m.a.lostByRewind):
				// A sale lost with a shard's writes, refunded by an operator
				// (a dead-lettered success asks a refund): its order never
				// written, or written after the message came, by a writer
				// that had its reservation in hand when the crash took the
				// hold (nothing could tell it from an order never made then):
				// failed, or awaiting payment with its hold put back, a sale
				// the buyer may pay for again (docs/TESTING.md).
			default:
				h.fail("a payment success for %s's order %s (step %d, now %v), sent on shard %d at step %d, was refused: %s", m.a.user, m.a.order, m.a.step, o, m.shard, m.step, reason)
			}
			return true, ""
		})
	}
}
