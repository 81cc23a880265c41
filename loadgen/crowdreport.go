package loadgen

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// CrowdReport is the crowd mode's part of loadgen's report.
type CrowdReport struct {
	Line           string         `json:"line"` // the line's mode: fifo or draw
	Buyers         int            `json:"buyers"`
	Joined         int            `json:"joined"`
	JoinSeconds    float64        `json:"join_seconds"` // from the first join sent to the last answered
	JoinsPerSecond float64        `json:"joins_per_second"`
	Outcomes       map[string]int `json:"outcomes"` // how each buyer's wait ended
	Fairness       Fairness       `json:"fairness"`
	Looks          Looks          `json:"looks"`
	SoldOut        Notice         `json:"sold_out_notice"`
	Unlikely       Unlikely       `json:"unlikely"`
	Work           *Work          `json:"work,omitempty"` // with a proof of work
	// Cut: the run's --duration ended it with buyers still in line (their
	// outcome "waiting"); 0: every buyer's wait ended.
	Cut float64 `json:"cut_by_duration_seconds,omitempty"`
}

// Fairness compares orders by Kendall's tau-b (1: the same order;
// null: undefined, fewer than two untied pairs). Join order is the join's
// batch: buyers of one batch are tied (the server saw them at once).
// Purchase order is when each unit's 200 came.
type Fairness struct {
	JoinPurchase  *float64 `json:"join_purchase_tau"`  // over the buyers who bought
	JoinPlace     *float64 `json:"join_place_tau"`     // over every buyer who learned its place
	PlacePurchase *float64 `json:"place_purchase_tau"` // over the buyers who bought
	// Places is the chi-square test of the places against the order of
	// joining: of a draw's lobby (a fair draw passes it), or of every
	// placed buyer of a fifo line (which fails it: its places follow the
	// order of joining).
	Places *DrawTest `json:"places_chi_square,omitempty"`
}

// Looks is the load the waiting put on the coordinators.
type Looks struct {
	Looks     int64              `json:"looks"`
	Approach  int64              `json:"approach_looks"` // sent sooner than the Retry-After (--approach)
	Seconds   float64            `json:"seconds"`        // from the first look sent to the last
	PerSecond float64            `json:"per_second"`
	Peak      int                `json:"peak_per_second"` // the most sent in one second of the clock
	Latency   map[string]float64 `json:"latency_ms"`
}

// Notice is how soon the buyers who joined and did not buy learned
// that the sale was over, after the last unit sold (its 200 came).
type Notice struct {
	NotBought int `json:"not_bought"`
	Told      int `json:"told"` // a look answered sold_out, or the purchase 410
	// Early were told before the last unit sold was even asked for: a
	// sold-out answer while a unit was left (or came back).
	Early int                `json:"told_before_last_sale"`
	Ms    map[string]float64 `json:"after_last_sale_ms"`
}

// Unlikely is how often "unlikely" was wrong.
type Unlikely struct {
	Told   int `json:"told"`   // buyers told, at some look, they were unlikely to get a unit
	Bought int `json:"bought"` // of them, the ones who got one
}

// Work is what the joins' proof of work cost the client.
type Work struct {
	Difficulty int                `json:"difficulty"`
	Solves     int                `json:"solves"`
	Ms         map[string]float64 `json:"solve_ms"` // wall time in the buyer's goroutine
}

// DrawP is the p-value below which a draw's places are called dependent on
// the order of joining (a fair draw falls below it once in 10,000 runs).
const DrawP = 1e-4

// report sums the run up; with an admin token it checks the invariants.
func (r *crowdRun) report(ctx context.Context, took time.Duration) *Report {
	t := &r.t
	cr := &CrowdReport{Line: r.mode, Buyers: len(r.buyers), Outcomes: map[string]int{}}
	for _, b := range r.buyers {
		cr.Outcomes[b.outcome]++
		if b.joined {
			cr.Joined++
		}
	}
	if t.joins > 0 {
		cr.JoinSeconds = t.lastJoin.Sub(t.firstJoin).Seconds()
		if cr.JoinSeconds > 0 {
			cr.JoinsPerSecond = float64(t.joins) / cr.JoinSeconds
		}
	}
	cr.Fairness = r.fairness()
	cr.Looks = r.looks()
	cr.SoldOut = r.notice()
	for _, b := range r.buyers {
		if b.unlikely {
			cr.Unlikely.Told++
			if b.outcome == OutcomeBought {
				cr.Unlikely.Bought++
			}
		}
	}
	cr.Work = r.work()
	secs := took.Seconds()
	rep := &Report{Mode: r.c.mode, Requests: t.requests, Errors: t.transport, Seconds: secs,
		Throughput: float64(t.requests) / secs, Latency: percentiles(t.buyLat), Statuses: t.statuses, OK: true, Crowd: cr}
	if r.c.token != "" {
		rep.Invariants, rep.OK = checkInvariants(context.WithoutCancel(ctx), r.cl, r.c.product)
	}
	return rep
}

