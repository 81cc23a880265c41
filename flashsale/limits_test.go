package flashsale

import (
	"testing"
	"time"
)

func TestParseLimits(t *testing.T) {
	cases := []struct {
		in   string
		want Limits
		ok   bool
	}{
		{DefaultLimits, Limits{Global: 20000, Product: -1, User: 5}, true},
		{"off", Limits{}, true},
		{"user=2.5", Limits{User: 2.5}, true},
		{"user=-1", Limits{}, false},
		{"speed=5", Limits{}, false},
		{"user", Limits{}, false},
		{"ip=NaN", Limits{}, false},
	}
	for _, tc := range cases {
		got, err := ParseLimits(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("%q: %+v %v, want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(Limits{User: 1, Product: 10, Global: 1000})
	if ok, _, _ := l.allow("p", 100, "u", "ip", now); !ok {
		t.Fatal("first request refused")
	}
	ok, scope, retry := l.allow("p", 100, "u", "ip", now)
	if ok || scope != "user" || retry <= 0 || retry > time.Second {
		t.Fatalf("second request of one user in the same instant: %v %s %s", ok, scope, retry)
	}
	if ok, _, _ := l.allow("p", 100, "v", "ip", now); !ok {
		t.Fatal("another user was refused by the first one's limit")
	}
	if ok, _, _ := l.allow("p", 100, "u", "ip", now.Add(time.Second)); !ok {
		t.Fatal("the user was still refused a second later")
	}
	refused := 0
	for i := 0; i < 30; i++ {
		if ok, scope, _ := l.allow("p", 100, string(rune('a'+i)), "ip", now.Add(2*time.Second)); !ok && scope == "product" {
			refused++
		}
	}
	if refused < 15 {
		t.Fatalf("product limit 10/s (burst 10) refused only %d of 30 simultaneous requests", refused)
	}
	auto := newLimiter(Limits{Product: -1})
	if r := auto.productRate(1000); r != 1100 {
		t.Fatalf("auto product rate for stock 1000: %v, want 1100", r)
	}
	if r := auto.productRate(3); r != 50 {
		t.Fatalf("auto product rate floor: %v, want 50", r)
	}
}

// The global and per-IP limits refuse past their rate, and a request one
// scope refuses spends no token of another (issue: a refusal by the product
// limit used up the user's token).
func TestLimiterScopes(t *testing.T) {
	now := time.Unix(2000, 0)
	t.Run("global", func(t *testing.T) {
		l := newLimiter(Limits{Global: 10}) // burst 1
		if ok, _, _ := l.allow("p", 100, "a", "", now); !ok {
			t.Fatal("first request refused")
		}
		if ok, scope, _ := l.allow("p", 100, "b", "", now); ok || scope != "global" {
			t.Fatalf("second request in the same instant: %v %s, want refused by global", ok, scope)
		}
		if ok, _, _ := l.allow("p", 100, "c", "", now.Add(100*time.Millisecond)); !ok {
			t.Fatal("refused after the global rate's interval")
		}
	})
	t.Run("ip", func(t *testing.T) {
		l := newLimiter(Limits{IP: 1})
		if ok, _, _ := l.allow("p", 100, "a", "10.0.0.1", now); !ok {
			t.Fatal("first request refused")
		}
		if ok, scope, _ := l.allow("p", 100, "b", "10.0.0.1", now); ok || scope != "ip" {
			t.Fatalf("another user from the same address: %v %s, want refused by ip", ok, scope)
		}
		if ok, _, _ := l.allow("p", 100, "c", "10.0.0.2", now); !ok {
			t.Fatal("another address was refused")
		}
	})
	t.Run("a refusal spends no other scope's token", func(t *testing.T) {
		l := newLimiter(Limits{User: 1, Product: 10}) // product burst 10
		for i := 0; i < 10; i++ {
			if ok, _, _ := l.allow("p", 100, string(rune('a'+i)), "", now); !ok {
				t.Fatal("the product's burst refused")
			}
		}
		if ok, scope, _ := l.allow("p", 100, "u", "", now); ok || scope != "product" {
			t.Fatalf("past the product's burst: %v %s", ok, scope)
		}
		// 100 ms later the product has a token again; u's own token (1/s)
		// was handed back by the refusal, so u is not refused by it.
		if ok, scope, _ := l.allow("p", 100, "u", "", now.Add(100*time.Millisecond)); !ok {
			t.Fatalf("u 100 ms later: refused by %s (the refusal spent u's token)", scope)
		}
	})
}
