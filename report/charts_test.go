package report

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A sale run twice, half an hour apart, is drawn on a time axis with the
// half hour cut short: the axis names the first second of each run, marks
// the cut with a grid line, names no time inside it, and spaces each run's
// seconds by time.
func TestALongQuietGapIsCutShortAndMarked(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).Unix()
	var secs []int64
	for i := range int64(20) {
		secs = append(secs, t0+i)
	}
	for i := range int64(10) {
		secs = append(secs, t0+1800+i)
	}
	ax := timeAxisOf(secs)
	if len(ax.cuts) != 1 || ax.cuts[0].Value <= ax.x[19] || ax.cuts[0].Value >= ax.x[20] {
		t.Fatalf("cuts %v, want one between the runs (%v, %v)", ax.cuts, ax.x[19], ax.x[20])
	}
	if ax.x[20]-ax.x[19] > 10 || ax.x[29]-ax.x[20] != 9 || ax.x[19] != 19 {
		t.Fatalf("x %v: want each run true to time and the half hour cut to a few seconds' width", ax.x)
	}
	labels := map[string]bool{}
	for i, tk := range ax.ticks {
		labels[tk.Label] = true
		if tk.Label > "08:00:19" && tk.Label < "08:30:00" {
			t.Errorf("a time inside the cut is named: %s", tk.Label)
		}
		if i > 0 && tk.Value <= ax.ticks[i-1].Value {
			t.Errorf("ticks out of order: %v", ax.ticks)
		}
	}
	if !labels["08:00:00"] || !labels["08:30:00"] || len(ax.ticks) < 4 || len(ax.ticks) > 12 {
		t.Fatalf("ticks %v: want the start of each run among 4 to 12", ax.ticks)
	}
	ones := make([]int64, len(secs))
	for i := range ones {
		ones[i] = int64(i % 7)
	}
	svg, err := Chart("purchases.svg", Report{Seconds: secs, Purchases: map[string][]int64{"reserved": ones}})
	if err != nil || !strings.Contains(string(svg), "08:30:00") || strings.Contains(string(svg), "08:15") {
		t.Fatalf("the chart: %v; names 08:30:00 %v, names 08:15 %v", err, strings.Contains(string(svg), "08:30:00"), strings.Contains(string(svg), "08:15"))
	}
}

// TestSecondsAreSpacedByTime (issue 42, finding 8): points were spaced by
// sample, so a quiet minute inside a sale took no room at all. A gap no
// longer than the sale is drawn to its length, named on round times.
func TestSecondsAreSpacedByTime(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).Unix()
	var secs []int64
	for i := range int64(60) {
		secs = append(secs, t0+i)
	}
	for i := range int64(60) {
		secs = append(secs, t0+90+i) // 30 quiet seconds, then a minute more
	}
	ax := timeAxisOf(secs)
	for i := range secs {
		if ax.x[i] != float64(secs[i]-t0) {
			t.Fatalf("second %d drawn at %v, want %d (its time)", i, ax.x[i], secs[i]-t0)
		}
	}
	if len(ax.cuts) != 0 {
		t.Fatalf("a half-minute gap in a two-minute sale cut: %v", ax.cuts)
	}
	var got []string
	for _, tk := range ax.ticks {
		got = append(got, tk.Label)
	}
	if want := "[08:00:00 08:00:30 08:01:00 08:01:30 08:02:00]"; fmt.Sprint(got) != want {
		t.Fatalf("ticks %v, want %s", got, want)
	}
}

// A chart with nothing to draw shows its title and "no data yet", and no
// axis with a made-up scale ("0.00").
func TestAnEmptyChartHasNoMadeUpScale(t *testing.T) {
	svg, err := Chart("latency.svg", Report{})
	if err != nil || !strings.Contains(string(svg), "no data yet") || strings.Contains(string(svg), "0.00") {
		t.Fatalf("empty chart: %v\n%s", err, svg)
	}
}

