package order

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// holdsAt is a fake HoldFinder: the reservations it knows are on shard 0.
type holdsAt map[string]string // reservation id -> user

func (h holdsAt) FindHold(_ context.Context, _ []string, id string) (string, string, int, bool, error) {
	u, ok := h[id]
	return "p", u, 0, ok, nil
}

var testPaySecret = []byte(strings.Repeat("k", 32))

func paymentBody(id, result string, amount int64, txn string) []byte {
	return fmt.Appendf(nil, `{"result":%q,"order_id":%q,"amount_cents":%d,"transaction_id":%q,"timestamp":1}`,
		result, id, amount, txn)
}

// TestPaymentMessages: a payment result arriving as a message is applied
// like the callback and idempotently; what can never be applied is
// ErrPaymentRefused (dead-lettered by the consumer), and what cannot be
// decided yet is any other error (delivered again).
func TestPaymentMessages(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 5)
		holds := holdsAt{}
		h.svc.holds = holds
		h.svc.cfg.PaySecret = testPaySecret
		ctx := context.Background()
		apply := func(body []byte) (string, error) {
			return h.svc.ApplyPaymentMessage(ctx, body, SignPayment(testPaySecret, body))
		}
		mustBe := func(what string, body []byte, want string) {
			t.Helper()
			got, err := apply(body)
			if err != nil || got != want {
				t.Fatalf("%s: %q %v, want %q", what, got, err, want)
			}
		}
		for _, id := range []string{"a1", "a2", "a3", "a4"} {
			h.ingest(h.event(id, "alice", 0))
		}

		// Duplicates: the first applies, the repeats change nothing.
		pay := paymentBody("a1", "success", 0, "t-1")
		mustBe("first delivery", pay, PaymentApplied)
		mustBe("a duplicate", pay, PaymentDuplicate)
		mustBe("a duplicate", pay, PaymentDuplicate)
		if st := h.status("a1"); st != shardstock.StatusPaid {
			t.Fatalf("a1 is %s", st)
		}
		// Reordered: an earlier attempt's fail arrives after the success.
		mustBe("a fail after the success", paymentBody("a1", "fail", 0, "t-0"), PaymentStale)
		if st := h.status("a1"); st != shardstock.StatusPaid {
			t.Fatalf("a stale fail moved a1 to %s", st)
		}
		mustBe("a fail", paymentBody("a2", "fail", 0, "t-2"), PaymentApplied)

		// A result that overtook its reservation: not decided, not refused.
		a9 := ulid.MustNew(uint64(h.now.Load()), rand.Reader).String() // a reservation id of now
		holds[a9] = "bob"
		early := paymentBody(a9, "success", 0, "t-9")
		if _, err := apply(early); err == nil || errors.Is(err, ErrPaymentRefused) {
			t.Fatalf("a result for an order not written yet: %v, want a retryable error", err)
		}
		h.ingest(h.event(a9, "bob", 0))
		mustBe("the same result once the order is written", early, PaymentApplied)

		// Poison: each is refused and changes nothing.
		refusedBodies := map[string]func() (string, error){
			"no signature": func() (string, error) {
				return h.svc.ApplyPaymentMessage(ctx, paymentBody("a3", "success", 0, "t-3"), "")
			},
			"a signature of another body": func() (string, error) {
				return h.svc.ApplyPaymentMessage(ctx, paymentBody("a3", "success", 0, "t-3"),
					SignPayment(testPaySecret, paymentBody("a4", "success", 0, "t-3")))
			},
			"not JSON":          func() (string, error) { return apply([]byte("\x00garbage")) },
			"an unknown result": func() (string, error) { return apply(paymentBody("a3", "maybe", 0, "t-3")) },
			"another amount":    func() (string, error) { return apply(paymentBody("a3", "success", 100, "t-3")) },
			"no transaction id": func() (string, error) { return apply(paymentBody("a3", "success", 0, "")) },
			"a transaction id that paid a1": func() (string, error) {
				return apply(paymentBody("a3", "success", 0, "t-1"))
			},
			"an order that does not exist":   func() (string, error) { return apply(paymentBody("zz", "success", 0, "t-z")) },
			"a success after the order fail": func() (string, error) { return apply(paymentBody("a2", "success", 0, "t-5")) },
		}
		for what, f := range refusedBodies {
			if got, err := f(); !errors.Is(err, ErrPaymentRefused) {
				t.Errorf("%s: %q %v, want ErrPaymentRefused", what, got, err)
			}
		}
		if st := h.status("a3"); st != shardstock.StatusAwaitingPayment {
			t.Fatalf("a refused message moved a3 to %s", st)
		}
		if st := h.status("a2"); st != shardstock.StatusCancelled {
			t.Fatalf("a2 is %s", st)
		}
		// One settlement per order that changed, however often its result came.
		got := map[string]int{}
		for _, st := range h.settle() {
			got[st.OrderID]++
		}
		if len(got) != 3 || got["a1"] != 1 || got["a2"] != 1 || got[a9] != 1 {
			t.Fatalf("settlements %v, want one each for a1, a2, a9", got)
		}
	})
}

