package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardstock/shardstock/api"
)

// sent is what the server received.
type sent struct {
	method, path, body, auth, contentType, key, user, place string
}

// recorder answers status with answer (and headers, name and value pairs)
// and records each request.
func recorder(t *testing.T, status int, answer string, headers ...string) (*Client, *sent) {
	got := &sent{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*got = sent{r.Method, r.URL.EscapedPath(), string(b), r.Header.Get("Authorization"),
			r.Header.Get("Content-Type"), r.Header.Get(api.IdempotencyKeyHeader), r.Header.Get(api.UserIDHeader),
			r.Header.Get(api.QueueTokenHeader)}
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return &Client{URL: srv.URL, Token: "tok"}, got
}

// Each admin call sends the method, path and body the server mounts and
// decodes, with the bearer token, and returns the answer as it came.
func TestAdminCallsSendTheRoutesBodies(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		call func(*Client, context.Context) (json.RawMessage, error)
		want sent
	}{
		{"products", (*Client).Products, sent{method: "GET", path: "/admin/v1/products"}},
		{"product", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Product(ctx, "lamp") },
			sent{method: "GET", path: "/admin/v1/products/lamp"}},
		{"shards", (*Client).Shards, sent{method: "GET", path: "/admin/v1/shards"}},
		{"pause", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Pause(ctx, "lamp") },
			sent{method: "POST", path: "/admin/v1/products/lamp/pause"}},
		{"resume", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Resume(ctx, "lamp") },
			sent{method: "POST", path: "/admin/v1/products/lamp/resume"}},
		{"archive", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Archive(ctx, "lamp") },
			sent{method: "POST", path: "/admin/v1/products/lamp/archive"}},
		{"rebalance", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Rebalance(ctx, "lamp") },
			sent{method: "POST", path: "/admin/v1/products/lamp/rebalance"}},
		{"reconcile", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Reconcile(ctx, "lamp") },
			sent{method: "GET", path: "/admin/v1/products/lamp/reconcile"}},
		{"add with a key", func(c *Client, ctx context.Context) (json.RawMessage, error) {
			return c.ChangeStock(ctx, "lamp", api.StockChange{Add: 30}, "k-1")
		}, sent{method: "POST", path: "/admin/v1/products/lamp/stock", body: `{"add":30}`, key: "k-1"}},
		{"remove", func(c *Client, ctx context.Context) (json.RawMessage, error) {
			return c.ChangeStock(ctx, "lamp", api.StockChange{Remove: 5}, "")
		}, sent{method: "POST", path: "/admin/v1/products/lamp/stock", body: `{"remove":5}`}},
		{"end", func(c *Client, ctx context.Context) (json.RawMessage, error) {
			return c.MoveWindow(ctx, "lamp", api.SaleWindow{EndsAt: &api.OptionalTime{Time: end}})
		}, sent{method: "PATCH", path: "/admin/v1/products/lamp", body: `{"ends_at":"2026-11-30T12:00:00Z"}`}},
		{"drain", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Drain(ctx, 2, true) },
			sent{method: "POST", path: "/admin/v1/shards/2/drain", body: `{"drained":true}`}},
		{"undrain", func(c *Client, ctx context.Context) (json.RawMessage, error) { return c.Drain(ctx, 2, false) },
			sent{method: "POST", path: "/admin/v1/shards/2/drain", body: `{"drained":false}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, got := recorder(t, http.StatusOK, `{"id":"lamp"}`)
			answer, err := tc.call(c, context.Background())
			if err != nil || string(answer) != `{"id":"lamp"}` {
				t.Fatalf("answered %s, %v; want the server's body as it came", answer, err)
			}
			tc.want.auth = "Bearer tok"
			if tc.want.body != "" {
				tc.want.contentType = "application/json"
			}
			if *got != tc.want {
				t.Fatalf("sent %+v, want %+v", *got, tc.want)
			}
		})
	}
}

// An answer outside 2xx is an *Error with the API's error body, or with
// the status alone when the body is not one.
func TestAdminRefusalIsAnError(t *testing.T) {
	cases := []struct {
		name, body string
		want       Error
	}{
		{"error body", `{"error":"conflict","message":"the sale has not ended"}`, Error{409, "conflict", "the sale has not ended"}},
		{"not an error body", `<html>busy</html>`, Error{409, "", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := recorder(t, http.StatusConflict, tc.body)
			_, err := c.Archive(context.Background(), "lamp")
			var e *Error
			if !errors.As(err, &e) || *e != tc.want {
				t.Fatalf("error %v, want %+v", err, tc.want)
			}
		})
	}
}

// Purchase sends the buyer's purchase as the user and returns any status
// the server answers, with no error.
func TestPurchaseReturnsTheStatus(t *testing.T) {
	c, got := recorder(t, http.StatusGone, `{"error":"sold_out"}`)
	status, err := c.Purchase(context.Background(), "lamp", "lg-7")
	want := sent{method: "POST", path: "/api/v1/products/lamp/purchase", user: "lg-7"}
	if err != nil || status != http.StatusGone || *got != want {
		t.Fatalf("Purchase: %d, %v, sent %+v; want 410, nil, %+v", status, err, *got, want)
	}
}

// JoinQueue sends the proof of work, when there is one, as the buyer, and
// returns the place with the Retry-After it came with.
func TestJoinQueueSendsTheWork(t *testing.T) {
	cases := []struct {
		name, work string
		want       sent
	}{
		{"no work", "", sent{method: "POST", path: "/api/v1/products/lamp/queue", user: "lg-3"}},
		{"work", "1021", sent{method: "POST", path: "/api/v1/products/lamp/queue", user: "lg-3",
			body: `{"work":"1021"}`, contentType: "application/json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, got := recorder(t, http.StatusOK, `{"status":"waiting","mode":"fifo","position":7,"serving":2,"ahead":5,"wait_seconds":3,"token":"tk"}`,
				"Retry-After", "2")
			p, err := c.JoinQueue(context.Background(), "lamp", "lg-3", tc.work)
			want := Place{Status: "waiting", Mode: "fifo", Position: 7, Serving: 2, Ahead: 5, WaitSeconds: 3, Token: "tk", RetryAfter: 2 * time.Second}
			if err != nil || p != want || *got != tc.want {
				t.Fatalf("JoinQueue: %+v, %v, sent %+v; want %+v, sent %+v", p, err, *got, want, tc.want)
			}
		})
	}
}

// LookQueue sends the buyer's place; a refusal is an *Error with the
// API's code, and the line's public face comes without a token.
func TestLookQueueSendsThePlace(t *testing.T) {
	c, got := recorder(t, http.StatusOK, `{"status":"admitted","mode":"draw","position":4,"serving":9,"admitted_until":"2026-12-01T10:00:30Z","token":"tk2"}`)
	p, err := c.LookQueue(context.Background(), "lamp", "lg-3", "tk1")
	want := sent{method: "GET", path: "/api/v1/products/lamp/queue", user: "lg-3", place: "tk1"}
	until := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	if err != nil || p.Status != "admitted" || p.Token != "tk2" || !p.AdmittedUntil.Equal(until) || p.RetryAfter != 0 || *got != want {
		t.Fatalf("LookQueue: %+v, %v, sent %+v; want admitted until %v with tk2, sent %+v", p, err, *got, until, want)
	}
	c, _ = recorder(t, http.StatusForbidden, `{"error":"work_required","message":"send {\"work\": nonce}"}`)
	_, err = c.JoinQueue(context.Background(), "lamp", "lg-3", "")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != "work_required" {
		t.Fatalf("a refused join: %v, want a 403 work_required *Error", err)
	}
	c, got = recorder(t, http.StatusOK, `{"status":"not_joined","mode":"fifo","serving":0,"difficulty":10}`, "Retry-After", "1")
	p, err = c.LookQueue(context.Background(), "lamp", "lg-3", "")
	if err != nil || p.Status != "not_joined" || p.Difficulty != 10 || got.place != "" || p.RetryAfter != time.Second {
		t.Fatalf("the public face: %+v, %v, sent %+v", p, err, *got)
	}
}

// PurchaseInLine sends the buyer's place and returns any answer, its error
// code and Retry-After, with no error.
func TestPurchaseInLineReturnsTheAnswer(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		headers    []string
		want       PurchaseAnswer
	}{
		{"reserved", `{"status":"reserved","order_id":"o-1","shard":2}`, http.StatusOK, nil, PurchaseAnswer{Status: 200, OrderID: "o-1"}},
		{"not admitted", `{"error":"not_admitted","message":"not your turn yet"}`, http.StatusForbidden, nil,
			PurchaseAnswer{Status: 403, Code: "not_admitted", Message: "not your turn yet"}},
		{"rate limited", `{"error":"rate_limited","message":"slow down"}`, http.StatusTooManyRequests, []string{"Retry-After", "3"},
			PurchaseAnswer{Status: 429, Code: "rate_limited", Message: "slow down", RetryAfter: 3 * time.Second}},
		{"not the API's body", `<html>busy</html>`, http.StatusBadGateway, nil, PurchaseAnswer{Status: 502}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, got := recorder(t, tc.status, tc.body, tc.headers...)
			a, err := c.PurchaseInLine(context.Background(), "lamp", "lg-7", "tk")
			want := sent{method: "POST", path: "/api/v1/products/lamp/purchase", user: "lg-7", place: "tk"}
			if err != nil || a != tc.want || *got != want {
				t.Fatalf("PurchaseInLine: %+v, %v, sent %+v; want %+v, sent %+v", a, err, *got, tc.want, want)
			}
		})
	}
}