// TestCountAxesAreWholeFromZero (issue 42, finding 8): purchases and units
// are counted: the axis starts at 0 and has no 0.5 of one.
func TestCountAxesAreWholeFromZero(t *testing.T) {
	for top, want := range map[float64]string{0: "[0]", 3: "[0 1 2 3]", 7: "[0 2 4 6 8]", 9: "[0 2 4 6 8 10]", 23: "[0 5 10 15 20 25]", 1000: "[0 200 400 600 800 1000]", 1e12: "[0 200000000000 400000000000 600000000000 800000000000 1000000000000]"} {
		var got []string
		for _, tk := range wholeTicks(top) {
			got = append(got, tk.Label)
		}
		if fmt.Sprint(got) != want {
			t.Errorf("ticks up to %v: %v, want %s", top, got, want)
		}
	}
}

// TestAGapIsDrawnAsAGap (issue 42, finding 8): each stretch of seconds with
// activity is its own line; one line across a gap said the seconds in it
// had values between its ends.
func TestAGapIsDrawnAsAGap(t *testing.T) {
	got := fmt.Sprint(stretchesOf([]int64{100, 101, 102, 200, 300, 301}))
	if want := "[[0 2] [3 3] [4 5]]"; got != want {
		t.Fatalf("stretches %s, want %s", got, want)
	}
	rep := Report{Seconds: []int64{100, 101, 102, 200, 300, 301}, Salable: map[string][]int64{"0": {5, 4, 3, 3, 2, 1}}}
	svg, err := Chart("stock.svg", rep)
	if err != nil {
		t.Fatal(err)
	}
	// One path per stretch for the one shard's line (and none across), and
	// its stroke in the legend.
	if n := strings.Count(string(svg), `stroke:rgba(0,116,217,1.0)`); n < 4 {
		t.Errorf("shard 0's line drawn in %d pieces, want one per stretch (3) and the legend's: 4", n)
	}
}

// TestAFlatLineIsDrawn (issue 42, finding 8): a latency that stayed at one
// value was shown as "no data yet".
func TestAFlatLineIsDrawn(t *testing.T) {
	rep := Report{Seconds: []int64{100, 101, 102}, P50MS: []int64{1, 1, 1}, P99MS: []int64{1, 1, 1}}
	svg, err := Chart("latency.svg", rep)
	if err != nil || strings.Contains(string(svg), "no data yet") {
		t.Fatalf("a flat latency: %v %.120s", err, svg)
	}
}

// TestManyGapsDoNotPileLabels (issue 42, finding 8): a sale with many
// quiet gaps labelled the start of each stretch, one over another.
func TestManyGapsDoNotPileLabels(t *testing.T) {
	for _, apart := range []int64{10, 1000} { // gaps drawn to time; gaps cut
		var secs []int64
		for k := range int64(80) { // 80 seconds of activity, each alone
			secs = append(secs, 1000+apart*k)
		}
		ax := timeAxisOf(secs)
		span := ax.x[len(ax.x)-1]
		for i := 1; i < len(ax.ticks); i++ {
			if d := ax.ticks[i].Value - ax.ticks[i-1].Value; d < span/20 {
				t.Fatalf("%d s apart: labels at %v and %v of %v: they pile up (%d labels)", apart, ax.ticks[i-1].Value, ax.ticks[i].Value, span, len(ax.ticks))
			}
		}
		if len(ax.ticks) < 4 || len(ax.ticks) > 14 {
			t.Fatalf("%d s apart: %d labels over 80 seconds, want a readable handful: %v", apart, len(ax.ticks), ax.ticks)
		}
	}
}

// TestOneSecondIsDrawn: a report of one second has an axis (go-chart
// draws none from one tick) and a short stroke.
func TestOneSecondIsDrawn(t *testing.T) {
	svg, err := Chart("purchases.svg", Report{Seconds: []int64{100}, Purchases: map[string][]int64{"reserved": {3}}})
	if err != nil || strings.Contains(string(svg), "no data yet") {
		t.Fatalf("one second: %v %.120s", err, svg)
	}
}
