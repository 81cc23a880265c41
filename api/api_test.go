package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
)

type sample struct {
	Stock  int64        `json:"stock"`
	Title  string       `json:"title"`
	Starts OptionalTime `json:"starts_at"`
}

func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		body string
		ok   bool
	}{
		{`{"stock":1}`, true},
		{`{"stock":1,"starts_at":"2026-01-01T00:00:00Z"}`, true},
		{`{"stock":1,"starts_at":null}`, true},
		{`{"stock":1} `, true},
		{`{"stock":1,"extra":2}`, false},
		{`{"stock":1}{"stock":2}`, false},
		{`{"stock":"1"}`, false},
		{`{"stock":1,"starts_at":"tomorrow"}`, false},
		{`[1]`, false},
		{`{`, false},
	}
	for _, tc := range cases {
		var s sample
		err := decodeStrict([]byte(tc.body), &s)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, shardstock.ErrInvalid) {
			t.Errorf("%s: %v, want ok=%v", tc.body, err, tc.ok)
		}
	}
}

// FuzzDecodeStrict: any body is decoded or refused with ErrInvalid (a 400),
// never a panic or another error (which would be a 500).
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"stock":1}`, `{"stock":1,"title":"x","starts_at":"2026-01-01T00:00:00Z"}`, `{}`, `{"a":`, `[]`, `null`, `{"stock":1e999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s sample
		if err := decodeStrict(body, &s); err != nil && !errors.Is(err, shardstock.ErrInvalid) {
			t.Fatalf("%q: %v", body, err)
		}
	})
}

func TestRequestIDsAreUniqueAcrossGenerators(t *testing.T) {
	a, b := RequestIDs(), RequestIDs() // two processes, say
	seen := map[string]bool{}
	for range 1000 {
		for _, id := range []string{a(), b()} {
			if seen[id] || !shardstock.ValidID(id) {
				t.Fatalf("id %q repeated or not a plain token", id)
			}
			seen[id] = true
		}
	}
}

func TestErrorBodiesAreCachedAndBounded(t *testing.T) {
	var c bodyCache
	sold := ErrorBody{shardstock.ErrSoldOut.Code, shardstock.ErrSoldOut.Message}
	first := c.encode(sold)
	var got ErrorBody
	if err := json.Unmarshal(first, &got); err != nil || got != sold {
		t.Fatalf("encoded %q decodes to %+v (%v)", first, got, err)
	}
	if again := c.encode(sold); &again[0] != &first[0] {
		t.Fatal("a repeated body was encoded again, not served from the cache")
	}
	for i := range 2 * maxCachedBodies {
		c.encode(ErrorBody{"invalid", fmt.Sprintf("message %d", i)})
	}
	if n := c.n.Load(); n != maxCachedBodies {
		t.Fatalf("cache holds %d bodies, bound %d", n, maxCachedBodies)
	}
}

// TestDecodeStrictRefusesDuplicateAndMiscasedKeys: encoding/json takes the
// last of two keys and matches them case-insensitively; a body that leans
// on either is refused.
func TestDecodeStrictRefusesDuplicateAndMiscasedKeys(t *testing.T) {
	type body struct {
		Stock  int64  `json:"stock"`
		Result string `json:"result"`
		Nested struct {
			A int `json:"a"`
		} `json:"nested"`
	}
	for _, bad := range []string{
		`{"stock":10,"Stock":99}`,
		`{"result":"fail","RESULT":"success"}`,
		`{"stock":10,"stock":99}`,
		`{"Stock":99}`,
		`{"nested":{"a":1,"A":2}}`,
	} {
		var b body
		if err := DecodeStrict([]byte(bad), &b); err == nil {
			t.Errorf("%s accepted as %+v", bad, b)
		}
	}
	for _, good := range []string{`{"stock":10}`, `{}`, `{"nested":{"a":1},"result":"x"}`, `{"nested":{},"stock":1}`} {
		var b body
		if err := DecodeStrict([]byte(good), &b); err != nil {
			t.Errorf("%s refused: %v", good, err)
		}
	}
}

// TestRequestIDsDoNotCount: consecutive ids are not ordered like a
// counter, so two answers do not tell how many requests came between.
func TestRequestIDsDoNotCount(t *testing.T) {
	next := RequestIDs()
	prev, ascending := next(), 0
	for range 100 {
		id := next()
		if id > prev {
			ascending++
		}
		prev = id
	}
	if ascending > 80 || ascending < 20 {
		t.Fatalf("%d of 100 consecutive ids sort after the one before: they count", ascending)
	}
}
func TestErrorResponseNeverCallsAnOutageSoldOut(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{shardstock.ErrSoldOut, http.StatusGone, "sold_out"},
		{fmt.Errorf("%w: shard 0: connection refused", shardstock.ErrUnavailable), http.StatusServiceUnavailable, "unavailable"},
		{shardstock.ErrLimitReached, http.StatusConflict, "limit_reached"},
		{shardstock.ErrNotStarted, http.StatusForbidden, "not_started"},
		{shardstock.ErrEnded, http.StatusForbidden, "ended"},
		{shardstock.Invalid("x"), http.StatusBadRequest, "bad_request"},
		{errors.New("dial tcp 10.0.0.1:6379: secret detail"), http.StatusInternalServerError, "internal"},
	}
	for _, tc := range cases {
		st, e := ErrorResponse(tc.err)
		if st != tc.status || e.Code != tc.code {
			t.Errorf("%v -> %d %s, want %d %s", tc.err, st, e.Code, tc.status, tc.code)
		}
		if strings.Contains(e.Message, "secret") {
			t.Errorf("internal detail leaked: %q", e.Message)
		}
	}
}

// TestAdminAuthTakesTheSchemeInAnyCase (issue 42, finding 9): the
// scheme's name is case-insensitive (RFC 9110); "bearer <token>" was 401.
// The token itself is not.
func TestAdminAuthTakesTheSchemeInAnyCase(t *testing.T) {
	e := echo.New()
	e.HTTPErrorHandler = ErrorHandler(slog.New(slog.DiscardHandler))
	e.GET("/admin", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, AdminAuth("s3cret-token"))
	for header, want := range map[string]int{
		"Bearer s3cret-token": 204, "bearer s3cret-token": 204, "BEARER s3cret-token": 204,
		"Bearer S3CRET-TOKEN": 401, "Basic s3cret-token": 401, "Bearers3cret-token": 401, "": 401, "Bearer ": 401,
	} {
		req := httptest.NewRequest(http.MethodGet, "/admin", nil)
		req.Header.Set("Authorization", header)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, rec.Code, want)
		}
	}
}

// TestErrorMessagesAreNotHTMLEscaped (issue 42, finding 9): a message
// read raw said "stock must be \u003e 0".
func TestErrorMessagesAreNotHTMLEscaped(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest(http.MethodPut, "/", nil), "/", shardstock.Invalid("stock must be > 0 & < 2^40"), slog.New(slog.DiscardHandler))
	if body := rec.Body.String(); !strings.Contains(body, `"stock must be > 0 & < 2^40"`) {
		t.Fatalf("body %s", body)
	}
}
