package shardstock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

func TestSplitStock(t *testing.T) {
	for _, tc := range []struct {
		stock     int64
		n, offset int
	}{{1, 3, 0}, {2, 3, 2}, {3, 3, 1}, {1000, 3, 0}, {1001, 3, 2}, {7, 1, 0}, {5, 64, 63}, {1 << 40, 7, 3}} {
		t.Run(fmt.Sprintf("%d over %d from %d", tc.stock, tc.n, tc.offset), func(t *testing.T) {
			a := shardstock.SplitStock(tc.stock, tc.n, tc.offset)
			var sum, lo, hi int64 = 0, a[0], a[0]
			for _, x := range a {
				sum, lo, hi = sum+x, min(lo, x), max(hi, x)
			}
			if len(a) != tc.n || sum != tc.stock || hi-lo > 1 {
				t.Fatalf("%v: sum %d, spread %d", a, sum, hi-lo)
			}
			if r := tc.stock % int64(tc.n); r > 0 && a[tc.offset] != lo+1 {
				t.Fatalf("%v: remainder does not start at offset %d", a, tc.offset)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	good := []string{"a", "Z9", "user_1-x", strings.Repeat("a", 64)}
	bad := []string{"", strings.Repeat("a", 65), "a b", "a:b", "{p}", "é", "a\x00", "../x", "a*"}
	for _, s := range good {
		if !shardstock.ValidID(s) {
			t.Errorf("%q should be valid", s)
		}
	}
	for _, s := range bad {
		if shardstock.ValidID(s) {
			t.Errorf("%q should be invalid", s)
		}
	}
}

func TestProductValidate(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name string
		p    shardstock.Product
		ok   bool
	}{
		{"minimal", shardstock.Product{ID: "p", Stock: 1}, true},
		{"negative stock", shardstock.Product{ID: "p", Stock: -1}, false},
		{"zero stock", shardstock.Product{ID: "p"}, false},
		{"bad id", shardstock.Product{ID: "p q", Stock: 1}, false},
		{"negative limit", shardstock.Product{ID: "p", Stock: 1, PerUserLimit: -1}, false},
		{"window backwards", shardstock.Product{ID: "p", Stock: 1, StartsAt: now, EndsAt: now.Add(-time.Second)}, false},
		{"negative price", shardstock.Product{ID: "p", Stock: 1, PriceCents: -5}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, shardstock.ErrInvalid)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && tc.p.PerUserLimit != 1 {
				t.Fatalf("default per_user_limit %d, want 1", tc.p.PerUserLimit)
			}
		})
	}
}

// FuzzValidID: an accepted id is 1-64 bytes of [A-Za-z0-9_-], so it can go
// into a Redis key (no braces, colons, spaces) without escaping.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"a", "user_1-x", "", "{p}", "a:b", "é", strings.Repeat("z", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !shardstock.ValidID(s) {
			return
		}
		if len(s) < 1 || len(s) > 64 || strings.ContainsAny(s, "{}: \t\n*?[]\\\"'") {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				t.Fatalf("accepted %q (rune %q)", s, r)
			}
		}
	})
}

// FuzzDecodeMessages: malformed messages from the queue are errors, never
// panics, and whatever is accepted names valid ids.
func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"order_id":"o1","product_id":"p","user_id":"u","shard":1,"action":"confirm"}`))
	f.Add([]byte(`{"id":"o1","user":"u","product":"p","shard":0,"at":1}`))
	f.Add([]byte(`{"action":"release"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := shardstock.DecodeSettlement(b); err == nil && (!shardstock.ValidID(s.ProductID) || s.OrderID == "") {
			t.Fatalf("accepted settlement %+v", s)
		}
		if e, err := shardstock.DecodeReservation(b); err == nil && (!shardstock.ValidID(e.ProductID) || !shardstock.ValidID(e.UserID)) {
			t.Fatalf("accepted reservation %+v", e)
		}
	})
}