// countingHolds is holdsAt that counts its lookups.
type countingHolds struct {
	holdsAt
	calls int
}

func (c *countingHolds) FindHold(ctx context.Context, p []string, id string) (string, string, int, bool, error) {
	c.calls++
	return c.holdsAt.FindHold(ctx, p, id)
}

// TestUnknownOrderIsOneRead (issue 15, item 6): an order id that cannot be
// a reservation still on its way (not a ULID, or made long before the
// fail-fast age) is answered from the order table alone, with no look at
// the shards; a recent one is looked for there.
func TestUnknownOrderIsOneRead(t *testing.T) {
	h := newHarness(t, sqlstoretest.Open(t, "sqlite:"+t.TempDir()+"/o.db"), 1)
	holds := &countingHolds{holdsAt: holdsAt{}}
	h.svc.holds = holds
	now := time.UnixMilli(h.now.Load())
	for _, id := range []string{"not-a-ulid", ulid.MustNew(ulid.Timestamp(now.Add(-2*time.Hour)), rand.Reader).String(),
		ulid.MustNew(ulid.Timestamp(now.Add(24*time.Hour)), rand.Reader).String()} {
		if _, err := h.svc.Get(context.Background(), id, "alice"); !errors.Is(err, shardstock.ErrNotFound) {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if holds.calls != 0 {
		t.Fatalf("%d hold lookups for ids that cannot be pending", holds.calls)
	}
	recent := ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
	h.svc.Get(context.Background(), recent, "alice")
	if holds.calls != 1 {
		t.Fatalf("a recent id was not looked for on the shards (%d lookups)", holds.calls)
	}
}

// TestAPaymentSecretRotates: while a payment secret is rotated, results
// signed with the previous secret are accepted beside the current one's,
// as messages and callbacks; a result signed with neither is refused.
func TestAPaymentSecretRotates(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		h := newHarness(t, s, 5)
		old, current := testPaySecret, []byte(strings.Repeat("n", 32))
		h.svc.cfg.PaySecret, h.svc.cfg.PayPrevious = current, old
		ctx := context.Background()
		for _, id := range []string{"r1", "r2", "r3"} {
			h.ingest(h.event(id, "alice", 0))
		}
		for _, tc := range []struct {
			id, which string
			secret    []byte
		}{{"r1", "previous", old}, {"r2", "current", current}} {
			body := paymentBody(tc.id, "success", 0, "t-"+tc.id)
			if got, err := h.svc.ApplyPaymentMessage(ctx, body, SignPayment(tc.secret, body)); err != nil || got != PaymentApplied {
				t.Fatalf("%s signed with the %s secret: %q %v", tc.id, tc.which, got, err)
			}
			if err := h.svc.CheckCallbackSignature(body, SignPayment(tc.secret, body)); err != nil {
				t.Fatalf("a callback for %s: %v", tc.id, err)
			}
		}
		other := []byte(strings.Repeat("x", 32))
		body := paymentBody("r3", "success", 0, "t-r3")
		if _, err := h.svc.ApplyPaymentMessage(ctx, body, SignPayment(other, body)); !errors.Is(err, ErrPaymentRefused) {
			t.Fatalf("signed with neither secret: %v, want refused", err)
		}
		if err := h.svc.CheckCallbackSignature(body, SignPayment(other, body)); err == nil {
			t.Fatal("a callback signed with neither secret passed")
		}
		h.svc.cfg.PayPrevious = nil // the rotation's last step
		body = paymentBody("r3", "success", 0, "t-r3")
		if _, err := h.svc.ApplyPaymentMessage(ctx, body, SignPayment(old, body)); !errors.Is(err, ErrPaymentRefused) {
			t.Fatalf("signed with the secret rotated out: %v, want refused", err)
		}
	})
}
