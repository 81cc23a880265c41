// Package spool is the disk spool: purchases no shard could take, kept on
// local disk and replayed when shards answer again. It owns its file and
// its replay loop, and imports the domain and ha (Backoff); the replay
// itself is the caller's (flashsale.Handler.Replay).
package spool

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/ha"
)

// The disk spool takes purchases when no shard can (seed: "write the
// request to local disk, keep the user's status 'in progress', process it
// in the background"). Each purchase is appended to an append-only file and
// fsynced before the buyer is answered 202 with a ticket; a loop replays
// the spooled purchases, started in arrival order, once shards answer
// again (several at once, a purchase that must wait not holding up the
// others), and
// records each outcome in the same file, so tickets and pending purchases
// survive a restart.
//
// File format: a sequence of frames, each a 4-byte big-endian payload
// length, a 4-byte CRC-32 (IEEE) of the payload, then the payload (one JSON
// record). A frame cut short or failing its checksum (a crash mid-write)
// ends the readable log: it and anything after it are cut off at open, with
// a log line.

// ErrFull: the spool holds its maximum of entries or bytes.
var ErrFull = errors.New("spool full")

// Entry is one spooled purchase.
type Entry struct {
	Ticket    string `json:"ticket"`
	ProductID string `json:"product"`
	UserID    string `json:"user"`
	OrderID   string `json:"order_id"` // the reservation id the replay uses
	AtMS      int64  `json:"at"`
	// Doubt is the shards where a try of this purchase went unanswered and
	// may hold a unit (shardstock.InDoubt): the replay resolves them first.
	Doubt uint64 `json:"doubt,omitempty"`
}

// Result is what became of a spooled purchase.
type Result struct {
	Status  string `json:"status"` // queued, reserved or rejected
	OrderID string `json:"order_id,omitempty"`
	Shard   int    `json:"shard"`
	Error   string `json:"error,omitempty"` // the error code, when rejected
}

// Config tunes a spool; zero values mean the defaults.
type Config struct {
	MaxEntries int   // pending purchases; default DefaultMaxEntries
	MaxBytes   int64 // file size; default DefaultMaxBytes
	Logger     *slog.Logger
	// OnWriteError, if set, is told each failed write (a full disk, say:
	// metrics and an alert).
	OnWriteError func()
	// Workers is how many purchases are replayed at once; default 8.
	Workers int
}

// record is one frame's payload: a purchase, or an outcome.
type record struct {
	Kind   string  `json:"k"` // "req", "doubt" (Doubt of a pending purchase grew) or "done"
	Entry  *Entry  `json:"e,omitempty"`
	Ticket string  `json:"t,omitempty"`
	Result *Result `json:"r,omitempty"`
	Doubt  uint64  `json:"d,omitempty"`
}

// Spool is the disk spool. Safe for concurrent use.
type Spool struct {
	cfg  Config
	path string
	wake chan struct{}
	now  chan struct{} // RetryNow: the waiting purchases are tried at once

	mu      sync.Mutex // guards the fields below and writes to f
	f       *os.File
	size    int64
	pending []Entry                // arrival order
	tickets map[string]*ticketInfo // ticket -> entry and outcome
	seq     int64                  // arrivals so far
	byBuyer map[string]int         // pending entries per product and buyer
	// unwritten are outcomes decided but not on disk yet (a write failed):
	// they are not replayed again, and Run writes them before it replays
	// anything else.
	unwritten  []record
	failWrites atomic.Bool // tests: every write fails, as on a full disk
	written    int64       // bytes written since open, every file (group commit)
	appending  int         // Appends written and waiting for their fsync
	group      groupSync
	fsyncs     atomic.Int64 // group commits so far (tests)
}

type ticketInfo struct {
	entry  Entry
	result Result
	seq    int64 // arrival order
}

// The defaults of Config, and of SHARDSTOCK_SPOOL_MAX_ENTRIES and
// SHARDSTOCK_SPOOL_MAX_BYTES.
const (
	DefaultMaxEntries       = 100000
	DefaultMaxBytes   int64 = 64 << 20
)

