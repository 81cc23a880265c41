package report

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A sale run twice, half an hour apart, is drawn over its seconds of
// activity: the axis names the first second of each stretch, marks the gap
// with a grid line, and names no time inside the gap.
func TestChartsShowTheSecondsOfActivity(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).Unix()
	var secs []int64
	for i := range int64(20) {
		secs = append(secs, t0+i)
	}
	for i := range int64(10) {
		secs = append(secs, t0+1800+i)
	}
	ticks, gaps := timeTicks(secs)
	if len(gaps) != 1 || gaps[0].Value != 19.5 {
		t.Fatalf("gaps %v, want one between the stretches (19.5)", gaps)
	}
	labels := map[string]bool{}
	for _, tk := range ticks {
		labels[tk.Label] = true
		if tk.Label > "08:00:19" && tk.Label < "08:30:00" {
			t.Errorf("a time inside the gap is named: %s", tk.Label)
		}
	}
	if !labels["08:00:00"] || !labels["08:30:00"] || len(ticks) < 4 || len(ticks) > 12 {
		t.Fatalf("ticks %v: want the start of each stretch among 4 to 12", ticks)
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
	var secs []int64
	for k := range 80 { // 80 seconds of activity, each alone
		secs = append(secs, int64(1000+10*k))
	}
	ticks, gaps := timeTicks(secs)
	if len(gaps) != 79 {
		t.Fatalf("%d gaps marked, want 79", len(gaps))
	}
	for i := 1; i < len(ticks); i++ {
		if ticks[i].Value-ticks[i-1].Value < 5 {
			t.Fatalf("labels at %v and %v, %v apart of 80: they pile up (%d labels)", ticks[i-1].Value, ticks[i].Value, ticks[i].Value-ticks[i-1].Value, len(ticks))
		}
	}
	if len(ticks) < 5 || len(ticks) > 17 {
		t.Fatalf("%d labels over 80 seconds, want a readable handful", len(ticks))
	}
}
