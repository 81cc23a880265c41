package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/client"
	"github.com/shardstock/shardstock/loadgen"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// crowdSale defines product with stock units, on sale from startIn, and
// the waiting room q, then runs loadgen's crowd mode against it with args
// and returns its report (logged as text).
func crowdSale(t *testing.T, m *Main, product string, stock int, startIn time.Duration, q api.QueueDefinition, args ...string) loadgen.Report {
	t.Helper()
	starts := time.Now().Add(startIn).UTC().Format(time.RFC3339Nano)
	if rep := putProduct(t, m.URL(), product, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"starts_at":%q}`, stock, starts)); rep.status != 201 {
		t.Fatalf("define %s: %d %s", product, rep.status, rep.raw)
	}
	cl := &client.Client{URL: m.URL(), Token: testToken}
	if _, err := cl.Queues().Define(context.Background(), product, q); err != nil {
		t.Fatalf("define the queue of %s: %v", product, err)
	}
	// The room counts a product's units left from the shards' snapshot,
	// read at most once a second: one read before the product existed
	// shows none of it, which the room takes for a sell-out and tells the
	// buyers who join then. Start once the room has the units.
	waitFor(t, 5*time.Second, "the room knows the units of "+product, func() (bool, string) {
		u, err := m.unitsLeft(context.Background(), product)
		return err == nil && u.Complete && u.Salable == int64(stock), fmt.Sprint(u, err)
	})
	if err := m.room.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"loadgen", "--mode", "crowd", "--url", m.URL(), "--product", product, "--admin-token", testToken,
		"--conns", "32", "--duration", "25s", "--json", "--progress=false", "--pay"}, args...), env(nil), &stdout, &stderr)
	var rep loadgen.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 || rep.Crowd == nil {
		t.Fatalf("exit %d, report %s %v; stderr %s", code, stdout.String(), err, stderr.String())
	}
	var text bytes.Buffer
	loadgen.PrintReport(&text, &rep)
	t.Logf("%s:\n%s", product, text.String())
	return rep
}

// checkCrowd asserts what every crowd sale ends with: each buyer joined;
// the stock went to as many buyers, each answered 200 once; every other
// buyer was told the product sold out, none before the last unit was
// asked for, within 5 s of the last sale; no oversell.
func checkCrowd(t *testing.T, rep loadgen.Report, buyers, stock int) {
	t.Helper()
	c := rep.Crowd
	if !rep.OK || rep.Errors != 0 || c.Joined != buyers {
		t.Errorf("invariants %v (%v), %d transport errors, %d of %d joined", rep.OK, rep.Invariants, rep.Errors, c.Joined, buyers)
	}
	if c.Outcomes[loadgen.OutcomeBought] != stock || c.Outcomes[loadgen.OutcomeSoldOut] != buyers-stock || rep.Statuses["200"] != int64(stock) {
		t.Errorf("outcomes %v, purchases %v: want %d bought and %d told sold out", c.Outcomes, rep.Statuses, stock, buyers-stock)
	}
	n := c.SoldOut
	if n.NotBought != buyers-stock || n.Told != n.NotBought || n.Early != 0 || n.Ms["max"] > 5000 {
		t.Errorf("sold-out notice %+v: want all %d told, none before the last sale, within 5 s", n, buyers-stock)
	}
	if c.Looks.Looks == 0 || c.Looks.PerSecond <= 0 || c.Looks.Peak > 1000 {
		t.Errorf("looks %+v: want some, at most the room's 1000 a second", c.Looks)
	}
}

// TestLoadgenCrowd runs loadgen's crowd mode against a coordinator on
// real shards: buyers join a waiting room before the sale's start, look
// at the pace it sets and buy when admitted. A fifo line sells in the
// order of joining (Kendall tau ≥ 0.99, places exactly in join order, which
// the draw test rejects); a draw's places pass the draw test; a line with
// a proof of work costs each join a solve; in each, every buyer left over
// learns the sale is over.
func TestLoadgenCrowd(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	t.Run("fifo", func(t *testing.T) {
		const buyers, stock = 120, 40
		rep := crowdSale(t, m, "crowd-fifo", stock, 3*time.Second,
			api.QueueDefinition{Mode: "fifo", Rate: 12, LeadSeconds: 600, WindowSeconds: 30},
			"--buyers", fmt.Sprint(buyers), "--join-rate", "60")
		checkCrowd(t, rep, buyers, stock)
		f := rep.Crowd.Fairness
		if f.JoinPurchase == nil || *f.JoinPurchase < 0.99 {
			t.Errorf("join → purchase tau %s, want at least 0.99", loadgen.FmtTau(f.JoinPurchase))
		}
		if f.JoinPlace == nil || *f.JoinPlace != 1 {
			t.Errorf("join → place tau %s, want 1: joins answered one after another get places in that order", loadgen.FmtTau(f.JoinPlace))
		}
		if f.Places == nil || f.Places.P >= loadgen.DrawP {
			t.Errorf("places against join order %+v: a fifo line's places follow the join order, and the draw test must reject them", f.Places)
		}
	})
	t.Run("draw", func(t *testing.T) {
		const buyers, stock = 200, 50
		// Every join before the start (2 s of them): all 200 are drawn.
		rep := crowdSale(t, m, "crowd-draw", stock, 5*time.Second,
			api.QueueDefinition{Mode: "draw", Rate: 25, LeadSeconds: 600, WindowSeconds: 30},
			"--buyers", fmt.Sprint(buyers), "--join-rate", "100", "--join-batch", "2")
		checkCrowd(t, rep, buyers, stock)
		d := rep.Crowd.Fairness.Places
		if d == nil || d.Places != buyers || d.P <= loadgen.DrawP {
			t.Errorf("places against join order %+v: want all %d drawn places, p above %g", d, buyers, loadgen.DrawP)
		}
	})
	t.Run("work", func(t *testing.T) {
		const buyers, stock = 20, 10
		rep := crowdSale(t, m, "crowd-work", stock, 2*time.Second,
			api.QueueDefinition{Mode: "fifo", Rate: 20, LeadSeconds: 600, WindowSeconds: 30, Difficulty: 10},
			"--buyers", fmt.Sprint(buyers), "--join-rate", "50")
		checkCrowd(t, rep, buyers, stock)
		w := rep.Crowd.Work
		if w == nil || w.Difficulty != 10 || w.Solves != buyers || w.Ms["p50"] <= 0 {
			t.Errorf("work %+v: want %d solves of difficulty 10 taking some time", w, buyers)
		}
	})
}
