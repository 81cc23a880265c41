package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardstock/shardstock"
)

type counter struct {
	counts map[shardstock.OrderStatus]int64
	err    error
}

func (c *counter) CountAllByStatus(context.Context) (map[shardstock.OrderStatus]int64, error) {
	return c.counts, c.err
}

// threePaid is the exposition of counts with three paid orders.
const threePaid = `
# HELP shardstock_orders Order rows by status.
# TYPE shardstock_orders gauge
shardstock_orders{status="awaiting_payment"} 0
shardstock_orders{status="cancelled"} 0
shardstock_orders{status="failed"} 0
shardstock_orders{status="paid"} 3
`

// A count the database does not answer leaves the scrape whole: the last
// counts read, or none, never an error that fails every other metric.
func TestOrderCountsThatFailDoNotFailTheScrape(t *testing.T) {
	db := &counter{err: errors.New("timeout")}
	var failed []error
	reg := prometheus.NewRegistry()
	reg.MustRegister(&OrderCollector{Orders: db, TTL: 0, Failed: func(err error) { failed = append(failed, err) }})
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "other", Help: "another metric"})
	other.Set(7)
	reg.MustRegister(other)

	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Fatalf("no counts read yet: %d metrics, %v; want the other one alone", n, err)
	}
	db.counts, db.err = map[shardstock.OrderStatus]int64{"paid": 3}, nil
	if err := testutil.GatherAndCompare(reg, strings.NewReader(threePaid), "shardstock_orders"); err != nil {
		t.Fatal(err)
	}
	db.counts, db.err = nil, errors.New("timeout")
	time.Sleep(time.Millisecond)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(threePaid), "shardstock_orders"); err != nil {
		t.Fatalf("after a failed count: %v (want the last counts)", err)
	}
	if len(failed) != 2 {
		t.Fatalf("told of %d failures, want 2", len(failed))
	}
}
