// Package loadgen is "shardstock loadgen": a crowd of buyers driven at a
// coordinator (or the edge) through the buyer API, the way a sale's buyers
// come (a race to sell out, a steady rate, a flood, or a waiting room's
// crowd), reporting throughput, latency, statuses and, with an admin token,
// whether the invariants held. It talks to the server through package
// client only.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/time/rate"

	"github.com/shardstock/shardstock/client"
	"github.com/shardstock/shardstock/flashsale"
)

// config is what loadgen is told.
type config struct {
	url, product, token, mode string
	buyers, conns, requests   int
	rate                      float64
	duration                  time.Duration
	json, progress            bool
	// buyerToken signs a buyer's token (SHARDSTOCK_HMAC_SECRET); nil: X-User-ID
	buyerToken func(user string) (string, error)
	// crowd mode
	joinRate      float64       // joins per second (0: no pause between batches)
	joinBatch     int           // joins sent at once
	approach      time.Duration // looks in the last second before the turn (0: Retry-After alone)
	leaveUnlikely bool          // a buyer told it is unlikely to get a unit leaves
	pay           bool          // a buyer who bought pays (unsigned: a server without a payment secret)
}

// Report is loadgen's result (printed, or as JSON with --json).
type Report struct {
	Mode       string             `json:"mode"`
	Requests   int64              `json:"requests"`
	Errors     int64              `json:"transport_errors"`
	Seconds    float64            `json:"seconds"`
	Throughput float64            `json:"requests_per_second"`
	Latency    map[string]float64 `json:"latency_ms"`
	Statuses   map[string]int64   `json:"statuses"`
	Invariants []string           `json:"invariants,omitempty"`
	OK         bool               `json:"invariants_ok"`
	Crowd      *CrowdReport       `json:"crowd,omitempty"` // crowd mode's figures
}

const loadgenUsage = `Usage: shardstock loadgen [flags]

Drives the buyer API: U distinct buyers over C keep-alive connections.
Modes:
  race    buy until the product is sold out (or --requests / --duration end it)
  steady  --rate purchases per second for --duration
  flood   as fast as possible for --duration (after a sell-out: the sold-out path)
  crowd   --buyers wait in the product's waiting room (it must have one): each
          joins (solving the line's proof of work), --join-batch joins at a
          time at --join-rate joins a second, looks at its place at the
          server's Retry-After and buys when admitted, until it bought or was
          told sold out, passed or revoked (or unlikely: --leave-unlikely).
          With --approach a buyer whose turn comes within a second looks
          every --approach until it comes (Retry-After is whole seconds).
          Reports fairness (Kendall tau-b of join order against purchase
          order; for a draw, a chi-square test of places against join
          order), looks per second while waiting, the time from the last
          unit sold to each remaining buyer's sold-out answer, and the
          proof of work's cost per join. Statuses and latency are the
          purchases'; --conns bounds the looks and purchases in flight.
With SHARDSTOCK_HMAC_SECRET in the environment (the coordinators' key of
buyer tokens) each buyer sends a token signed with it instead of X-User-ID:
the way through the nginx edge, and to a server with SHARDSTOCK_USER_AUTH=hmac.
With --admin-token it checks the invariants afterwards through the admin API
(no oversell; salable + locked + sold = alloc on every shard that answers).
`

