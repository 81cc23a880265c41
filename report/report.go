package report

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

// Report is a product's sale, second by second (GET
// /admin/v1/products/{id}/report). Every series is aligned with Seconds.
type Report struct {
	Product string `json:"product"`
	// Seconds are the unix seconds with activity, in order.
	Seconds []int64 `json:"seconds"`
	// Purchases counts the answers of each second by outcome.
	Purchases map[string][]int64 `json:"purchases"`
	// P50MS and P99MS are the answers' latency percentiles (ms, the upper
	// bound of the histogram bucket; 0: no purchase that second).
	P50MS []int64 `json:"p50_ms"`
	P99MS []int64 `json:"p99_ms"`
	// Salable is each shard's salable units at each second (a sample
	// holds until the next; before a shard's first sample, that sample;
	// Down while the shard did not answer), and SoldOutAt the second each
	// shard first reached 0 (absent: never).
	Salable   map[string][]int64 `json:"salable"`
	SoldOutAt map[string]int64   `json:"sold_out_at"`
	// Orders counts the product's orders by status now.
	Orders map[shardstock.OrderStatus]int64 `json:"orders"`
}

// Down is a shard's salable units at a second it did not answer (a
// down shard's line stopped flat at its last count, as if it still sold);
// noSample, a second with no sample of it.
const (
	Down     = -2
	noSample = -1
)

// Build assembles a Report from the recorded seconds and the order counts.
func Build(product string, rows []shardstock.SaleSecond, orders map[shardstock.OrderStatus]int64) Report {
	rep := Report{Product: product, Purchases: map[string][]int64{}, Salable: map[string][]int64{},
		SoldOutAt: map[string]int64{}, Orders: orders, Seconds: []int64{}, P50MS: []int64{}, P99MS: []int64{}}
	if rep.Orders == nil {
		rep.Orders = map[shardstock.OrderStatus]int64{}
	}
	index := map[int64]int{}
	for _, r := range rows {
		if _, ok := index[r.Second]; !ok {
			index[r.Second] = len(rep.Seconds)
			rep.Seconds = append(rep.Seconds, r.Second)
		}
	}
	n := len(rep.Seconds)
	hist := make([][]int64, n)
	series := func(m map[string][]int64, label string, fill int64) []int64 {
		s, ok := m[label]
		if !ok {
			s = make([]int64, n)
			for i := range s {
				s[i] = fill
			}
			m[label] = s
		}
		return s
	}
	for _, r := range rows {
		i := index[r.Second]
		switch r.Kind {
		case shardstock.KindOutcome:
			series(rep.Purchases, r.Label, 0)[i] += r.N
		case shardstock.KindLatency:
			b, err := strconv.Atoi(r.Label)
			if err != nil || b < 0 || b > len(LatencyBuckets) {
				continue
			}
			if hist[i] == nil {
				hist[i] = make([]int64, len(LatencyBuckets)+1)
			}
			hist[i][b] += r.N
		case shardstock.KindSalable:
			series(rep.Salable, r.Label, noSample)[i] = r.N
		}
	}
	for shard, s := range rep.Salable { // carry each sample forward (and the first back); note the first 0
		last := int64(noSample)
		for _, v := range s {
			if v != noSample {
				last = v
				break
			}
		}
		for i := range s {
			if s[i] == noSample {
				s[i] = last
			}
			last = s[i]
			if s[i] == 0 {
				if _, seen := rep.SoldOutAt[shard]; !seen {
					rep.SoldOutAt[shard] = rep.Seconds[i]
				}
			}
		}
	}
	for i := range n {
		rep.P50MS = append(rep.P50MS, percentile(hist[i], 0.50))
		rep.P99MS = append(rep.P99MS, percentile(hist[i], 0.99))
	}
	return rep
}

// percentile is the upper bound (ms) of the bucket holding quantile q of
// hist (the last bucket: twice the last bound); 0 for no purchases.
func percentile(hist []int64, q float64) int64 {
	var total int64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := int64(q*float64(total) + 0.999999)
	var cum int64
	for b, n := range hist {
		if cum += n; cum >= want {
			if b < len(LatencyBuckets) {
				return LatencyBuckets[b]
			}
			break
		}
	}
	return 2 * LatencyBuckets[len(LatencyBuckets)-1]
}

// Products finds a product (inventory.Catalog): unknown ids are 404.
type Products interface {
	Product(ctx context.Context, id string) (*shardstock.Product, error)
}

// Handler serves the report and its charts on the admin API (the routes are
// listed in cmd/shardstock/routes.go).
type Handler struct {
	Store    ReportStore
	Products Products
	// Orders counts a product's orders by status (sqlstore.Orders).
	Orders func(ctx context.Context, product string) (map[shardstock.OrderStatus]int64, error)
}

// GetReport answers the report as JSON.
func (h Handler) GetReport(c echo.Context) error {
	rep, err := h.report(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// GetChart answers one of the report's charts as SVG (:chart is
// purchases.svg, stock.svg, latency.svg or orders.svg).
func (h Handler) GetChart(c echo.Context) error {
	if _, ok := charts[c.Param("chart")]; !ok {
		return shardstock.ErrNotFound
	}
	rep, err := h.report(c)
	if err != nil {
		return err
	}
	svg, err := Chart(c.Param("chart"), rep)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "image/svg+xml", svg)
}

func (h Handler) report(c echo.Context) (Report, error) {
	ctx := c.Request().Context()
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return Report{}, shardstock.ErrNotFound
	}
	if _, err := h.Products.Product(ctx, id); err != nil {
		return Report{}, err
	}
	rows, err := h.Store.SaleSeconds(ctx, id)
	if err != nil {
		return Report{}, err
	}
	orders, err := h.Orders(ctx, id)
	if err != nil {
		return Report{}, err
	}
	return Build(id, rows, orders), nil
}

// sortedKeys returns m's keys in order (stable chart colours and legends).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func times(secs []int64) []time.Time {
	out := make([]time.Time, len(secs))
	for i, s := range secs {
		out[i] = time.Unix(s, 0).UTC()
	}
	return out
}
