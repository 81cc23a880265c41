package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// Migrating twice changes nothing, and every migration file is recorded
// once.
func TestMigrateTwice(t *testing.T) {
	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".sql") { // another dialect's is recorded too
			n++
		}
	}
	for name, dsn := range sqlstoretest.DSNs(t) {
		t.Run(name, func(t *testing.T) {
			s := sqlstoretest.Open(t, dsn) // migrated once
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			db := sqlstoretest.DB(t, dsn)
			var v int
			if err := db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != n || v < 2 {
				t.Fatalf("%d migrations recorded, want one per migration (%d)", v, n)
			}
		})
	}
}

// Two coordinators share a SQLite file: while one holds the write lock, a
// write of the other waits for it on that store's one writer connection.
// Its reads (the product controls every coordinator polls for the kill
// switch, a buyer's order lookup) must not wait behind that write.
func TestSQLiteReadsDoNotQueueBehindAWrite(t *testing.T) {
	dsn := "sqlite:" + t.TempDir() + "/orders.db"
	s := sqlstoretest.Open(t, dsn)
	ctx := context.Background()
	if err := s.Controls.SetPaused(ctx, "p", true); err != nil {
		t.Fatal(err)
	}
	other, _, err := sqlstore.Connect(dsn, nil) // the other coordinator
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil) // BEGIN IMMEDIATE: it holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- s.Controls.SetPaused(ctx, "p", false) }() // waits for the lock on s's writer
	time.Sleep(200 * time.Millisecond)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := s.Controls.ProductControls(rctx)
	if err != nil {
		t.Fatalf("the controls, read while a write waits for the lock: %v", err)
	}
	if !c["p"].Paused {
		t.Fatalf("read %+v, want the last commit (paused)", c["p"])
	}
	if _, err := s.Orders.Order(rctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); err != nil {
		t.Fatalf("an order lookup while a write waits for the lock: %v", err)
	}
	tx.Rollback()
	if err := <-wrote; err != nil {
		t.Fatalf("the waiting write: %v", err)
	}
	if c, err := s.Controls.ProductControls(ctx); err != nil || c["p"].Paused {
		t.Fatalf("after the write: %+v %v", c["p"], err)
	}
}

// The SQLite order table and its -wal and -shm files are their owner's
// alone whatever the umask (they name buyers and orders; issue 25, item 4),
// and a file an older version left open to others is closed.
func TestSQLiteFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir() + "/data"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/old.db", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"new.db", "old.db"} {
		s := sqlstoretest.Open(t, "sqlite:"+dir+"/"+name) // migrated: the WAL is written
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{name, name + "-wal", name + "-shm"} {
			fi, err := os.Stat(dir + "/" + f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s is %v, want no access for group or others", f, fi.Mode().Perm())
			}
		}
	}
	sub := t.TempDir() + "/made/by/open"
	sqlstoretest.Open(t, "sqlite:"+sub+"/orders.db")
	if fi, err := os.Stat(sub); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory the store made: %v %v, want 0700", fi.Mode().Perm(), err)
	}
}

