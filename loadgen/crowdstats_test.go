package loadgen

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestKendallTauOfKnownOrders(t *testing.T) {
	cases := []struct {
		name string
		x, y []float64
		want float64
	}{
		{"the same order", []float64{1, 2, 3, 4, 5}, []float64{10, 20, 30, 40, 50}, 1},
		{"reversed", []float64{1, 2, 3, 4, 5}, []float64{5, 4, 3, 2, 1}, -1},
		// 6 pairs ordered alike, 4 oppositely, no ties: (6 − 4) / 10.
		{"a permutation", []float64{1, 2, 3, 4, 5}, []float64{3, 4, 1, 2, 5}, 0.2},
		// One pair swapped of 45: (44 − 1) / 45.
		{"one neighbour swap in ten", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []float64{1, 2, 3, 5, 4, 6, 7, 8, 9, 10}, 43.0 / 45},
		// 2 alike, 6 opposite, 2 tied in x and 1 in y (the same pair as one
		// of them): −4 / √(8 × 9).
		{"ties in both", []float64{12, 2, 1, 12, 2}, []float64{1, 4, 7, 1, 0}, -4 / math.Sqrt(72)},
		// Batches of joins: the 3 pairs within one are tied in x; the 12
		// across batches are ordered alike: 12 / √(12 × 15).
		{"tied batches in order", []float64{0, 0, 1, 1, 2, 2}, []float64{2, 1, 4, 3, 6, 5}, 12 / math.Sqrt(180)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := kendallTauB(tc.x, tc.y)
			if !ok || math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("tau-b %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
}

func TestKendallTauIsUndefinedWithoutAnUntiedPair(t *testing.T) {
	for name, xy := range map[string][2][]float64{
		"no item":      {nil, nil},
		"one item":     {{1}, {1}},
		"every x tied": {{3, 3, 3}, {1, 2, 3}},
		"every y tied": {{1, 2, 3}, {7, 7, 7}},
	} {
		if tau, ok := kendallTauB(xy[0], xy[1]); ok {
			t.Errorf("%s: tau-b %v, want undefined", name, tau)
		}
	}
}

// The O(n log n) count agrees with counting every pair, on orders with
// many ties.
func TestKendallTauAgreesWithEveryPairCounted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 2 + rng.IntN(60)
		x, y := make([]float64, n), make([]float64, n)
		for i := range n {
			x[i], y[i] = float64(rng.IntN(1+round%9)), float64(rng.IntN(12))
		}
		want, wantOK := tauByPairs(x, y)
		got, ok := kendallTauB(x, y)
		if ok != wantOK || ok && math.Abs(got-want) > 1e-12 {
			t.Fatalf("x %v y %v: tau-b %v (%v), every pair counted: %v (%v)", x, y, got, ok, want, wantOK)
		}
	}
}

func tauByPairs(x, y []float64) (float64, bool) {
	var c, d, tx, ty, n0 float64
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			n0++
			sx, sy := sign(x[j]-x[i]), sign(y[j]-y[i])
			switch {
			case sx == 0 || sy == 0:
				if sx == 0 {
					tx++
				}
				if sy == 0 {
					ty++
				}
			case sx == sy:
				c++
			default:
				d++
			}
		}
	}
	if (n0-tx)*(n0-ty) == 0 {
		return 0, false
	}
	return (c - d) / math.Sqrt((n0-tx)*(n0-ty)), true
}

func sign(v float64) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// Reference values: the regularized upper incomplete gamma function
// Q(df/2, x/2) to 17 digits (mpmath), among them the tables' 5%, 1% and
// 0.1% critical values.
func TestChiSquarePOfKnownValues(t *testing.T) {
	cases := []struct {
		x    float64
		df   int
		want float64
	}{
		{3.841458820694124, 1, 0.05},
		{16.918977604620448, 9, 0.05},
		{23.209251158954356, 10, 0.01},
		{37.65248413348277, 25, 0.05},
		{18.46682695290317, 4, 0.001},
		{1, 2, 0.60653065971263342},
		{0.001, 3, 0.99999159208094195},
		{50, 3, 7.9891792449514711e-11},
		{150, 81, 4.9692804959042881e-6},
		{600, 9, 2.0941845519359111e-123},
		{2000, 2000, 0.49579475581978449},
		{0, 4, 1},
	}
	for _, tc := range cases {
		if got := chiSquareP(tc.x, tc.df); math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("P(chi-square(%d) >= %v) = %.17g, want %.17g", tc.df, tc.x, got, tc.want)
		}
	}
}