// Main is "shardstock loadgen": it parses args (the flags in the usage
// above), runs the load and prints its report; the exit status is 0 when
// the invariant check passed (or was not asked for), 1 when it failed or
// the run could not start, 2 on bad usage.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var c config
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "server base URL")
	fs.StringVar(&c.product, "product", "lamp", "product id")
	fs.StringVar(&c.mode, "mode", "race", "race, steady, flood or crowd")
	fs.IntVar(&c.buyers, "buyers", 100000, "distinct buyers (lg-0 .. lg-N-1, as X-User-ID or in signed tokens)")
	fs.IntVar(&c.conns, "conns", 64, "concurrent keep-alive connections")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many requests (0: no limit)")
	fs.Float64Var(&c.rate, "rate", 1000, "steady mode: purchases per second")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "longest run")
	fs.StringVar(&c.token, "admin-token", "", "admin token for the invariant check (default: SHARDSTOCK_ADMIN_TOKEN, which keeps it out of ps)")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.BoolVar(&c.progress, "progress", true, "show a progress bar on stderr")
	fs.Float64Var(&c.joinRate, "join-rate", 1000, "crowd mode: joins per second (0: as fast as the answers come)")
	fs.IntVar(&c.joinBatch, "join-batch", 1, "crowd mode: joins sent at once (a batch is sent once the last one was answered)")
	fs.DurationVar(&c.approach, "approach", 50*time.Millisecond, "crowd mode: look this often in the last second before the turn (0: at the Retry-After only)")
	fs.BoolVar(&c.leaveUnlikely, "leave-unlikely", false, "crowd mode: a buyer told it is unlikely to get a unit leaves the line")
	fs.BoolVar(&c.pay, "pay", false, "crowd mode: a buyer who bought pays at once, as the sale page's Pay button does (needs a server without a payment secret); until units are paid, waiting buyers are told they are held, not sold out")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, loadgenUsage, "\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "shardstock: loadgen: %v (see shardstock loadgen --help)\n", err)
		return 2
	}
	if c.token == "" {
		c.token = getenv("SHARDSTOCK_ADMIN_TOKEN")
	}
	if secret := getenv("SHARDSTOCK_HMAC_SECRET"); secret != "" {
		c.buyerToken = func(user string) (string, error) {
			return flashsale.MintToken([]byte(secret), user, time.Hour, time.Now())
		}
	}
	if !slices.Contains([]string{"race", "steady", "flood", "crowd"}, c.mode) || c.conns < 1 || c.buyers < 1 ||
		c.joinBatch < 1 || c.joinRate < 0 || c.approach < 0 {
		fmt.Fprintln(stderr, "shardstock: loadgen: --mode must be race, steady, flood or crowd; --conns, --buyers and --join-batch at least 1; --join-rate and --approach not negative")
		return 2
	}
	var rep *Report
	if c.mode == "crowd" {
		var err error
		if rep, err = runCrowd(context.Background(), c, stderr); err != nil {
			fmt.Fprintf(stderr, "shardstock: loadgen: %v\n", err)
			return 1
		}
	} else {
		rep = runLoad(context.Background(), c, stderr)
	}
	if c.json {
		json.NewEncoder(stdout).Encode(rep)
	} else {
		PrintReport(stdout, rep)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// runLoad drives the load and checks the invariants.
func runLoad(ctx context.Context, c config, stderr io.Writer) *Report {
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	cl := &client.Client{URL: c.url, Token: c.token, BuyerToken: c.buyerToken, HTTP: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: c.conns, MaxConnsPerHost: c.conns}}}
	var (
		next, sent, transportErrs, soldOutRun atomic.Int64
		mu                                    sync.Mutex // guards lat and statuses
		lat                                   []time.Duration
		statuses                              = map[string]int64{}
	)
	var limiter *rate.Limiter
	if c.mode == "steady" {
		limiter = rate.NewLimiter(rate.Limit(c.rate), max(1, int(c.rate/100)))
	}
	total := int64(-1)
	if c.requests > 0 {
		total = int64(c.requests)
	}
	bar := newBar(c, stderr, total, "purchases ("+c.mode+")", "purchases")
	start := time.Now()
	var wg sync.WaitGroup
	for range c.conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := next.Add(1)
				if c.requests > 0 && n > int64(c.requests) || c.mode == "race" && soldOutRun.Load() >= int64(4*c.conns) {
					return
				}
				if limiter != nil && limiter.Wait(ctx) != nil {
					return
				}
				// A request started before the end runs to its answer (the
				// client's timeout bounds it): cutting it off would count
				// the run's own end as a transport error and leave its
				// outcome unknown.
				t0 := time.Now()
				status, err := cl.Purchase(context.WithoutCancel(ctx), c.product, fmt.Sprintf("lg-%d", (n-1)%int64(c.buyers)))
				took := time.Since(t0)
				sent.Add(1)
				bar.Add(1)
				if err != nil {
					transportErrs.Add(1)
					continue
				}
				if status == http.StatusGone {
					soldOutRun.Add(1)
				} else {
					soldOutRun.Store(0)
				}
				mu.Lock()
				lat = append(lat, took)
				statuses[fmt.Sprint(status)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	bar.Finish()
	secs := time.Since(start).Seconds()
	rep := &Report{Mode: c.mode, Requests: sent.Load(), Errors: transportErrs.Load(), Seconds: secs,
		Throughput: float64(sent.Load()) / secs, Latency: percentiles(lat), Statuses: statuses, OK: true}
	if c.token != "" {
		rep.Invariants, rep.OK = checkInvariants(context.WithoutCancel(ctx), cl, c.product)
	}
	return rep
}

