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
	method, path, body, auth, contentType, key, user string
}

// recorder answers status with answer and records each request.
func recorder(t *testing.T, status int, answer string) (*Client, *sent) {
	got := &sent{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*got = sent{r.Method, r.URL.EscapedPath(), string(b), r.Header.Get("Authorization"),
			r.Header.Get("Content-Type"), r.Header.Get(api.IdempotencyKeyHeader), r.Header.Get(api.UserIDHeader)}
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
