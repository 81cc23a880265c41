package waitroom

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// Found by review (promise 2/4: the draw's places pass before anyone can learn them;
// MariaDB). A lobby's turns count from the sale's start, but its buyers
// learn their places (and can buy) only once the draw has committed. The
// draw writes one row at a time (about 6000 a second on MariaDB here), so
// a lobby of N takes N/6000 s; every place the number passes in that time
// minus the window is "passed" before its buyer could know it. Here 50000
// in the lobby, rate 100/s, window 5 s: the draw takes about 8 s, so the
// first ~300 drawn places have passed when it ends. (A million-buyer
// lobby takes ~3 min: with a 60 s window, 12000 places pass unseen; joins
// wait on the line's row meanwhile and fail at the 10 s read timeout.)
func TestADrawnPlaceIsNotPassedBeforeTheDrawEnds(t *testing.T) {
	dsns := sqlstoretest.DSNs(t)
	dsn, ok := dsns["mariadb"]
	if !ok {
		t.Skip("MariaDB only (SHARDSTOCK_TEST_MYSQL): SQLite draws 50000 in under a second")
	}
	const n = 50000
	s := sqlstoretest.Open(t, dsn)
	db := sqlstoretest.DB(t, dsn)
	ctx := context.Background()
	starts := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	room := New(Config{Store: s.Queues, Products: products{"lamp": {ID: "lamp", Stock: 1000, StartsAt: starts}}})
	if err := room.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := room.Define(ctx, "lamp", apiDraw(100, 5)); err != nil {
		t.Fatal(err)
	}
	joined := time.Now()
	for i := 0; i < n; i += 1000 {
		var vals []string
		var args []any
		for j := i; j < i+1000; j++ {
			vals = append(vals, "(?, ?, 0, ?)")
			args = append(args, "lamp", fmt.Sprintf("buyer%06d", j), joined.UnixMilli())
		}
		if _, err := db.Exec(`INSERT INTO queue_places (product_id, buyer, position, joined_at) VALUES `+strings.Join(vals, ","), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE queue_lines SET lobby = ? WHERE product_id = 'lamp'`, n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(starts))
	began := time.Now()
	if err := room.Refresh(ctx); err != nil { // draws
		t.Fatal(err)
	}
	t.Logf("the draw took %v", time.Since(began))
	var first string
	if err := db.QueryRow(`SELECT buyer FROM queue_places WHERE product_id = 'lamp' AND position = 1`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	l, _ := room.line("lamp")
	tok, err := room.signer.sign("lamp", first, ticket{QueuePlace: shardstock.QueuePlace{JoinedAt: joined, LineVersion: l.Version}, Mode: "draw"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := room.Look(ctx, "lamp", first, tok) // the lobby token the buyer holds, looked at right after the draw
	if err != nil {
		t.Fatal(err)
	}
	if p.Status == "passed" {
		t.Errorf("%s, drawn place %d, looks right after the draw (which took %v): %s (serving %d) — the turn came and went while the place was being drawn",
			first, p.Position, time.Since(began).Round(time.Millisecond), p.Status, p.Serving)
	}
}

func apiDraw(rate float64, window int64) api.QueueDefinition {
	return api.QueueDefinition{Mode: "draw", Rate: rate, LeadSeconds: 600, WindowSeconds: window}
}
