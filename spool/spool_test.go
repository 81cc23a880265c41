package spool

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
)

func entry(i int) Entry {
	return Entry{Ticket: fmt.Sprintf("t%d", i), ProductID: "p", UserID: fmt.Sprintf("u%d", i),
		OrderID: fmt.Sprintf("o%d", i), AtMS: time.Now().UnixMilli()}
}

func openSpool(t *testing.T, dir string, cfg Config) *Spool {
	t.Helper()
	s, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// replayAll runs the spool until want outcomes were recorded, with replay
// deciding each, and returns the order in which entries were tried.
func replayAll(t *testing.T, s *Spool, replay Replayer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, replay); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.Depth() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if s.Depth() != 0 {
		t.Fatalf("%d entries never replayed", s.Depth())
	}
}

func TestSpoolAppendReplayInOrder(t *testing.T) {
	s := openSpool(t, t.TempDir(), Config{Workers: 1})
	for i := 0; i < 5; i++ {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, r, ok := s.Ticket("t3"); !ok || r.Status != "queued" {
		t.Fatalf("ticket before replay: %+v %v", r, ok)
	}
	var mu sync.Mutex
	var order []string
	replayAll(t, s, func(_ context.Context, e Entry) (Result, error) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, e.Ticket)
		if e.Ticket == "t2" {
			return Result{Status: "rejected", Error: "sold_out"}, nil
		}
		return Result{Status: "reserved", OrderID: e.OrderID, Shard: 1}, nil
	})
	if strings.Join(order, ",") != "t0,t1,t2,t3,t4" {
		t.Fatalf("replay order %v", order)
	}
	if _, r, _ := s.Ticket("t1"); r.Status != "reserved" || r.OrderID != "o1" {
		t.Fatalf("t1: %+v", r)
	}
	if _, r, _ := s.Ticket("t2"); r.Status != "rejected" || r.Error != "sold_out" {
		t.Fatalf("t2: %+v", r)
	}
}

// A purchase the replayer cannot decide yet (its buyer's home is down)
// waits on its own backoff; the purchases behind it are replayed
// meanwhile, several at once, and it is decided once its shard answers.
func TestSpoolPurchaseThatMustWaitHoldsUpNoOther(t *testing.T) {
	s := openSpool(t, t.TempDir(), Config{Workers: 4})
	for i := 0; i < 20; i++ {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []string
	var inflight, most int
	var homeUp atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(_ context.Context, e Entry) (Result, error) {
			mu.Lock()
			inflight++
			most = max(most, inflight)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // a round trip
			mu.Lock()
			defer mu.Unlock()
			inflight--
			if e.Ticket == "t0" && !homeUp.Load() {
				return Result{}, errors.New("the buyer's home is down")
			}
			order = append(order, e.Ticket)
			return Result{Status: "reserved", OrderID: e.OrderID}, nil
		})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Depth() > 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	served, peak := len(order), most
	mu.Unlock()
	if served != 19 || s.Depth() != 1 {
		t.Fatalf("while t0 waits: %d of the 19 others replayed, %d pending", served, s.Depth())
	}
	if peak < 2 || peak > 4 {
		t.Fatalf("at most %d replays at once, want 2 to 4 (Workers)", peak)
	}
	homeUp.Store(true)
	for s.Depth() > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, r, _ := s.Ticket("t0"); r.Status != "reserved" {
		t.Fatalf("t0 once its home answers: %+v", r)
	}
}

func TestSpoolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		s.Append(entry(i))
	}
	s.finish("t0", Result{Status: "reserved", OrderID: "o0"})
	s.Close() // the coordinator stops

	s2 := openSpool(t, dir, Config{})
	if s2.Depth() != 2 {
		t.Fatalf("pending after restart: %d, want 2", s2.Depth())
	}
	if _, r, ok := s2.Ticket("t0"); !ok || r.Status != "reserved" || r.OrderID != "o0" {
		t.Fatalf("a finished ticket after restart: %+v %v", r, ok)
	}
	if e, r, ok := s2.Ticket("t2"); !ok || r.Status != "queued" || e.UserID != "u2" {
		t.Fatalf("a queued ticket after restart: %+v %+v %v", e, r, ok)
	}
}

func TestSpoolFull(t *testing.T) {
	s := openSpool(t, t.TempDir(), Config{MaxEntries: 3})
	for i := 0; i < 3; i++ {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(entry(3)); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth entry: %v, want ErrFull", err)
	}
	if _, _, ok := s.Ticket("t3"); ok {
		t.Fatal("a refused entry got a ticket")
	}
	byBytes := openSpool(t, t.TempDir(), Config{MaxBytes: 300})
	var err error
	n := 0
	for ; err == nil && n < 100; n++ {
		err = byBytes.Append(entry(n))
	}
	if !errors.Is(err, ErrFull) || n < 2 {
		t.Fatalf("byte bound: %v after %d entries", err, n)
	}
}

