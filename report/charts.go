package report

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	chart "github.com/wcharczuk/go-chart/v2"

	"github.com/shardstock/shardstock"
)

// Chart draws one chart of rep by name (purchases.svg, stock.svg,
// latency.svg, orders.svg) as SVG; shardstock.ErrNotFound for another name.
func Chart(name string, rep Report) ([]byte, error) {
	draw, ok := charts[name]
	if !ok {
		return nil, shardstock.ErrNotFound
	}
	return draw(rep)
}

// font is go-chart's default font, parsed once here: go-chart's own lazy
// load (GetDefaultFont) is not safe for charts drawn at once, as the
// operators' page does.
var font = sync.OnceValues(chart.GetDefaultFont)

// The charts of the operators' page, drawn by go-chart as SVG.
var charts = map[string]func(Report) ([]byte, error){
	"purchases.svg": purchasesChart,
	"stock.svg":     stockChart,
	"latency.svg":   latencyChart,
	"orders.svg":    ordersChart,
}

// timeChart draws one line per named series over the report's seconds of
// activity, one after the other: a sale run twice, half an hour apart, is
// two stretches side by side, not two spikes at the ends of a flat line.
// The time axis names the first second, the first of each stretch after a
// gap (marked by a grid line), and evenly spaced seconds between.
// go-chart needs two points and a range to draw: a report with less shows
// its title and "no data yet".
func timeChart(title, yName string, counts bool, secs []int64, names []string, values func(name string) []float64) ([]byte, error) {
	// One line per stretch of seconds with activity: a gap is drawn as a
	// gap (a line across it said the seconds in it had values between).
	// A stretch of one second is a short flat stroke. The legend names
	// each series once.
	var series, legend []chart.Series
	stretches := stretchesOf(secs)
	for i, name := range names {
		ys := values(name)
		style := chart.Style{StrokeColor: chart.GetDefaultColor(i), StrokeWidth: 2}
		named := false
		for _, st := range stretches {
			// A negative value is none (a shard that did not answer): the
			// line breaks there too.
			for lo := st[0]; lo <= st[1]; {
				if ys[lo] < 0 {
					lo++
					continue
				}
				hi := lo
				for hi < st[1] && ys[hi+1] >= 0 {
					hi++
				}
				var xs, sy []float64
				for j := lo; j <= hi; j++ {
					xs, sy = append(xs, float64(j)), append(sy, ys[j])
				}
				if len(xs) == 1 {
					xs, sy = []float64{xs[0] - 0.25, xs[0] + 0.25}, []float64{sy[0], sy[0]}
				}
				s := chart.ContinuousSeries{Name: name, XValues: xs, YValues: sy, Style: style}
				series = append(series, s)
				if !named {
					legend, named = append(legend, s), true
				}
				lo = hi + 1
			}
		}
	}
	if len(series) == 0 || len(secs) == 0 {
		return empty(title)
	}
	f, err := font()
	if err != nil {
		return nil, err
	}
	ticks, gaps := timeTicks(secs)
	// The legend sits between the title and the lines, where it hides none.
	c := chart.Chart{Title: title, Width: 720, Height: 340, Font: f,
		Background: chart.Style{Padding: chart.Box{Top: 100, Left: 10, Right: 10, Bottom: 40}},
		XAxis: chart.XAxis{Ticks: ticks, GridLines: gaps, GridMajorStyle: chart.Style{StrokeColor: chart.ColorAlternateGray, StrokeWidth: 1},
			Range: &chart.ContinuousRange{Min: -0.5, Max: max(float64(len(secs))-0.5, 1)}},
		YAxis:  chart.YAxis{Name: yName, ValueFormatter: intFormatter},
		Series: series}
	top := 0.0
	for _, sr := range series {
		for _, y := range sr.(chart.ContinuousSeries).YValues {
			top = max(top, y)
		}
	}
	switch {
	case counts:
		// Counted things: an axis from 0, in whole numbers (it showed
		// 0.5 of a purchase, and units from wherever the lines began).
		ticks := wholeTicks(max(top, 1))
		c.YAxis.Ticks = ticks
		c.YAxis.Range = &chart.ContinuousRange{Min: 0, Max: ticks[len(ticks)-1].Value}
	case flat(series):
		// One value throughout (go-chart cannot scale a zero range): an
		// axis from 0 past it, not "no data".
		c.YAxis.Range = &chart.ContinuousRange{Min: 0, Max: max(1, 2*top)}
	}
	named := c
	named.Series = legend
	c.Elements = []chart.Renderable{chart.LegendThin(&named)}
	var b bytes.Buffer
	if err := c.Render(chart.SVG, &b); err != nil {
		return nil, fmt.Errorf("chart %s: %w", title, err)
	}
	return b.Bytes(), nil
}

