package sqlstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// Concurrent joins of one line get the places 1..n, each once, and a
// buyer who joins twice keeps their place; on SQLite and MariaDB.
func TestConcurrentJoinsGetDistinctPlaces(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			line := lampLine(shardstock.QueueFIFO)
			if ok, err := s.Queues.SaveQueueLine(ctx, line); !ok || err != nil {
				t.Fatalf("save: %v %v", ok, err)
			}
			if ok, _ := s.Queues.SaveQueueLine(ctx, line); ok {
				t.Fatal("a second line saved at version 0")
			}
			const buyers = 40
			places := make([]int64, 2*buyers)
			var wg sync.WaitGroup
			for i := range 2 * buyers {
				wg.Go(func() {
					q, err := s.Queues.JoinQueue(ctx, "lamp", fmt.Sprint("b", i%buyers), time.Now()) // each buyer twice
					if err != nil {
						t.Error(err)
					}
					places[i] = q.Position
				})
			}
			wg.Wait()
			for i := range buyers {
				if places[i] != places[i+buyers] {
					t.Errorf("b%d joined twice and got places %d and %d", i, places[i], places[i+buyers])
				}
			}
			got := slices.Clone(places[:buyers])
			slices.Sort(got)
			for i, p := range got {
				if p != int64(i+1) {
					t.Fatalf("places %v, want 1..%d each once", got, buyers)
				}
			}
			lines, err := s.Queues.QueueLines(ctx)
			if err != nil || lines["lamp"].Joined != buyers || lines["lamp"].Version != 1 || !lines["lamp"].Clock[0].At.Equal(line.Clock[0].At) {
				t.Fatalf("the line after the joins: %+v %v", lines["lamp"], err)
			}
		})
	}
}

// A draw places the lobby once, 1..n in the order of the shuffle; a join
// after it queues behind.
func TestDrawPlacesTheLobbyOnce(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			line := lampLine(shardstock.QueueDraw)
			if _, err := s.Queues.SaveQueueLine(ctx, line); err != nil {
				t.Fatal(err)
			}
			for _, b := range []string{"c", "a", "b"} {
				if q, err := s.Queues.JoinQueue(ctx, "lamp", b, time.Now()); q.Position != 0 || err != nil {
					t.Fatalf("%s joins the lobby: %+v %v", b, q, err)
				}
			}
			if lines, err := s.Queues.QueueLines(ctx); err != nil || lines["lamp"].Lobby != 3 || lines["lamp"].Joined != 0 {
				t.Fatalf("the line with three in the lobby: %+v %v, want lobby 3", lines["lamp"], err)
			}
			reverse := func(s []string) { slices.Reverse(s) }
			if n, err := s.Queues.DrawQueue(ctx, "lamp", time.Now, reverse); n != 3 || err != nil {
				t.Fatalf("the draw: %d %v, want 3 placed", n, err)
			}
			if n, err := s.Queues.DrawQueue(ctx, "lamp", time.Now, func([]string) { t.Error("drawn twice") }); n != -1 || err != nil {
				t.Fatalf("a second draw: %d %v, want -1 (drawn already)", n, err)
			}
			for b, want := range map[string]int64{"c": 1, "b": 2, "a": 3} {
				if q, found, err := s.Queues.QueuePlace(ctx, "lamp", b); q.Position != want || !found || err != nil {
					t.Errorf("%s's place %+v %v %v, want %d", b, q, found, err, want)
				}
			}
			if q, err := s.Queues.JoinQueue(ctx, "lamp", "late", time.Now()); q.Position != 4 || err != nil {
				t.Fatalf("a join after the draw: %+v %v, want 4", q, err)
			}
			if lines, err := s.Queues.QueueLines(ctx); err != nil || lines["lamp"].Lobby != 0 || lines["lamp"].Joined != 4 {
				t.Fatalf("the line after the draw: %+v %v, want 4 joined and nobody in the lobby", lines["lamp"], err)
			}
		})
	}
}