func TestSpoolCorruptTail(t *testing.T) {
	for name, damage := range map[string]func(path string){
		"torn last frame": func(path string) {
			b, _ := os.ReadFile(path)
			os.WriteFile(path, b[:len(b)-7], 0o600)
		},
		"garbage appended": func(path string) {
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
			f.Write([]byte{0, 0, 0, 9, 1, 2, 3, 4, 'x', 'y'})
			f.Close()
		},
		"flipped byte in the last frame": func(path string) {
			b, _ := os.ReadFile(path)
			b[len(b)-3] ^= 0xff
			os.WriteFile(path, b, 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := Open(dir, Config{})
			for i := 0; i < 3; i++ {
				s.Append(entry(i))
			}
			s.Close()
			damage(filepath.Join(dir, "spool.log"))
			var logs bytes.Buffer
			s2, err := Open(dir, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("open after damage: %v", err)
			}
			defer s2.Close()
			want := 3
			if name != "garbage appended" {
				want = 2 // the damaged frame is the third entry
			}
			if s2.Depth() != want || !strings.Contains(logs.String(), "tail skipped") && want == 2 {
				t.Fatalf("depth %d, want %d; log: %s", s2.Depth(), want, logs.String())
			}
			// The spool keeps working after the cut.
			if err := s2.Append(entry(9)); err != nil {
				t.Fatal(err)
			}
			s2.Close()
			s3 := openSpool(t, dir, Config{})
			if s3.Depth() != want+1 {
				t.Fatalf("after appending past the cut: depth %d, want %d", s3.Depth(), want+1)
			}
		})
	}
}

func TestSpoolCompactsWhenDrained(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, Config{MaxBytes: 4000})
	for round := 0; round < 10; round++ {
		for i := 0; i < 5; i++ {
			if err := s.Append(entry(round*5 + i)); err != nil {
				t.Fatalf("round %d: %v (the spool never shrinks)", round, err)
			}
		}
		replayAll(t, s, func(_ context.Context, e Entry) (Result, error) {
			return Result{Status: "reserved", OrderID: e.OrderID}, nil
		})
	}
	if _, r, ok := s.Ticket("t49"); !ok || r.Status != "reserved" {
		t.Fatalf("a recent ticket was lost in compaction: %+v %v", r, ok)
	}
}

// FuzzSpoolOpen: whatever bytes the spool file holds after a crash, opening
// it neither fails nor panics, and the spool takes new entries afterwards.
func FuzzSpoolOpen(f *testing.F) {
	dir := f.TempDir()
	s, _ := Open(dir, Config{})
	s.Append(entry(1))
	s.Append(entry(2))
	s.finish("t1", Result{Status: "reserved", OrderID: "o1"})
	s.Close()
	good, _ := os.ReadFile(filepath.Join(dir, "spool.log"))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 0, '{', '}'})
	// Regression: a well-framed record without its entry made load panic.
	for _, rec := range []string{`{"k":"req"}`, `{"k":"done","t":"t1"}`} {
		frame := make([]byte, 8+len(rec))
		binary.BigEndian.PutUint32(frame[:4], uint32(len(rec)))
		binary.BigEndian.PutUint32(frame[4:8], crc32.ChecksumIEEE([]byte(rec)))
		copy(frame[8:], rec)
		f.Add(append(append([]byte{}, good...), frame...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "spool.log"), b, 0o600)
		s, err := Open(d, Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer s.Close()
		if err := s.Append(entry(99)); err != nil {
			t.Fatalf("append after open: %v", err)
		}
	})
}