// stretchesOf are the runs of consecutive seconds in secs, as index
// ranges [first, last].
func stretchesOf(secs []int64) [][2]int {
	var out [][2]int
	for i := range secs {
		if i == 0 || secs[i]-secs[i-1] > 1 {
			out = append(out, [2]int{i, i})
		}
		out[len(out)-1][1] = i
	}
	return out
}

// timeTicks labels the seconds of activity: the first, the first after
// each gap (with a grid line there), and about eight in all, evenly spaced,
// where they leave room.
func timeTicks(secs []int64) ([]chart.Tick, []chart.GridLine) {
	label := func(i int) chart.Tick {
		return chart.Tick{Value: float64(i), Label: time.Unix(secs[i], 0).UTC().Format("15:04:05")}
	}
	marked := map[int]bool{0: true}
	var gaps []chart.GridLine
	step := max(len(secs)/8, 1)
	room := max(step/2, 1) // no label this close to another
	last := 0              // the last labelled index
	for i := 1; i < len(secs); i++ {
		if secs[i]-secs[i-1] > 1 {
			gaps = append(gaps, chart.GridLine{Value: float64(i) - 0.5})
			if i-last >= room { // (every gap's start labelled piled its labels on each other)
				marked[i], last = true, i
			}
		}
	}
	for i := step; i < len(secs); i += step {
		near := false
		for j := max(i-room+1, 0); j < min(i+room, len(secs)); j++ {
			near = near || marked[j]
		}
		if !near {
			marked[i] = true
		}
	}
	var ticks []chart.Tick
	for i := range secs {
		if marked[i] {
			ticks = append(ticks, label(i))
		}
	}
	if len(secs) == 1 {
		ticks = append(ticks, chart.Tick{Value: 1, Label: ""})
	}
	return ticks, gaps
}

// flat reports whether every series is one value (go-chart cannot scale a
// zero range).
func flat(series []chart.Series) bool {
	lo, hi := 0.0, 0.0
	first := true
	for _, s := range series {
		for _, y := range s.(chart.ContinuousSeries).YValues {
			if first {
				lo, hi, first = y, y, false
			}
			lo, hi = min(lo, y), max(hi, y)
		}
	}
	return lo == hi
}

