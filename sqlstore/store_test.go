package sqlstore_test

import (
	"context"
	"os"
	"strings"
	"testing"

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
