package report

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
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

// timeChart draws one line per named series on a time axis: seconds are
// spaced by the time between them, and a quiet gap is drawn as a gap (no
// line across it). A gap much longer than the sale's activity (a sale run
// twice, half an hour apart) is cut short and marked with a grid line, the
// time after it named, so the two runs are not two spikes at the ends of a
// flat line. go-chart needs two points and a range to draw: a report with
// less shows its title and "no data yet".
func timeChart(title, yName string, counts bool, secs []int64, names []string, values func(name string) []float64) ([]byte, error) {
	ax := timeAxisOf(secs)
	// One line per stretch of consecutive seconds: a gap is drawn as a gap
	// (a line across it said the seconds in it had values between). A
	// stretch of one second is a short flat stroke. The legend names each
	// series once.
	var series, legend []chart.Series
	for i, name := range names {
		ys := values(name)
		style := chart.Style{StrokeColor: chart.GetDefaultColor(i), StrokeWidth: 2}
		named := false
		for _, st := range stretchesOf(secs) {
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
					xs, sy = append(xs, ax.x[j]), append(sy, ys[j])
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
	// The legend sits between the title and the lines, where it hides none.
	// Grid lines mark the cuts only (with none, go-chart would draw one at
	// every other tick, which read as cuts).
	grid := chart.Style{StrokeColor: chart.ColorAlternateGray, StrokeWidth: 1}
	if len(ax.cuts) == 0 {
		grid = chart.Hidden()
	}
	// go-chart spans the axis from the first tick to the last when ticks
	// are given: unnamed ones at both ends keep every line inside it.
	lo, hi := -0.5, max(ax.x[len(ax.x)-1]+0.5, 1)
	ticks := append(append([]chart.Tick{{Value: lo}}, ax.ticks...), chart.Tick{Value: hi})
	c := chart.Chart{Title: title, Width: 720, Height: 340, Font: f,
		Background: chart.Style{Padding: chart.Box{Top: 100, Left: 10, Right: 10, Bottom: 40}},
		XAxis: chart.XAxis{Ticks: ticks, GridLines: ax.cuts, GridMajorStyle: grid, GridMinorStyle: chart.Hidden(),
			Range: &chart.ContinuousRange{Min: lo, Max: hi}},
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

// timeAxis places a report's seconds on the chart's x axis.
type timeAxis struct {
	x     []float64        // where each second is drawn
	ticks []chart.Tick     // the times named
	cuts  []chart.GridLine // where a long quiet gap was cut short
}

// A piece of the axis drawn true to time: second t is at x0 + t - t0, for
// t0 <= t <= t1.
type piece struct {
	t0, t1 int64
	x0     float64
}

// tickSteps are the spacings the axis may name times at.
var tickSteps = []int64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}

// timeAxisOf spaces secs by time. A quiet gap longer than all the seconds
// with activity together (and longer than a minute) is drawn as a cut of fixed
// width, marked by a grid line; the first second after it is always named
// (where it leaves room). The other names fall on round times (every 10 s,
// every minute, ...), about eight in all, none crowding another.
func timeAxisOf(secs []int64) timeAxis {
	var ax timeAxis
	if len(secs) == 0 {
		return ax
	}
	longest := max(int64(len(secs)), 60)
	width := float64(max(int64(len(secs))/20, 3))
	pieces := []piece{{t0: secs[0], t1: secs[0]}}
	ax.x = make([]float64, len(secs))
	for i, t := range secs {
		p := &pieces[len(pieces)-1]
		if i > 0 && t-secs[i-1] > longest {
			end := p.x0 + float64(p.t1-p.t0)
			ax.cuts = append(ax.cuts, chart.GridLine{Value: end + width/2})
			pieces = append(pieces, piece{t0: t, t1: t, x0: end + width})
			p = &pieces[len(pieces)-1]
		}
		p.t1 = t
		ax.x[i] = p.x0 + float64(t-p.t0)
	}
	span := ax.x[len(ax.x)-1]
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/float64(s) <= 8 {
			step = s
			break
		}
	}
	layout := "15:04:05"
	if step >= 60 {
		layout = "15:04"
	}
	room := 0.75 * float64(step)
	name := func(x float64, t int64) chart.Tick {
		return chart.Tick{Value: x, Label: time.Unix(t, 0).UTC().Format(layout)}
	}
	free := func(x float64) bool {
		for _, tk := range ax.ticks {
			if math.Abs(tk.Value-x) < room {
				return false
			}
		}
		return true
	}
	// The start of the axis and of each piece after a cut come first: a
	// reader needs them to see where the time jumped.
	for _, p := range pieces {
		if free(p.x0) {
			ax.ticks = append(ax.ticks, chart.Tick{Value: p.x0, Label: time.Unix(p.t0, 0).UTC().Format("15:04:05")})
		}
	}
	for _, p := range pieces {
		for t := (p.t0 + step - 1) / step * step; t <= p.t1; t += step {
			if x := p.x0 + float64(t-p.t0); free(x) {
				ax.ticks = append(ax.ticks, name(x, t))
			}
		}
	}
	slices.SortFunc(ax.ticks, func(a, b chart.Tick) int { return cmp.Compare(a.Value, b.Value) })
	return ax
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