func TestQueueSecretIsMadeOnceAndRevocationsAreKept(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, err := s.Queues.QueueSecret(ctx)
			if err != nil || len(a) != 32 {
				t.Fatalf("secret: %x %v", a, err)
			}
			if b, _ := s.Queues.QueueSecret(ctx); string(a) != string(b) {
				t.Fatal("a second call made another secret")
			}
			for range 2 {
				if err := s.Queues.RevokeQueue(ctx, "lamp", "bot"); err != nil {
					t.Fatal(err)
				}
			}
			r, err := s.Queues.QueueRevoked(ctx)
			if err != nil || !r["lamp"]["bot"] || len(r["lamp"]) != 1 || r["Lamp"]["bot"] {
				t.Fatalf("revoked: %v %v", r, err)
			}
		})
	}
}

// A line moved back after an idle spell is written only when no place was
// handed out since it was read: a buyer told their turn came keeps it. A
// join keeps its time and answers with the line's version.
func TestRebaseOfAQueueLineLosesToAJoin(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			line := lampLine(shardstock.QueueFIFO)
			t0 := line.Starts()
			if ok, err := s.Queues.SaveQueueLine(ctx, line); !ok || err != nil {
				t.Fatalf("save: %v %v", ok, err)
			}
			lines, _ := s.Queues.QueueLines(ctx)
			read := lines["lamp"]
			q, err := s.Queues.JoinQueue(ctx, "lamp", "a", t0.Add(time.Minute))
			if err != nil || q.Position != 1 || !q.JoinedAt.Equal(t0.Add(time.Minute)) || q.LineVersion != 1 {
				t.Fatalf("a's join: %+v %v, want place 1 at t0+1m on version 1", q, err)
			}
			read.AppendAt(t0.Add(time.Minute), read.Joined+5, 5)
			if ok, err := s.Queues.SaveQueueLineBeforeJoins(ctx, read); ok || err != nil {
				t.Fatalf("a rebase from a read before a's join was written: %v %v", ok, err)
			}
			lines, _ = s.Queues.QueueLines(ctx)
			read = lines["lamp"]
			read.AppendAt(t0.Add(time.Minute), read.Joined+5, 5)
			if ok, err := s.Queues.SaveQueueLineBeforeJoins(ctx, read); !ok || err != nil {
				t.Fatalf("a rebase from a fresh read: %v %v", ok, err)
			}
			again, found, err := s.Queues.QueuePlace(ctx, "lamp", "a")
			if err != nil || !found || again.Position != 1 || !again.JoinedAt.Equal(q.JoinedAt) || again.LineVersion != 2 {
				t.Fatalf("a's place read back: %+v %v %v, want place 1 joined as before, version 2", again, found, err)
			}
		})
	}
}

// A lobby larger than one statement's chunk gets every place from 1 to n
// once, in the shuffle's order.
func TestDrawOfALobbyLargerThanAChunk(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			line := lampLine(shardstock.QueueDraw)
			if _, err := s.Queues.SaveQueueLine(ctx, line); err != nil {
				t.Fatal(err)
			}
			const n = 1201
			for i := range n {
				if _, err := s.Queues.JoinQueue(ctx, "lamp", fmt.Sprintf("b%04d", i), time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			var order []string
			drawn, err := s.Queues.DrawQueue(ctx, "lamp", time.Now, func(b []string) { slices.Reverse(b); order = slices.Clone(b) })
			if drawn != n || err != nil {
				t.Fatalf("the draw: %d %v, want %d", drawn, err, n)
			}
			for i, b := range order {
				if q, _, err := s.Queues.QueuePlace(ctx, "lamp", b); q.Position != int64(i+1) || err != nil {
					t.Fatalf("%s's place %d %v, want %d", b, q.Position, err, i+1)
				}
			}
		})
	}
}

// lampLine is a new line of product lamp in mode, 5 places a second from
// a fixed start, a minute to buy.
func lampLine(mode shardstock.QueueMode) shardstock.QueueLine {
	return shardstock.QueueLine{Product: "lamp", Mode: mode, Rate: 5, Window: time.Minute,
		Clock: []shardstock.QueueSegment{{At: time.UnixMilli(1_800_000_000_000).UTC(), Rate: 5}}}
}
