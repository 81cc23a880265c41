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