func (r *crowdRun) fairness() Fairness {
	var f Fairness
	var jx, jy, px, py, bx, by []float64
	for _, b := range r.buyers {
		bought := float64(b.bought.UnixNano())
		if b.position > 0 {
			jx, jy = append(jx, float64(b.batch)), append(jy, float64(b.position))
		}
		if b.outcome != OutcomeBought {
			continue
		}
		bx, by = append(bx, float64(b.batch)), append(by, bought)
		if b.position > 0 {
			px, py = append(px, float64(b.position)), append(py, bought)
		}
	}
	f.JoinPurchase, f.JoinPlace, f.PlacePurchase = tau(bx, by), tau(jx, jy), tau(px, py)
	var joined, place []float64
	for i, b := range r.buyers {
		if b.position > 0 && (b.lobby || r.mode != "draw") {
			joined, place = append(joined, float64(i)), append(place, float64(b.position))
		}
	}
	if d, ok := testDraw(joined, place); ok {
		f.Places = &d
	}
	return f
}

// tau is kendallTauB, nil when undefined (JSON has no NaN).
func tau(x, y []float64) *float64 {
	t, ok := kendallTauB(x, y)
	if !ok {
		return nil
	}
	return &t
}

func (r *crowdRun) looks() Looks {
	t := &r.t
	l := Looks{Looks: t.looks, Approach: t.approach, Latency: percentiles(t.lookLat)}
	if t.looks > 0 {
		l.Seconds = t.lastLook.Sub(t.firstLook).Seconds()
	}
	if l.Seconds > 0 {
		l.PerSecond = float64(t.looks) / l.Seconds
	}
	for _, n := range t.lookSeconds {
		l.Peak = max(l.Peak, n)
	}
	return l
}

func (r *crowdRun) notice() Notice {
	var n Notice
	var lastSent, last time.Time
	for _, b := range r.buyers {
		if b.outcome == OutcomeBought {
			lastSent, last = later(lastSent, b.buySent), later(last, b.bought)
		}
	}
	var after []time.Duration
	for _, b := range r.buyers {
		if !b.joined || b.outcome == OutcomeBought {
			continue
		}
		n.NotBought++
		if b.outcome != OutcomeSoldOut {
			continue
		}
		n.Told++
		if b.soldOut.Before(lastSent) {
			n.Early++
		}
		if !last.IsZero() {
			after = append(after, max(b.soldOut.Sub(last), 0))
		}
	}
	n.Ms = percentiles(after)
	return n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (r *crowdRun) work() *Work {
	var solves []time.Duration
	for _, b := range r.buyers {
		if b.solve > 0 {
			solves = append(solves, b.solve)
		}
	}
	d := int(r.difficulty.Load())
	if d == 0 && len(solves) == 0 {
		return nil
	}
	return &Work{Difficulty: d, Solves: len(solves), Ms: percentiles(solves)}
}

func printCrowd(w io.Writer, c *CrowdReport) {
	var outcomes []string
	for _, k := range slices.Sorted(maps.Keys(c.Outcomes)) {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", k, c.Outcomes[k]))
	}
	fmt.Fprintf(w, "crowd: %d buyers, %s line: %d joined in %.2fs (%.0f joins/s); %s\n", c.Buyers, c.Line, c.Joined,
		c.JoinSeconds, c.JoinsPerSecond, strings.Join(outcomes, ", "))
	if c.Cut > 0 {
		fmt.Fprintf(w, "cut short: --duration (%gs) ended the run with %d of the %d buyers still in line; give a longer --duration to see every wait to its end\n",
			c.Cut, c.Outcomes[OutcomeWaiting], c.Buyers)
	}
	f := c.Fairness
	fmt.Fprintf(w, "fairness (Kendall tau-b): join→purchase %s, join→place %s, place→purchase %s\n",
		FmtTau(f.JoinPurchase), FmtTau(f.JoinPlace), FmtTau(f.PlacePurchase))
	if d := f.Places; d != nil && c.Line == "draw" {
		verdict := "independent of join order, as a fair draw is"
		if d.P < DrawP {
			verdict = "NOT independent of join order: not a fair draw"
		}
		fmt.Fprintf(w, "places against join order: chi-square %.2f on %d df over %d places (%d×%d bins), p = %.3g: %s\n",
			d.ChiSquare, d.DF, d.Places, d.Bins, d.Bins, d.P, verdict)
	} else if d != nil {
		// (A fifo line places buyers in the order they joined: the draw's
		// test of independence fails by design, p = 0, which read as a
		// fairness failure.)
		fmt.Fprintf(w, "places against join order: in join order, as a %s line places them\n", c.Line)
	}
	l := c.Looks
	fmt.Fprintf(w, "looks while waiting: %d in %.2fs = %.0f/s (peak %d in a second; %d sooner than Retry-After), latency ms p50 %.2f p99 %.2f\n",
		l.Looks, l.Seconds, l.PerSecond, l.Peak, l.Approach, l.Latency["p50"], l.Latency["p99"])
	n := c.SoldOut
	fmt.Fprintf(w, "sold out: %d of the %d who did not buy were told (%d before the last sale)", n.Told, n.NotBought, n.Early)
	if len(n.Ms) > 0 {
		fmt.Fprintf(w, ", after the last sale ms p50 %.0f p99 %.0f max %.0f", n.Ms["p50"], n.Ms["p99"], n.Ms["max"])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "unlikely: %d told, %d of them bought\n", c.Unlikely.Told, c.Unlikely.Bought)
	if k := c.Work; k != nil {
		fmt.Fprintf(w, "work: difficulty %d, %d solves, ms per solve p50 %.3f p99 %.3f max %.3f\n", k.Difficulty, k.Solves, k.Ms["p50"], k.Ms["p99"], k.Ms["max"])
	}
}

// FmtTau is a Kendall tau for people: four places, or n/a when it is
// undefined.
func FmtTau(t *float64) string {
	if t == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.4f", *t)
}