// Open opens (or creates) the spool in dir and rebuilds its state.
func Open(dir string, cfg Config) (*Spool, error) {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{cfg: cfg, path: filepath.Join(dir, "spool.log"), wake: make(chan struct{}, 1), now: make(chan struct{}, 1), tickets: map[string]*ticketInfo{},
		byBuyer: map[string]int{}}
	s.group.cond = sync.NewCond(&s.group.mu)
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s.f = f
	if err := s.load(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// load reads every intact frame, cuts off a torn or corrupt tail, and
// positions the file for appending.
func (s *Spool) load() error {
	r := bufio.NewReader(s.f)
	var off int64
	for {
		payload, n, err := readFrame(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.cfg.Logger.Warn("spool: torn or corrupt tail skipped", "file", s.path, "offset", off, "err", err)
			break
		}
		var rec record
		err = json.Unmarshal(payload, &rec)
		if err == nil && !rec.valid() {
			err = errors.New("record lacks its fields")
		}
		if err != nil {
			s.cfg.Logger.Warn("spool: unreadable record; tail skipped", "file", s.path, "offset", off, "err", err)
			break
		}
		s.apply(rec)
		off += n
	}
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("spool: cut the tail: %w", err)
	}
	if _, err := s.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.size = off
	return nil
}

func readFrame(r *bufio.Reader) ([]byte, int64, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("short header: %w", err)
	}
	n, sum := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
	if n > 1<<20 {
		return nil, 0, fmt.Errorf("frame of %d bytes", n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, 0, fmt.Errorf("short frame: %w", err)
	}
	if crc32.ChecksumIEEE(payload) != sum {
		return nil, 0, errors.New("checksum mismatch")
	}
	return payload, int64(8 + n), nil
}

// valid reports whether a decoded record has what apply needs.
func (rec record) valid() bool {
	switch rec.Kind {
	case "req":
		return rec.Entry != nil && rec.Entry.Ticket != ""
	case "done":
		return rec.Result != nil && rec.Ticket != ""
	case "doubt":
		return rec.Ticket != ""
	}
	return false
}

// apply folds one record into the in-memory state. Caller holds mu (or is
// load, before the spool is shared).
func (s *Spool) apply(rec record) {
	switch rec.Kind {
	case "req":
		s.seq++
		s.pending = append(s.pending, *rec.Entry)
		s.byBuyer[buyerKey(*rec.Entry)]++
		s.tickets[rec.Entry.Ticket] = &ticketInfo{entry: *rec.Entry, result: Result{Status: "queued"}, seq: s.seq}
	case "doubt":
		for i := range s.pending {
			if s.pending[i].Ticket == rec.Ticket {
				s.pending[i].Doubt |= rec.Doubt
				break
			}
		}
	case "done":
		if ti := s.tickets[rec.Ticket]; ti != nil {
			ti.result = *rec.Result
		}
		for i, e := range s.pending {
			if e.Ticket == rec.Ticket {
				s.pending = append(s.pending[:i], s.pending[i+1:]...)
				if k := buyerKey(e); s.byBuyer[k] <= 1 {
					delete(s.byBuyer, k)
				} else {
					s.byBuyer[k]--
				}
				break
			}
		}
	}
}

// write appends one record and fsyncs. Caller holds mu.
func (s *Spool) write(rec record) error {
	if err := s.writeNoSync(rec); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("spool fsync: %w", err)
	}
	return nil
}

