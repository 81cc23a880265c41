package flashsale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/spool"
)

func TestReservedEncodesLikeEncodingJSON(t *testing.T) {
	for _, r := range []Reserved{
		{Status: "reserved", OrderID: NewOrderID(), Shard: 0},
		{Status: "reserved", OrderID: "a-b_C9", Shard: 63},
	} {
		want, _ := json.Marshal(r)
		if got := r.encode(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("encode %+v = %s, want %s", r, got, want)
		}
	}
}

// outageReserver answers every purchase ErrUnavailable, in doubt about
// shard 2, and records what was abandoned.
type outageReserver struct {
	benchReserver
	abandoned []string
}

func (r *outageReserver) ReserveRetryable(context.Context, *shardstock.Product, string, string, time.Time, uint64) (int, error) {
	return -1, &shardstock.InDoubt{Shards: 1 << 2, Err: shardstock.ErrUnavailable}
}

func (r *outageReserver) Abandon(_ context.Context, _ *shardstock.Product, _, id string) {
	r.abandoned = append(r.abandoned, id)
}

type recordingSpool struct {
	entries []spool.Entry
	full    bool
}

func (s *recordingSpool) Pending(product, user string) int {
	n := 0
	for _, e := range s.entries {
		if e.ProductID == product && e.UserID == user {
			n++
		}
	}
	return n
}

func (s *recordingSpool) Append(e spool.Entry) error {
	if s.full {
		return errors.New("spool full")
	}
	s.entries = append(s.entries, e)
	return nil
}

func (s *recordingSpool) Ticket(string) (spool.Entry, spool.Result, bool) {
	return spool.Entry{}, spool.Result{}, false
}

// A purchase no shard could take is spooled (202) with its claim kept for
// the replay; one whose buyer hung up, or that the spool refuses, is not,
// and its claim is abandoned (given back unless a unit may exist).
func TestUnavailablePurchaseIsSpooledOnlyForABuyerWhoWaits(t *testing.T) {
	cases := []struct {
		name         string
		hungUp, full bool
		wantStatus   int
		wantSpooled  int
		wantAbandon  int
	}{
		{"buyer waits", false, false, 202, 1, 0},
		{"buyer hung up", true, false, 0, 0, 1},
		{"spool full", false, true, 503, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, sp := &outageReserver{}, &recordingSpool{full: tc.full}
			h := NewHandler(Config{Products: benchCatalog{&shardstock.Product{ID: "lamp", Stock: 10, PerUserLimit: 1}},
				Reserver: res, Identity: HeaderIdentity, Spool: sp})
			ctx, cancel := context.WithCancel(context.Background())
			if tc.hungUp {
				cancel()
			}
			defer cancel()
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://t/api/v1/products/lamp/purchase", nil)
			r.Header.Set("X-User-ID", "alice")
			w := &discard{h: http.Header{}}
			h.Purchases(http.NotFoundHandler()).ServeHTTP(w, r)
			if !tc.hungUp && w.status != tc.wantStatus {
				t.Fatalf("status %d, want %d", w.status, tc.wantStatus)
			}
			if len(sp.entries) != tc.wantSpooled || len(res.abandoned) != tc.wantAbandon {
				t.Fatalf("spooled %d, abandoned %d; want %d, %d", len(sp.entries), len(res.abandoned), tc.wantSpooled, tc.wantAbandon)
			}
			for _, e := range sp.entries {
				if e.Doubt != 1<<2 {
					t.Fatalf("spooled with doubts %b, want the reserver's 100 (the replay resolves them first)", e.Doubt)
				}
			}
		})
	}
}