// The SQLite writer's connection runs with what its durability and cost
// rest on: WAL, synchronous=FULL (a committed order survives a machine
// crash), and the statement journal in memory (temp_store=MEMORY).
func TestSQLiteWriterPragmas(t *testing.T) {
	db, dialect, err := sqlstore.Connect("sqlite:"+t.TempDir()+"/orders.db", nil)
	if err != nil || dialect != "sqlite" {
		t.Fatalf("connect: %v %q", err, dialect)
	}
	defer db.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "temp_store": "2"} {
		var got string
		if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
			t.Fatalf("%s: %v", pragma, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

// Migrate runs with temporary files (an index a migration makes sorts on
// disk) and gives the writer back its statement journals in memory.
func TestMigrateLeavesTheWriterWithTempStoreInMemory(t *testing.T) {
	s := sqlstoretest.Open(t, "sqlite:"+t.TempDir()+"/orders.db") // migrated
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, err := sqlstore.WriterPragma(s, "temp_store"); err != nil || v != "2" {
		t.Fatalf("temp_store after Migrate = %q, %v; want 2 (MEMORY)", v, err)
	}
}

// The timeout sweep cancels the orders awaiting payment whose pay_by has
// passed, and the rows written before pay_by existed (NULL) by their
// reservation time; nothing else. Then the rows it cancelled are the ones
// to settle and whose claims to give back.
func TestCancelExpired(t *testing.T) {
	for name, dsn := range sqlstoretest.DSNs(t) {
		t.Run(name, func(t *testing.T) {
			s := sqlstoretest.Open(t, dsn)
			db := sqlstoretest.DB(t, dsn)
			ctx := context.Background()
			now := time.UnixMilli(1_000_000)
			cutoff := now.Add(-time.Minute)
			rows := []struct {
				id, status string
				reservedAt int64
				payBy      any
			}{
				{"due", "awaiting_payment", cutoff.UnixMilli() + 10, now.UnixMilli() - 1},
				{"not-due", "awaiting_payment", cutoff.UnixMilli() - 10, now.UnixMilli() + 1},
				{"old-due", "awaiting_payment", cutoff.UnixMilli() - 1, nil},
				{"old-not-due", "awaiting_payment", cutoff.UnixMilli() + 1, nil},
				{"paid", "paid", cutoff.UnixMilli() - 10, now.UnixMilli() - 10},
				{"failed", "failed", cutoff.UnixMilli() - 10, nil},
			}
			for i, r := range rows {
				if _, err := db.ExecContext(ctx, `INSERT INTO orders
					(id, product_id, user_id, shard, seq, status, reserved_at, created_at, updated_at, settle_pending, claim_pending, pay_by)
					VALUES (?, 'p', ?, 0, 1, ?, ?, 0, 0, 0, 0, ?)`, r.id, r.id, r.status, r.reservedAt, r.payBy); err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
			}
			n, err := s.Orders.CancelExpired(ctx, cutoff, now)
			if err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Fatalf("cancelled %d, want 2 (due, old-due)", n)
			}
			for _, r := range rows {
				var status string
				if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = ?`, r.id).Scan(&status); err != nil {
					t.Fatal(err)
				}
				want := r.status
				if r.id == "due" || r.id == "old-due" {
					want = "cancelled"
				}
				if status != want {
					t.Errorf("%s: %s, want %s", r.id, status, want)
				}
			}
			unsettled, err := s.Orders.Unsettled(ctx, 10, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(unsettled) != 2 {
				t.Fatalf("unsettled: %v, want the 2 cancelled", unsettled)
			}
			for _, o := range unsettled {
				if err := s.Orders.MarkSettled(ctx, o.ID, o.Status); err != nil {
					t.Fatal(err)
				}
			}
			claims, err := s.Orders.ClaimsPending(ctx, "", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 2 {
				t.Fatalf("claims pending: %v, want the 2 cancelled", claims)
			}
		})
	}
}

// InsertBatch cuts a batch into statements of a few prepared sizes: a
// batch of any size writes each new reservation once, leaves the ids that
// have a row alone (a repeat within the batch too), and gives each buyer a
// seq while the limit lasts (2 here), the rest failed.
func TestInsertBatchOfEverySize(t *testing.T) {
	for name, dsn := range sqlstoretest.DSNs(t) {
		t.Run(name, func(t *testing.T) {
			s := sqlstoretest.Open(t, dsn)
			ctx := context.Background()
			now := time.UnixMilli(2_000_000)
			next := 0
			ids := map[string]int{} // buyer -> reservation ids written for them
			for _, size := range []int{1, 2, 3, 31, 63, 64, 65, 127, 129, 500} {
				var rows []shardstock.NewOrder
				seen, start := map[string]bool{}, next
				for i := range size {
					id := fmt.Sprintf("r%d", next)
					if i%7 == 3 && next > 0 {
						id = fmt.Sprintf("r%d", max(0, next-1-i%3)) // written already, or earlier in this batch
					} else {
						next++
					}
					// buyer u<size>-<k> has three reservations in a row: the third fails (limit 2)
					ev := shardstock.ReservationEvent{ID: id, UserID: fmt.Sprintf("u%d-%d", size, i/3), ProductID: "p", Shard: i % 3, AtMS: now.UnixMilli()}
					rows = append(rows, shardstock.NewOrder{Event: ev, Limit: 2, Status: shardstock.StatusAwaitingPayment})
				}
				got, err := s.Orders.InsertBatch(ctx, rows, now, now.Add(time.Minute))
				if err != nil {
					t.Fatalf("batch of %d: %v", size, err)
				}
				if len(got) != size {
					t.Fatalf("batch of %d: %d statuses", size, len(got))
				}
				for i, r := range rows {
					fresh := !seen[r.Event.ID] && mustIndex(t, r.Event.ID) >= start
					seen[r.Event.ID] = true
					if !fresh {
						if got[i] != "" {
							t.Fatalf("batch of %d, row %d: %s has a row already, written again (%s)", size, i, r.Event.ID, got[i])
						}
						continue
					}
					ids[r.Event.UserID]++
					o, err := s.Orders.Order(ctx, r.Event.ID)
					if err != nil || got[i] == "" || o.Status != got[i] || o.UserID != r.Event.UserID {
						t.Fatalf("batch of %d, row %d: %s answered %q, row %+v, %v", size, i, r.Event.ID, got[i], o, err)
					}
				}
			}
			counts, err := s.Orders.CountByStatus(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			awaiting := int64(0)
			for _, n := range ids {
				awaiting += int64(min(n, 2))
			}
			if counts[shardstock.StatusAwaitingPayment] != awaiting || counts[shardstock.StatusFailed] != int64(next)-awaiting {
				t.Fatalf("%v, want %d awaiting payment (each buyer's first two) and %d failed", counts, awaiting, int64(next)-awaiting)
			}
		})
	}
}

// mustIndex is the number of reservation id "r<n>".
func mustIndex(t *testing.T, id string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
