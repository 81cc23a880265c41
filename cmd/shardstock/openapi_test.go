package main

import (
	"bufio"
	"bytes"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/sqlstore"
)

// documentedRoutes lists "METHOD /path" for every operation under paths: in
// api/openapi.yaml (paths at two spaces of indent, methods at four).
func documentedRoutes(doc []byte) map[string]bool {
	out := map[string]bool{}
	pathRe := regexp.MustCompile(`^  (/\S*):\s*$`)
	methodRe := regexp.MustCompile(`^    (get|put|post|delete|patch):`)
	inPaths, cur := false, ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "paths:") {
			inPaths = true
			continue
		}
		if !inPaths {
			continue
		}
		if m := pathRe.FindStringSubmatch(line); m != nil {
			cur = m[1]
		} else if m := methodRe.FindStringSubmatch(line); m != nil && cur != "" {
			out[strings.ToUpper(m[1])+" "+cur] = true
		}
	}
	return out
}

func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	m := NewMain(&config.Config{AdminToken: testToken, UserAuth: "header"}, nil)
	m.orders = order.NewService(order.Config{})
	m.store = &sqlstore.Store{} // (its roles are read as the routes are made, never called)
	m.registry = prometheus.NewRegistry()
	m.buyers = flashsale.NewHandler(flashsale.Config{})
	m.pages = flashsale.NewPages(flashsale.PagesConfig{})
	e := m.router()
	served := map[string]bool{}
	param := regexp.MustCompile(`:(\w+)`)
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound || r.Name == api.MethodNotAllowedRoute {
			continue // echo's own catch-all of a group; the 405 answers
		}
		path := strings.Replace(param.ReplaceAllString(r.Path, "{$1}"), "*", "{path}", 1)
		served[r.Method+" "+path] = true
	}
	documented := documentedRoutes(api.OpenAPI)
	if len(documented) == 0 {
		t.Fatal("no operations found in api/openapi.yaml")
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("served but not documented: %v; documented but not served: %v", missing, extra)
	}
}
