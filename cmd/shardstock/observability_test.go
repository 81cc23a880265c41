package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestPrometheusRules runs promtool on the shipped config and rules, and
// the rules' unit tests (deploy/prometheus/rules_test.yml).
func TestPrometheusRules(t *testing.T) {
	runDeploy(t, "prometheus.sh", "check")
}

// TestPrometheusScrapesShardstock starts a real Prometheus against a running
// server and reads a per-shard series back through Prometheus's HTTP API.
func TestPrometheusScrapesShardstock(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "obs", `{"stock":30}`)
	buy(t, base, "obs", "o", 7)
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "prometheus.sh", "start", "--targets", strings.TrimPrefix(base, "http://"), "--port", port, "--dir", dir, "--interval", "1s")
	t.Cleanup(func() { runDeploy(t, "prometheus.sh", "stop", "--dir", dir) })
	want := productStatus(t, base, "obs").Shards[0]
	q := `shardstock_stock_units{product="obs",shard="0",state="locked"}`
	waitFor(t, 30*time.Second, "Prometheus has the series", func() (bool, string) {
		rep := do(t, "GET", "http://127.0.0.1:"+port+"/api/v1/query?query="+url.QueryEscape(q), "")
		var res struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(rep.raw), &res) != nil || len(res.Data.Result) != 1 {
			return false, rep.raw
		}
		v, _ := strconv.ParseInt(fmt.Sprint(res.Data.Result[0].Value[1]), 10, 64)
		return v == *want.Locked, rep.raw
	})
}

// exportedNames lists the metric families the server exports and the
// recording rules of deploy/prometheus/rules.yml.
func exportedNames(t *testing.T, base string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(do(t, "GET", base+"/metrics", "").raw, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	rules, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`record: (\S+)`).FindAllStringSubmatch(string(rules), -1) {
		names[m[1]] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\bshardstock[_:][A-Za-z0-9_:]*`)

// known reports whether a name used in a query is exported (histogram
// series carry a suffix on their family name).
func known(names map[string]bool, n string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if strings.HasSuffix(n, suffix) && names[strings.TrimSuffix(n, suffix)] {
			return true
		}
	}
	return false
}

// TestDashboardAndRulesNameExportedMetrics checks every query of the
// Grafana dashboard and every alert against what the server exports.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	r := shardtest.Start(t, 3)
	spool := t.TempDir()
	m := startServer(t, r.URLs(), func(c *config.Config) { c.SpoolDir, c.SpoolEntries, c.SpoolBytes = spool, 10, 1<<20 })
	putProduct(t, m.URL(), "dash", `{"stock":3}`)
	if rep := adminDo(t, "PUT", m.URL()+"/admin/v1/products/dash/queue", `{"mode":"fifo","rate":1,"window_seconds":60}`); rep.status != 200 {
		t.Fatalf("a waiting room (its metrics): %d %s", rep.status, rep.raw)
	}
	names := exportedNames(t, m.URL())
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "shardstock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v", err)
	}
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				checked++
				if !known(names, n) {
					t.Errorf("panel %q queries %s, which the server does not export", p.Title, n)
				}
			}
		}
	}
	rules, _ := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "prometheus", "rules.yml"))
	for _, m := range regexp.MustCompile(`expr: (.*)`).FindAllStringSubmatch(string(rules), -1) {
		for _, n := range metricName.FindAllString(m[1], -1) {
			checked++
			if !known(names, n) {
				t.Errorf("rule %q uses %s, which the server does not export", m[1], n)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric names found in the dashboard and rules", checked)
	}
}