// newBar is a progress bar of total things (-1: not known) on w, unless
// c turned it off: the count, and out of how many when it is known; the
// rate in unit a second; the run's bound (--duration) in the description.
// (With no total it read "(1/-, 453104 it/s)".)
func newBar(c config, w io.Writer, total int64, what, unit string) *progressbar.ProgressBar {
	if !c.progress {
		w = io.Discard
	}
	return progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(fmt.Sprintf("%s, for up to %s", what, c.duration)),
		progressbar.OptionShowCount(), progressbar.OptionShowTotalBytes(total > 0), progressbar.OptionSetPredictTime(total > 0),
		progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true), // (else the first render, at the first thing done, shows its rate over microseconds)
		progressbar.OptionClearOnFinish())
}

func percentiles(lat []time.Duration) map[string]float64 {
	out := map[string]float64{}
	if len(lat) == 0 {
		return out
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", .50}, {"p90", .90}, {"p99", .99}} {
		out[p.name] = ms(lat[int(p.q*float64(len(lat)-1))])
	}
	out["max"] = ms(lat[len(lat)-1])
	return out
}

// checkInvariants reads the product through the admin API: no oversell and
// conservation on every shard that answers.
func checkInvariants(ctx context.Context, cl *client.Client, product string) ([]string, bool) {
	body, err := cl.Product(ctx, product)
	var refused *client.Error
	if errors.As(err, &refused) {
		return []string{fmt.Sprintf("admin API answered %d", refused.Status)}, false
	}
	if err != nil {
		return []string{"admin API: " + err.Error()}, false
	}
	var st struct {
		Stock  int64 `json:"stock"`
		Shards []struct {
			Index                        int
			Up                           bool
			Salable, Locked, Sold, Alloc *int64
		} `json:"shards"`
	}
	if json.Unmarshal(body, &st) != nil {
		return []string{"admin API answered 200"}, false
	}
	var lines []string
	ok := true
	var used int64
	for _, s := range st.Shards {
		if s.Salable == nil {
			lines = append(lines, fmt.Sprintf("shard %d: no data (down or lost)", s.Index))
			continue
		}
		cons := *s.Salable+*s.Locked+*s.Sold == *s.Alloc
		ok = ok && cons
		used += *s.Locked + *s.Sold
		lines = append(lines, fmt.Sprintf("shard %d: salable %d + locked %d + sold %d = alloc %d: %v", s.Index, *s.Salable, *s.Locked, *s.Sold, *s.Alloc, cons))
	}
	ok = ok && used <= st.Stock
	lines = append(lines, fmt.Sprintf("no oversell: locked + sold %d <= stock %d: %v", used, st.Stock, used <= st.Stock))
	return lines, ok
}

// PrintReport writes r for people (the --json flag writes it as JSON).
func PrintReport(w io.Writer, r *Report) {
	fmt.Fprintf(w, "mode %s: %d requests in %.2fs = %.0f req/s (%d transport errors)\n", r.Mode, r.Requests, r.Seconds, r.Throughput, r.Errors)
	fmt.Fprintf(w, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.Latency["p50"], r.Latency["p90"], r.Latency["p99"], r.Latency["max"])
	var codes []string
	for k, v := range r.Statuses {
		codes = append(codes, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(codes)
	fmt.Fprintf(w, "statuses: %s\n", strings.Join(codes, " "))
	if r.Crowd != nil {
		printCrowd(w, r.Crowd)
	}
	for _, l := range r.Invariants {
		fmt.Fprintf(w, "invariant: %s\n", l)
	}
	if len(r.Invariants) > 0 {
		fmt.Fprintf(w, "invariants hold: %v\n", r.OK)
	}
}
