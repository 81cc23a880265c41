package flashsale

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits are the buyer-side rate limits, in requests per second (0: none).
// Product < 0 means "auto": about 1.1 × the product's stock per second (the
// seed's cap), at least 50.
type Limits struct {
	Global, Product, User, IP float64
}

// DefaultLimits is SHARDSTOCK_RATE_LIMITS' default.
const DefaultLimits = "global=20000,product=auto,user=5,ip=0"

// ParseLimits reads "global=N,product=N|auto,user=N,ip=N" (missing keys:
// 0, no limit) or "off".
func ParseLimits(s string) (Limits, error) {
	var l Limits
	if s = strings.TrimSpace(s); s == "off" {
		return l, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		dst := map[string]*float64{"global": &l.Global, "product": &l.Product, "user": &l.User, "ip": &l.IP}[k]
		if !ok || dst == nil {
			return l, fmt.Errorf("%q: want key=value with keys global, product, user, ip", part)
		}
		if k == "product" && v == "auto" {
			*dst = -1
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
			return l, fmt.Errorf("%q: the value must be a number >= 0", part)
		}
		*dst = n
	}
	return l, nil
}

// limiter applies Limits with token buckets (golang.org/x/time/rate). It
// makes no Redis call: a rejected request costs a map lookup.
type limiter struct {
	cfg      Limits
	global   *rate.Limiter // nil: no global limit
	products keyedLimits
	users    keyedLimits
	ips      keyedLimits
}

func newLimiter(cfg Limits) *limiter {
	l := &limiter{cfg: cfg}
	if cfg.Global > 0 {
		l.global = rate.NewLimiter(rate.Limit(cfg.Global), int(math.Max(1, cfg.Global/10)))
	}
	return l
}

// any reports whether some limit is set at all.
func (l *limiter) any() bool {
	return l.global != nil || l.cfg.User > 0 || l.cfg.IP > 0 || l.cfg.Product != 0
}

// allow reports whether a purchase may go on; if not, which limit said no
// and when to retry. A refusal spends no token of any scope: the tokens the
// scopes before it took are handed back.
func (l *limiter) allow(product string, stock int64, user, ip string, now time.Time) (ok bool, scope string, retry time.Duration) {
	b, p := l.buyerChecks(user, ip, now), l.productChecks(product, stock, now)
	return l.reserve(nil, now, b[:], p[:])
}

// admitBuyer takes the buyer's own tokens (user, ip) of one purchase, before
// its product is looked up; allowProduct then takes the rest. A purchase
// refused by the product or global limit hands the buyer's tokens back; one
// of a product that does not exist keeps them spent, so a flood of made-up
// product ids costs its sender like any other request.
func (l *limiter) admitBuyer(user, ip string, now time.Time) (taken []*rate.Reservation, ok bool, scope string, retry time.Duration) {
	checks := l.buyerChecks(user, ip, now)
	for _, c := range checks[:] {
		if c.lim == nil {
			continue
		}
		r := c.lim.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			cancelAll(taken, now)
			return nil, false, c.scope, d
		}
		taken = append(taken, r)
	}
	return taken, true, "", 0
}

// allowProduct is allow for a purchase whose buyer admitBuyer admitted.
func (l *limiter) allowProduct(pre []*rate.Reservation, product string, stock int64, now time.Time) (ok bool, scope string, retry time.Duration) {
	p := l.productChecks(product, stock, now)
	return l.reserve(pre, now, p[:])
}

type check struct {
	scope string
	lim   *rate.Limiter
}

func (l *limiter) buyerChecks(user, ip string, now time.Time) [2]check {
	return [2]check{
		{"user", l.users.get(user, l.cfg.User, int(math.Ceil(l.cfg.User)), now)},
		{"ip", l.ips.get(ip, l.cfg.IP, int(math.Ceil(l.cfg.IP)), now)},
	}
}

func (l *limiter) productChecks(product string, stock int64, now time.Time) [2]check {
	return [2]check{
		{"product", l.products.get(product, l.productRate(stock), int(math.Ceil(l.productRate(stock))), now)},
		{"global", l.global},
	}
}

// reserve takes one token of each check in order; the first that refuses
// hands back every token taken, those of pre included.
func (l *limiter) reserve(pre []*rate.Reservation, now time.Time, groups ...[]check) (ok bool, scope string, retry time.Duration) {
	var buf [4]*rate.Reservation
	taken := append(buf[:0], pre...)
	for _, checks := range groups {
		for _, c := range checks {
			if c.lim == nil {
				continue
			}
			r := c.lim.ReserveN(now, 1)
			if d := r.DelayFrom(now); d > 0 {
				r.CancelAt(now)
				cancelAll(taken, now)
				return false, c.scope, d
			}
			taken = append(taken, r)
		}
	}
	return true, "", 0
}

func cancelAll(taken []*rate.Reservation, now time.Time) {
	for _, t := range taken {
		t.CancelAt(now)
	}
}

func (l *limiter) productRate(stock int64) float64 {
	if l.cfg.Product >= 0 {
		return l.cfg.Product
	}
	return math.Max(50, 1.1*float64(stock))
}

// keyedLimits holds one token bucket per key (user, ip, product), created
// on first use. It is bounded: past maxKeys, buckets idle for a while (so
// full again) are dropped.
type keyedLimits struct {
	mu sync.Mutex // guards m
	m  map[string]*keyed
}

type keyed struct {
	lim  *rate.Limiter
	last time.Time
}

const maxKeys = 200000

// get returns key's bucket for r requests per second and burst; nil when
// r is 0 (no limit).
func (k *keyedLimits) get(key string, r float64, burst int, now time.Time) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*keyed{}
	}
	e := k.m[key]
	if e == nil {
		if len(k.m) >= maxKeys {
			k.sweep(now)
		}
		e = &keyed{lim: rate.NewLimiter(rate.Limit(r), burst)}
		k.m[key] = e
	}
	e.last = now
	return e.lim
}

// sweep drops buckets unused for 10s; if that frees nothing, all of them
// (a flood of distinct keys gets fresh buckets rather than memory growth).
func (k *keyedLimits) sweep(now time.Time) {
	for key, e := range k.m {
		if now.Sub(e.last) > 10*time.Second {
			delete(k.m, key)
		}
	}
	if len(k.m) >= maxKeys {
		k.m = map[string]*keyed{}
	}
}