func TestChiSquareOfKnownTables(t *testing.T) {
	cases := []struct {
		name   string
		table  [][]int
		stat   float64
		df     int
		wantP  float64
		within float64
	}{
		// E = 12, 18, 28, 42: 4/12 + 4/18 + 4/28 + 4/42.
		{"2x2", [][]int{{10, 20}, {30, 40}}, 4.0/12 + 4.0/18 + 4.0/28 + 4.0/42, 1, 0.37299848361348713, 1e-12},
		{"independent", [][]int{{5, 10}, {10, 20}}, 0, 1, 1, 0},
		// Places in the order of joining: 4 cells of 50 where 12.5 are
		// expected, 12 empty ones.
		{"the diagonal", [][]int{{50, 0, 0, 0}, {0, 50, 0, 0}, {0, 0, 50, 0}, {0, 0, 0, 50}}, 600, 9, 2.0941845519359111e-123, 1e-130},
		{"an empty row left out", [][]int{{10, 20}, {0, 0}, {30, 40}}, 4.0/12 + 4.0/18 + 4.0/28 + 4.0/42, 1, 0.37299848361348713, 1e-12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stat, df := chiSquare(tc.table)
			if math.Abs(stat-tc.stat) > 1e-9 || df != tc.df {
				t.Fatalf("chi-square %v on %d df, want %v on %d", stat, df, tc.stat, tc.df)
			}
			if p := chiSquareP(stat, df); math.Abs(p-tc.wantP) > tc.within {
				t.Fatalf("p %v, want %v", p, tc.wantP)
			}
		})
	}
}

// drawThreshold is the p-value under which TestLoadgenCrowd takes a draw's
// places as not drawn: a fair draw falls under it one time in 10,000.
const drawThreshold = DrawP

// A fair draw passes the draw test at the rate the chi-square promises (5%
// of shuffles under p = 0.05, 1% under 0.01: the approximation holds for
// these tables), and places in the order of joining fail it by far.
func TestDrawTestIsCalibrated(t *testing.T) {
	const n, rounds = 200, 2000
	rng := rand.New(rand.NewPCG(28, 6))
	joined := make([]float64, n)
	for i := range joined {
		joined[i] = float64(i)
	}
	under5, under1, under := 0, 0, 0
	for range rounds {
		place := make([]float64, n)
		for i, p := range rng.Perm(n) {
			place[i] = float64(p + 1)
		}
		d, ok := testDraw(joined, place)
		if !ok || d.Bins != 4 || d.DF != 9 || d.Places != n {
			t.Fatalf("draw test of %d places: %+v (%v), want 4 bins and 9 df", n, d, ok)
		}
		if d.P < 0.05 {
			under5++
		}
		if d.P < 0.01 {
			under1++
		}
		if d.P < drawThreshold {
			under++
		}
	}
	t.Logf("of %d fair draws: %d under p = 0.05, %d under 0.01, %d under %g", rounds, under5, under1, under, drawThreshold)
	// Binomial(2000, 0.05): 100 ± 9.7; (2000, 0.01): 20 ± 4.4; three
	// standard deviations either way.
	if under5 < 71 || under5 > 129 || under1 < 7 || under1 > 33 || under > 2 {
		t.Fatalf("of %d fair draws, %d under p = 0.05 (want about 100), %d under 0.01 (about 20), %d under %g", rounds, under5, under1, under, drawThreshold)
	}
	fifo, _ := testDraw(joined, joined)
	if fifo.P >= 1e-100 {
		t.Fatalf("places in the order of joining: %+v, want p far under %g", fifo, drawThreshold)
	}
}

func TestDrawTestNeedsEnoughPlaces(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5}
	if d, ok := testDraw(x, x); ok || d.Places != 5 {
		t.Fatalf("5 places: %+v %v, want no test", d, ok)
	}
	cases := map[int]int{20: 2, 200: 4, 1000: 10, 100000: 10}
	for n, bins := range cases {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(i % 7) // ties: split by index
		}
		d, ok := testDraw(v, v)
		if !ok || d.Bins != bins {
			t.Errorf("%d places: %d bins (%v), want %d", n, d.Bins, ok, bins)
		}
	}
}

// TestCrowdReportSaysWhatItsFiguresMean (issue 42, finding 10): a fifo
// line's places failing the draw's test of independence (p = 0) read as a
// fairness failure, and a run that --duration cut short said nothing.
func TestCrowdReportSaysWhatItsFiguresMean(t *testing.T) {
	dependent := &DrawTest{ChiSquare: 74313, DF: 81, Places: 5000, Bins: 10, P: 0}
	for _, tc := range []struct {
		report      CrowdReport
		want, never string
	}{
		{CrowdReport{Line: "fifo", Buyers: 5000, Fairness: Fairness{Places: dependent}}, "in join order, as a fifo line places them", "chi-square"},
		{CrowdReport{Line: "draw", Buyers: 5000, Fairness: Fairness{Places: dependent}}, "NOT independent of join order", "cut short"},
		{CrowdReport{Line: "draw", Buyers: 5000, Fairness: Fairness{Places: &DrawTest{ChiSquare: 70, DF: 81, Places: 5000, Bins: 10, P: 0.8}}},
			"independent of join order, as a fair draw is", "NOT"},
		{CrowdReport{Line: "fifo", Buyers: 5000, Outcomes: map[string]int{OutcomeWaiting: 4650, "bought": 350}, Cut: 10},
			"cut short: --duration (10s) ended the run with 4650 of the 5000 buyers still in line", "chi-square"},
	} {
		var b strings.Builder
		printCrowd(&b, &tc.report)
		if out := b.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.never) {
			t.Errorf("report %+v printed:\n%s\nwant %q, never %q", tc.report, out, tc.want, tc.never)
		}
	}
}
