package sqlstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

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
			db, _, err := sqlstore.Connect(dsn, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
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
	if err := s.SetPaused(ctx, "p", true); err != nil {
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
	go func() { wrote <- s.SetPaused(ctx, "p", false) }() // waits for the lock on s's writer
	time.Sleep(200 * time.Millisecond)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := s.ProductControls(rctx)
	if err != nil {
		t.Fatalf("the controls, read while a write waits for the lock: %v", err)
	}
	if !c["p"].Paused {
		t.Fatalf("read %+v, want the last commit (paused)", c["p"])
	}
	if _, err := s.Order(rctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); err != nil {
		t.Fatalf("an order lookup while a write waits for the lock: %v", err)
	}
	tx.Rollback()
	if err := <-wrote; err != nil {
		t.Fatalf("the waiting write: %v", err)
	}
	if c, err := s.ProductControls(ctx); err != nil || c["p"].Paused {
		t.Fatalf("after the write: %+v %v", c["p"], err)
	}
}