// intFormatter shows whole numbers as such, and small fractional ticks
// (a scale of a few units) with one decimal.
func intFormatter(v any) string {
	f, ok := v.(float64)
	if !ok {
		return fmt.Sprint(v)
	}
	if f == float64(int64(f)) || f >= 10 || f <= -10 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

func floats(xs []int64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func purchasesChart(r Report) ([]byte, error) {
	return timeChart("Purchases per second, by answer", "per second", true, r.Seconds, sortedKeys(r.Purchases),
		func(name string) []float64 { return floats(r.Purchases[name]) })
}

func stockChart(r Report) ([]byte, error) {
	names := sortedKeys(r.Salable)
	label := func(shard string) string {
		var notes []string
		for i, v := range r.Salable[shard] {
			if v == Down {
				notes = append(notes, "down "+time.Unix(r.Seconds[i], 0).UTC().Format("15:04:05"))
				break
			}
		}
		if at, ok := r.SoldOutAt[shard]; ok {
			notes = append(notes, "sold out "+time.Unix(at, 0).UTC().Format("15:04:05"))
		}
		if len(notes) == 0 {
			return "shard " + shard
		}
		return "shard " + shard + " (" + strings.Join(notes, ", ") + ")"
	}
	labels := make([]string, len(names))
	byLabel := map[string]string{}
	for i, n := range names {
		labels[i] = label(n)
		byLabel[labels[i]] = n
	}
	return timeChart("Salable units per shard", "units", true, r.Seconds, labels, func(l string) []float64 {
		return floats(r.Salable[byLabel[l]]) // (Down: the line breaks)
	})
}

func latencyChart(r Report) ([]byte, error) {
	return timeChart("Answer latency (ms)", "ms", false, r.Seconds, []string{"p50", "p99"}, func(name string) []float64 {
		if name == "p50" {
			return floats(r.P50MS)
		}
		return floats(r.P99MS)
	})
}

func ordersChart(r Report) ([]byte, error) {
	var bars []chart.Value
	for i, status := range shardstock.OrderStatuses {
		bars = append(bars, chart.Value{Label: fmt.Sprintf("%s %d", status, r.Orders[status]), Value: float64(r.Orders[status]),
			Style: chart.Style{FillColor: chart.GetDefaultColor(i), StrokeColor: chart.GetDefaultColor(i)}})
	}
	total := 0.0
	for _, b := range bars {
		total += b.Value
	}
	if total == 0 {
		return empty("Orders by status")
	}
	f, err := font()
	if err != nil {
		return nil, err
	}
	c := chart.BarChart{Title: "Orders by status", Width: 720, Height: 300, BarWidth: 90, Font: f,
		Background: chart.Style{Padding: chart.Box{Top: 40}},
		YAxis:      chart.YAxis{ValueFormatter: intFormatter, Ticks: countTicks(bars)}, Bars: bars}
	var b bytes.Buffer
	if err := c.Render(chart.SVG, &b); err != nil {
		return nil, fmt.Errorf("chart orders: %w", err)
	}
	return b.Bytes(), nil
}

// countTicks are whole-number ticks from 0 to the tallest bar (orders are
// counted: no 0.8 of an order on the axis).
func countTicks(bars []chart.Value) []chart.Tick {
	top := 0.0
	for _, b := range bars {
		top = max(top, b.Value)
	}
	return wholeTicks(top)
}

// wholeTicks are about five whole-number ticks from 0 to top or just past
// it, a step of 1, 2 or 5 times a power of ten.
func wholeTicks(top float64) []chart.Tick {
	step := int64(1)
	for k := 0; float64(step)*5 < top; k++ { // 1, 2, 5, 10, 20, 50, ...
		if k%3 == 1 {
			step = step / 2 * 5
		} else {
			step *= 2
		}
	}
	var ticks []chart.Tick
	for v := int64(0); ; v += step {
		ticks = append(ticks, chart.Tick{Value: float64(v), Label: strconv.FormatInt(v, 10)})
		if float64(v) >= top {
			return ticks
		}
	}
}

// empty is a chart with nothing to draw yet: its title and a note, no
// axes (their made-up 0.00 to 1.00 scale said nothing).
func empty(title string) ([]byte, error) {
	f, err := font()
	if err != nil {
		return nil, err
	}
	c := chart.Chart{Title: title + " (no data yet)", Width: 720, Height: 300, Font: f,
		XAxis: chart.XAxis{Style: chart.Hidden()}, YAxis: chart.YAxis{Style: chart.Hidden()}, YAxisSecondary: chart.YAxis{Style: chart.Hidden()},
		Series: []chart.Series{chart.ContinuousSeries{Name: "no data yet", XValues: []float64{0, 1}, YValues: []float64{0, 1},
			Style: chart.Style{StrokeWidth: 0.01, StrokeColor: chart.ColorTransparent}}}}
	var b bytes.Buffer
	if err := c.Render(chart.SVG, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
