package loadgen

import (
	"math"
	"sort"
)

// The statistics of loadgen's crowd mode: how closely the order buyers
// bought in follows the order they joined in (Kendall's tau-b), and whether
// a draw's places are independent of the order its buyers joined in (the
// chi-square test of a contingency table).

// kendallTauB is Kendall's tau-b of the pairs (x[i], y[i]):
// (C − D) / √((n0 − n1)(n0 − n2)), where C and D count the pairs that x and
// y order alike and oppositely, n0 all pairs, n1 and n2 the pairs tied in x
// and in y (a tied pair is neither). 1: y orders the items as x does; −1:
// the reverse; near 0: no relation. ok is false when it is undefined (fewer
// than two items, or every pair tied in x or in y). O(n log n): the pairs x
// orders and y reverses are the inversions left in y once the items are
// sorted by x (then by y, so that a pair tied in x is no inversion).
func kendallTauB(x, y []float64) (tau float64, ok bool) {
	n := len(x)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		i, j := idx[a], idx[b]
		if x[i] != x[j] {
			return x[i] < x[j]
		}
		return y[i] < y[j]
	})
	ys := make([]float64, n)
	for k, i := range idx {
		ys[k] = y[i]
	}
	n1, n3 := tiedInX(idx, x, ys)
	d := inversions(ys) // sorts ys
	n2 := tiedRuns(ys)
	n0 := pairs(n)
	den := float64(n0-n1) * float64(n0-n2)
	if den == 0 {
		return 0, false
	}
	return float64(n0-n1-n2+n3-2*d) / math.Sqrt(den), true
}

// tiedInX counts the pairs tied in x (n1) and those tied in both x and y
// (n3), with idx sorting the items by x then y and ys their y in that order.
func tiedInX(idx []int, x, ys []float64) (n1, n3 int64) {
	for lo := 0; lo < len(idx); {
		hi := lo + 1
		for hi < len(idx) && x[idx[hi]] == x[idx[lo]] {
			hi++
		}
		n1 += pairs(hi - lo)
		n3 += tiedRuns(ys[lo:hi])
		lo = hi
	}
	return n1, n3
}

// tiedRuns counts the pairs of equal values in sorted a.
func tiedRuns(a []float64) int64 {
	var n int64
	for lo := 0; lo < len(a); {
		hi := lo + 1
		for hi < len(a) && a[hi] == a[lo] {
			hi++
		}
		n += pairs(hi - lo)
		lo = hi
	}
	return n
}

func pairs(n int) int64 { return int64(n) * int64(n-1) / 2 }

// inversions sorts a and returns how many pairs i < j had a[i] > a[j]
// (a merge sort; equal values are no inversion).
func inversions(a []float64) int64 {
	if len(a) < 2 {
		return 0
	}
	m := len(a) / 2
	inv := inversions(a[:m]) + inversions(a[m:])
	merged := make([]float64, 0, len(a))
	i, j := 0, m
	for i < m && j < len(a) {
		if a[j] < a[i] { // a[j] comes before every a[i:m] left
			merged = append(merged, a[j])
			inv += int64(m - i)
			j++
		} else {
			merged = append(merged, a[i])
			i++
		}
	}
	merged = append(append(merged, a[i:m]...), a[j:]...)
	copy(a, merged)
	return inv
}

// chiSquare is the chi-square statistic of independence of a table of
// counts, Σ (O − E)² / E with E = row total × column total / total, and
// its degrees of freedom, (rows − 1)(columns − 1); rows and columns with no
// count are left out. df < 1: no test.
func chiSquare(table [][]int) (stat float64, df int) {
	rows, cols, total := margins(table)
	nr, nc := 0, 0
	for _, r := range rows {
		if r > 0 {
			nr++
		}
	}
	for _, c := range cols {
		if c > 0 {
			nc++
		}
	}
	for i, row := range table {
		for j, o := range row {
			if rows[i] == 0 || cols[j] == 0 {
				continue
			}
			e := float64(rows[i]) * float64(cols[j]) / float64(total)
			stat += (float64(o) - e) * (float64(o) - e) / e
		}
	}
	return stat, (nr - 1) * (nc - 1)
}

func margins(table [][]int) (rows, cols []int, total int) {
	rows = make([]int, len(table))
	for i, row := range table {
		if len(row) > len(cols) {
			cols = append(cols, make([]int, len(row)-len(cols))...)
		}
		for j, o := range row {
			rows[i] += o
			cols[j] += o
			total += o
		}
	}
	return rows, cols, total
}

// chiSquareP is the probability that a chi-square variable with df (≥ 1)
// degrees of freedom is at least x: the test's p-value. With h = x/2 it is
// the finite sum Q(df) = Q(df mod 2) + Σ h^a e^−h / Γ(a + 1) over
// a = (df mod 2)/2, … , df/2 − 1, from Q(0) = 0 and Q(1) = erfc(√h) (the
// recurrence of the upper incomplete gamma function); each term is taken
// through its logarithm, so neither a large x nor a large df overflows.
func chiSquareP(x float64, df int) float64 {
	if x <= 0 {
		return 1
	}
	h := x / 2
	p := 0.0
	if df%2 == 1 {
		p = math.Erfc(math.Sqrt(h))
	}
	for nu := df % 2; nu < df; nu += 2 {
		a := float64(nu) / 2
		lg, _ := math.Lgamma(a + 1)
		p += math.Exp(a*math.Log(h) - h - lg)
	}
	return min(p, 1)
}

// DrawTest is the chi-square test that a draw's places are independent of
// the order its buyers joined in: the buyers are split by join order into
// Bins groups of (nearly) equal size, and by place likewise, and counted in
// a Bins × Bins table. A draw passes it (P not tiny); places given in the
// order of joining fail it.
type DrawTest struct {
	Places    int     `json:"places"` // buyers placed by the draw
	Bins      int     `json:"bins"`
	ChiSquare float64 `json:"chi_square"`
	DF        int     `json:"df"`
	P         float64 `json:"p"`
}

// minDrawTest is the fewest places the draw test is made on: with 2 bins,
// 5 expected in each cell.
const minDrawTest = 20

// testDraw tests the places (place[i]) of buyers who joined in the order
// of joined[i]; ok is false with fewer than minDrawTest. The bins hold
// about 10 buyers per cell expected (the chi-square approximation is good
// there), from 2 to 10 of them.
func testDraw(joined, place []float64) (DrawTest, bool) {
	n := len(joined)
	if n < minDrawTest {
		return DrawTest{Places: n}, false
	}
	k := min(max(int(math.Sqrt(float64(n)/10)), 2), 10)
	rows, cols := rankBins(joined, k), rankBins(place, k)
	table := make([][]int, k)
	for i := range table {
		table[i] = make([]int, k)
	}
	for i := range n {
		table[rows[i]][cols[i]]++
	}
	stat, df := chiSquare(table)
	return DrawTest{Places: n, Bins: k, ChiSquare: stat, DF: df, P: chiSquareP(stat, df)}, true
}

// rankBins puts each value in one of k groups of (nearly) equal size by
// its rank (ties by index).
func rankBins(v []float64, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	bins := make([]int, len(v))
	for rank, i := range idx {
		bins[i] = rank * k / len(v)
	}
	return bins
}
