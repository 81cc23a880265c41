package sqlstore_test

import (
	"context"
	"testing"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// TestMarkTransferOnlyMovesForward (issue 40, break 4): two coordinators
// may finish one transfer at once (a request and another's resume loop).
// A late "out" must not take a done transfer back to out (a resync would
// then read its units as still in flight), and a done one stays done.
func TestMarkTransferOnlyMovesForward(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := s.Transfers.StartTransfer(ctx, shardstock.Transfer{ID: "t1", ProductID: "p", From: 0, To: 1, Wanted: 5}); err != nil {
				t.Fatal(err)
			}
			for _, m := range []struct {
				state string
				moved int64
			}{{"out", 5}, {"done", 5}, {"out", 5}, {"reversed", 5}, {"started", 0}} {
				if err := s.Transfers.MarkTransfer(ctx, "t1", m.state, m.moved); err != nil {
					t.Fatal(err)
				}
			}
			open, err := s.Transfers.UnfinishedTransfers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(open) != 0 {
				t.Fatalf("after done, a late out: %+v, want done", open)
			}
			ts, err := s.Transfers.ShardTransfers(ctx, 0)
			if err != nil || len(ts) != 1 || ts[0].State != "done" || ts[0].Moved != 5 {
				t.Fatalf("the transfer: %+v %v, want done with 5 moved", ts, err)
			}
		})
	}
}