// TestSpoolFullDisk (issue 14, item 3): while outcomes cannot be written
// (a full disk), each purchase is still replayed once — never again, so
// its reservation id is not held on one shard after another — replay
// waits with a backoff instead of spinning, each failed write is counted,
// and when the disk takes writes again the outcomes are written and
// replay goes on by itself; after a restart the tickets read as decided.
func TestSpoolFullDisk(t *testing.T) {
	dir := t.TempDir()
	var writeErrors atomic.Int64
	s := openSpool(t, dir, Config{Workers: 1, OnWriteError: func() { writeErrors.Add(1) }})
	for i := 0; i < 3; i++ {
		if err := s.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.failWrites.Store(true)
	var mu sync.Mutex
	replays := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(_ context.Context, e Entry) (Result, error) {
			mu.Lock()
			defer mu.Unlock()
			replays[e.Ticket]++
			return Result{Status: "reserved", OrderID: e.OrderID}, nil
		})
		close(done)
	}()
	time.Sleep(1500 * time.Millisecond) // the disk stays full for a while
	mu.Lock()
	during := fmt.Sprint(replays)
	mu.Unlock()
	if during != "map[t0:1]" {
		t.Fatalf("replays while outcomes cannot be written: %s, want t0 once and nothing more", during)
	}
	if n := writeErrors.Load(); n < 2 || n > 10 {
		t.Fatalf("%d write attempts in 1.5 s: want a few, with a backoff (not a busy loop)", n)
	}
	s.failWrites.Store(false) // space again
	deadline := time.Now().Add(10 * time.Second)
	for s.Depth() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	after := fmt.Sprint(replays)
	mu.Unlock()
	if after != "map[t0:1 t1:1 t2:1]" {
		t.Fatalf("replays after the disk had room again: %s, want each once", after)
	}
	s.Close()
	again := openSpool(t, dir, Config{})
	for i := 0; i < 3; i++ {
		if _, r, ok := again.Ticket(fmt.Sprintf("t%d", i)); !ok || r.Status != "reserved" {
			t.Fatalf("ticket t%d after a restart: %+v %v", i, r, ok)
		}
	}
	if again.Depth() != 0 {
		t.Fatalf("%d purchases pending after a restart, want none", again.Depth())
	}
}

// A replay that ends in doubt about some shards (shardstock.InDoubt) leaves
// them on the entry, on disk too: the next try, in this process or after a
// restart, is handed them to resolve first.
func TestSpoolKeepsTheShardsInDoubt(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, Config{})
	e := entry(1)
	e.Doubt = 1 << 0
	if err := s.Append(e); err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(_ context.Context, e Entry) (Result, error) {
			seen = append(seen, e.Doubt)
			cancel()
			return Result{}, &shardstock.InDoubt{Shards: 1 << 2, Err: shardstock.ErrUnavailable}
		})
		close(done)
	}()
	<-done
	if len(seen) != 1 || seen[0] != 1<<0 {
		t.Fatalf("the replay was handed doubts %b, want [1]", seen)
	}
	s.Close()
	s = openSpool(t, dir, Config{})
	var got uint64
	replayAll(t, s, func(_ context.Context, e Entry) (Result, error) {
		got = e.Doubt
		return Result{Status: "reserved", OrderID: e.OrderID, Shard: 2}, nil
	})
	if got != 1<<0|1<<2 {
		t.Fatalf("after a restart the replay was handed doubts %b, want 101", got)
	}
}

// Concurrent Appends share their fsyncs (group commit), and each is
// durable when it returns: all of them are there after a reopen.
func TestSpoolAppendsShareFsyncs(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, dir, Config{})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Append(entry(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	fsyncs := s.fsyncs.Load()
	t.Logf("%d concurrent appends, %d fsyncs", n, fsyncs)
	if fsyncs < 1 || fsyncs >= n {
		t.Fatalf("%d fsyncs for %d concurrent appends: want at least one, shared", fsyncs, n)
	}
	s.Close()
	again := openSpool(t, dir, Config{})
	if again.Depth() != n {
		t.Fatalf("%d of %d appended purchases after a reopen", again.Depth(), n)
	}
}

// RetryNow ends the backoff of the purchases that wait: one that failed
// four times would wait 2 s for its next try, and is tried at once instead
// (the coordinator calls it when a shard is back in line).
func TestSpoolRetryNowEndsTheBackoff(t *testing.T) {
	s := openSpool(t, t.TempDir(), Config{Workers: 2})
	if err := s.Append(entry(0)); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	var up atomic.Bool
	fourth := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(_ context.Context, e Entry) (Result, error) {
			if !up.Load() {
				if tries.Add(1) == 4 {
					close(fourth)
				}
				return Result{}, errors.New("the buyer's home is down")
			}
			return Result{Status: "reserved", OrderID: e.OrderID}, nil
		})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-fourth: // after 250 + 500 + 1000 ms; the next try would come 2 s later
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d tries in 10 s", tries.Load())
	}
	up.Store(true)
	start := time.Now()
	for s.Depth() > 0 && time.Since(start) < 5*time.Second {
		s.RetryNow() // (until Run has seen the fourth failure: a call before that finds nothing waiting)
		time.Sleep(20 * time.Millisecond)
	}
	if _, r, _ := s.Ticket("t0"); r.Status != "reserved" {
		t.Fatalf("t0: %+v", r)
	}
	if waited := time.Since(start); waited > time.Second || tries.Load() != 4 {
		t.Fatalf("replayed %s after RetryNow and %d failed tries; its backoff alone would have waited 2 s", waited.Round(time.Millisecond), tries.Load())
	}
}
