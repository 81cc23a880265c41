package report

import (
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