func (s *Spool) writeNoSync(rec record) error {
	payload, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	frame := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint32(frame[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(frame[4:8], crc32.ChecksumIEEE(payload))
	copy(frame[8:], payload)
	if s.failWrites.Load() {
		return s.writeFailed(errors.New("no space left on device (injected)"))
	}
	if _, err := s.f.Write(frame); err != nil {
		// A torn frame at the end would hide every later one: cut it off.
		s.f.Truncate(s.size)
		s.f.Seek(s.size, io.SeekStart)
		return s.writeFailed(err)
	}
	s.size += int64(len(frame))
	s.written += int64(len(frame))
	return nil
}

func (s *Spool) writeFailed(err error) error {
	if s.cfg.OnWriteError != nil {
		s.cfg.OnWriteError()
	}
	return fmt.Errorf("spool write: %w", err)
}

// Append spools a purchase durably (written and fsynced when it returns
// nil). Errors: ErrFull, or the write error; the purchase is then not
// spooled and must not be answered 202.
//
// Concurrent Appends share their fsyncs (group commit): each writes its
// frame, then waits for one fsync that started after its write. Under a
// shard outage a third of the buyers may be spooled at once, and one fsync
// per purchase in turn would make their answers wait on the disk.
func (s *Spool) Append(e Entry) error {
	s.mu.Lock()
	if len(s.pending)+s.appending >= s.cfg.MaxEntries || s.size >= s.cfg.MaxBytes {
		s.mu.Unlock()
		return ErrFull
	}
	rec := record{Kind: "req", Entry: &e}
	if err := s.writeNoSync(rec); err != nil {
		s.mu.Unlock()
		return err
	}
	upTo := s.written
	s.appending++ // no compaction meanwhile: the frame is in this file
	s.mu.Unlock()
	err := s.syncTo(upTo)
	s.mu.Lock()
	s.appending--
	if err == nil {
		s.apply(rec)
	}
	s.mu.Unlock()
	if err != nil {
		return s.writeFailed(fmt.Errorf("fsync: %w", err))
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// groupSync is the state of the shared fsyncs (Append).
type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	synced  int64 // bytes written (Spool.written) that an fsync covered
	running bool  // an fsync is in progress
}

// syncTo returns once an fsync covered the first upTo bytes ever written,
// doing it itself unless one is in progress (which it then waits for: that
// one may have started before its write).
func (s *Spool) syncTo(upTo int64) error {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.synced < upTo {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.mu.Unlock()
		s.mu.Lock()
		f, target := s.f, s.written
		s.mu.Unlock()
		err := f.Sync()
		s.fsyncs.Add(1)
		g.mu.Lock()
		g.running = false
		g.cond.Broadcast()
		if err != nil {
			return err
		}
		g.synced = max(g.synced, target)
	}
	return nil
}

// Ticket returns a ticket's purchase and what became of it.
func (s *Spool) Ticket(ticket string) (Entry, Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ti, ok := s.tickets[ticket]
	if !ok {
		return Entry{}, Result{}, false
	}
	return ti.entry, ti.result, true
}

func buyerKey(e Entry) string { return e.ProductID + "\x00" + e.UserID }

// Pending returns how many of user's purchases of product wait in the spool.
func (s *Spool) Pending(product, user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byBuyer[product+"\x00"+user]
}

// Waiting is how many purchases wait for replay, and when the one waiting
// longest arrived (zero: none waits), read at once.
func (s *Spool) Waiting() (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return 0, time.Time{}
	}
	first := s.pending[0].AtMS
	for _, e := range s.pending[1:] {
		first = min(first, e.AtMS)
	}
	return len(s.pending), time.UnixMilli(first)
}

// Depth is the number of purchases waiting for replay.
func (s *Spool) Depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Replayer tries one spooled purchase. It returns the outcome, or an error
// when nothing could take it yet (the purchase stays spooled).
type Replayer func(ctx context.Context, e Entry) (Result, error)

// Run replays spooled purchases until ctx is done: up to Workers at once,
// each started in arrival order. A purchase the replayer cannot decide yet
// (its buyer's home is down, say) waits on its own backoff (250ms doubling
// to 5s) while the purchases behind it go on: one unhealthy shard holds up
// only the purchases that need it.
//
// Outcomes that could not be written (a full disk) are written first, with
// a backoff and one log line per failing stretch; nothing is replayed
// meanwhile, and the spool carries on by itself once the disk has room
// again.
func (s *Spool) Run(ctx context.Context, replay Replayer) {
	results := make(chan replayed, s.cfg.Workers) // never blocks a worker: at most Workers in flight
	var wg sync.WaitGroup
	inflight := map[string]bool{}
	waits := map[string]*retry{}
	defer func() { // the replays in flight finish, and their outcomes are kept
		go func() { wg.Wait(); close(results) }()
		for r := range results {
			s.replayed(r, inflight, waits)
		}
	}()
	writeBackoff := ha.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	failing := false
	for ctx.Err() == nil {
		if err := s.flush(); err != nil {
			if !failing {
				s.cfg.Logger.Error("spool: cannot write replay outcomes; replay waits until the disk takes them", "err", err)
			}
			failing = true
			select {
			case <-ctx.Done():
			case r := <-results:
				s.replayed(r, inflight, waits)
			case <-time.After(writeBackoff.Next()):
			}
			continue
		}
		if failing {
			s.cfg.Logger.Info("spool: outcomes written again; replay goes on")
			failing = false
			writeBackoff.Reset()
		}
		now := time.Now()
		ready, soonest := s.ready(s.cfg.Workers-len(inflight), inflight, waits, now)
		for _, e := range ready {
			inflight[e.Ticket] = true
			wg.Go(func() {
				res, err := replay(ctx, e)
				results <- replayed{e, res, err}
			})
		}
		wait := time.Second
		if !soonest.IsZero() {
			wait = max(soonest.Sub(now), time.Millisecond)
		}
		select {
		case <-ctx.Done():
		case r := <-results:
			s.replayed(r, inflight, waits)
		case <-s.wake:
		case <-s.now:
			clear(waits) // their backoffs start again from the shortest
		case <-time.After(wait):
		}
	}
}

// RetryNow has the purchases waiting on their backoff tried again at once:
// the caller knows something they waited for changed (a shard is back in
// line), so the buyers holding tickets need not wait up to 5 s more.
func (s *Spool) RetryNow() {
	select {
	case s.now <- struct{}{}:
	default:
	}
}

// replayed is one replay's outcome.
type replayed struct {
	e   Entry
	res Result
	err error
}

// retry is when a purchase the replayer could not decide is tried again.
type retry struct {
	at      time.Time
	backoff ha.Backoff
}

// replayed records r (Run's goroutine only: it owns inflight and waits).
func (s *Spool) replayed(r replayed, inflight map[string]bool, waits map[string]*retry) {
	t := r.e.Ticket
	delete(inflight, t)
	if d := shardstock.DoubtOf(r.err); d&^r.e.Doubt != 0 {
		s.doubt(t, d)
	}
	if r.err != nil {
		w := waits[t]
		if w == nil {
			w = &retry{backoff: ha.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}}
			waits[t] = w
		}
		d := w.backoff.Next()
		w.at = time.Now().Add(d)
		s.cfg.Logger.Debug("spool: replay must wait", "ticket", t, "err", r.err, "backoff", d)
		return
	}
	delete(waits, t)
	s.finish(t, r.res) // a failed write is kept and retried by Run
}

// ready returns up to n pending purchases, in arrival order, that are
// neither in flight nor waiting; soonest is when the first waiting one
// may be tried again (zero: none waits).
func (s *Spool) ready(n int, inflight map[string]bool, waits map[string]*retry, now time.Time) (out []Entry, soonest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.pending {
		if inflight[e.Ticket] {
			continue
		}
		if w := waits[e.Ticket]; w != nil && now.Before(w.at) {
			if soonest.IsZero() || w.at.Before(soonest) {
				soonest = w.at
			}
			continue
		}
		if len(out) == n {
			break
		}
		out = append(out, e)
	}
	return out, soonest
}

// finish records a purchase's outcome: at once in memory (the purchase is
// decided and is never replayed again), and on disk, now or, when the
// write fails, by Run later.
func (s *Spool) finish(ticket string, res Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := record{Kind: "done", Ticket: ticket, Result: &res}
	s.apply(rec)
	s.unwritten = append(s.unwritten, rec)
	if err := s.flushLocked(); err != nil {
		return err
	}
	if len(s.pending) == 0 && s.appending == 0 && s.size > s.cfg.MaxBytes/4 {
		if err := s.compact(time.Now().Add(-ticketRetention)); err != nil {
			s.cfg.Logger.Error("spool: compaction failed; the file keeps growing", "err", err)
		}
	}
	return nil
}

// doubt records that a pending purchase's tries left shards d in doubt
// (shardstock.InDoubt): at once in memory, so the next replay resolves
// them, and on disk like an outcome.
func (s *Spool) doubt(ticket string, d uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := record{Kind: "doubt", Ticket: ticket, Doubt: d}
	s.apply(rec)
	s.unwritten = append(s.unwritten, rec)
	s.flushLocked() // a failed write is kept and retried by Run
}

// flush writes the outcomes a failed write left in memory.
func (s *Spool) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

func (s *Spool) flushLocked() error {
	for len(s.unwritten) > 0 {
		if err := s.write(s.unwritten[0]); err != nil {
			return err
		}
		s.unwritten = s.unwritten[1:]
	}
	return nil
}

// ticketRetention is how long a replayed ticket's outcome stays readable
// after the spool is compacted.
const ticketRetention = time.Hour

// compact rewrites the log with only the newest tickets spooled after
// cutoff, at most an eighth of MaxBytes of them (nothing is pending when it
// runs), through a temporary file renamed over the old one; older tickets
// are forgotten. Caller holds mu.
func (s *Spool) compact(cutoff time.Time) error {
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	old, oldSize := s.f, s.size
	restore := func(err error) error {
		s.f, s.size = old, oldSize
		f.Close()
		os.Remove(tmp)
		return err
	}
	s.f, s.size = f, 0
	keep := make([]string, 0, len(s.tickets))
	for t := range s.tickets {
		keep = append(keep, t)
	}
	sort.Slice(keep, func(i, j int) bool { return s.tickets[keep[i]].seq > s.tickets[keep[j]].seq })
	// Keep the newest within the budget, then write them oldest first so
	// a reload sees them in arrival order.
	var budget int64
	kept := keep[:0]
	for _, t := range keep {
		ti := s.tickets[t]
		size := int64(len(t)+len(ti.entry.OrderID)+len(ti.entry.UserID)+len(ti.entry.ProductID)) + 200
		if time.UnixMilli(ti.entry.AtMS).Before(cutoff) || budget+size > s.cfg.MaxBytes/8 {
			delete(s.tickets, t)
			continue
		}
		budget += size
		kept = append(kept, t)
	}
	for i := len(kept) - 1; i >= 0; i-- {
		t := kept[i]
		e, r := s.tickets[t].entry, s.tickets[t].result
		if err := s.writeNoSync(record{Kind: "req", Entry: &e}); err != nil {
			return restore(err)
		}
		if err := s.writeNoSync(record{Kind: "done", Ticket: t, Result: &r}); err != nil {
			return restore(err)
		}
	}
	if err := f.Sync(); err != nil {
		return restore(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return restore(err)
	}
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		d.Sync()
		d.Close()
	}
	old.Close()
	return nil
}

// Close closes the file.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