// An outbox entry names the reservation; the stream names the product and
// the shard, unless the entry names them itself (0.6.0).
func TestReservationFromOutbox(t *testing.T) {
	cases := []struct {
		name   string
		fields map[string]any
		ok     bool
	}{
		{"lean", map[string]any{"res": "r1", "user": "u", "at": "5"}, true},
		{"0.6.0, agreeing", map[string]any{"res": "r1", "user": "u", "at": "5", "product": "p", "shard": "2"}, true},
		{"no user", map[string]any{"res": "r1", "at": "5"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := shardstock.ReservationFromOutbox(tc.fields, "p", 2)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (e.ID != "r1" || e.UserID != "u" || e.ProductID != "p" || e.Shard != 2 || e.AtMS != 5) {
				t.Fatalf("decoded %+v", e)
			}
		})
	}
}

// TestTitleLengthInCharacters: a title is limited to 200 characters (as
// the OpenAPI document's maxLength counts them), not bytes.
func TestTitleLengthInCharacters(t *testing.T) {
	for _, tc := range []struct {
		title string
		ok    bool
	}{
		{strings.Repeat("t", 200), true},
		{strings.Repeat("é", 200), true}, // 400 bytes
		{strings.Repeat("t", 201), false},
	} {
		p := shardstock.Product{ID: "p", Stock: 1, Title: tc.title}
		s := shardstock.Session{ID: "s", Title: tc.title, StartsAt: time.Unix(1, 0), EndsAt: time.Unix(2, 0), Products: []string{"p"}}
		if err := p.Validate(); (err == nil) != tc.ok {
			t.Errorf("product title of %d characters: %v", len([]rune(tc.title)), err)
		}
		if err := s.Validate(); (err == nil) != tc.ok {
			t.Errorf("session title of %d characters: %v", len([]rune(tc.title)), err)
		}
	}
}

func TestPermanentIsOneClassThroughWrapping(t *testing.T) {
	refused := shardstock.Permanent(errors.New("payment message refused"))
	err := fmt.Errorf("order o1: %w", refused)
	if !shardstock.IsPermanent(err) || !errors.Is(err, refused) {
		t.Fatalf("%v: IsPermanent %v, Is %v; want both", err, shardstock.IsPermanent(err), errors.Is(err, refused))
	}
	if err.Error() != "order o1: payment message refused" {
		t.Fatalf("text %q: the mark must not show", err)
	}
	for _, other := range []error{nil, errors.New("payment message refused"), shardstock.ErrUnavailable, fmt.Errorf("%w", shardstock.ErrConflict)} {
		if shardstock.IsPermanent(other) {
			t.Errorf("%v is not Permanent", other)
		}
	}
}

// TestRefusedIsPermanentAndToldApart: a refusal (dead-lettered) is
// permanent too; a permanent error is no refusal (it is parked), nor is an
// error with a refusal's text only; and a refusal wrapped in a Permanent
// mark is still found.
func TestRefusedIsPermanentAndToldApart(t *testing.T) {
	refused := shardstock.Refused(errors.New("the order table does not bear the settlement out"))
	parked := shardstock.Permanent(fmt.Errorf("%w: held on a shard this coordinator does not list", shardstock.ErrUnavailable))
	cases := []struct {
		err                error
		permanent, refused bool
	}{
		{fmt.Errorf("settle o1: %w", refused), true, true},
		{shardstock.Permanent(fmt.Errorf("x: %w", refused)), true, true},
		{fmt.Errorf("%w: %w", shardstock.ErrUnavailable, parked), true, false},
		{errors.New("the order table does not bear the settlement out"), false, false},
		{nil, false, false},
	}
	for _, tc := range cases {
		if got := shardstock.IsPermanent(tc.err); got != tc.permanent {
			t.Errorf("IsPermanent(%v) = %v", tc.err, got)
		}
		if got := shardstock.IsRefused(tc.err); got != tc.refused {
			t.Errorf("IsRefused(%v) = %v", tc.err, got)
		}
	}
	if !errors.Is(fmt.Errorf("settle: %w", refused), refused) || refused.Error() != "the order table does not bear the settlement out" {
		t.Fatalf("the mark must keep the error's identity and text: %v", refused)
	}
}
