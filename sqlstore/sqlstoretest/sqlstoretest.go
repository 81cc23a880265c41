// Package sqlstoretest gives tests migrated SQL stores on real databases:
// SQLite in the test's temporary directory, and MariaDB on a fresh database
// when SHARDSTOCK_TEST_MYSQL names a server (make test starts one).
package sqlstoretest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/shardstock/shardstock/sqlstore"
)

// Stores returns a migrated store on each database of DSNs, by name.
func Stores(t testing.TB) map[string]*sqlstore.Store {
	t.Helper()
	out := map[string]*sqlstore.Store{}
	for name, dsn := range DSNs(t) {
		out[name] = Open(t, dsn)
	}
	return out
}

// DSNs names an empty SQLite database in the test's directory and, when
// SHARDSTOCK_TEST_MYSQL is set, a fresh MariaDB database (dropped when the
// test ends): "sqlite" and "mariadb". With SHARDSTOCK_TEST_REQUIRE_ALL=1 a
// missing SHARDSTOCK_TEST_MYSQL fails the test.
func DSNs(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{"sqlite": "sqlite:" + t.TempDir() + "/orders.db"}
	base := os.Getenv("SHARDSTOCK_TEST_MYSQL")
	if base == "" {
		if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
			t.Fatal("SHARDSTOCK_TEST_MYSQL is not set")
		}
		t.Log("SHARDSTOCK_TEST_MYSQL not set: MariaDB cases skipped (make test sets it)")
		return out
	}
	out["mariadb"] = FreshMySQL(t, base)
	return out
}

// FreshMySQL creates a database named t_<random> on the server of base (a
// mysql:// DSN), drops it when the test ends, and returns its DSN.
func FreshMySQL(t testing.TB, base string) string {
	t.Helper()
	admin, _, err := sqlstore.Connect(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE " + name)
		admin.Close()
	})
	return strings.TrimSuffix(base, "/") + "/" + name
}

// Open opens and migrates the store of dsn, closed when the test ends.
func Open(t testing.TB, dsn string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// DB opens the database of dsn itself (sqlstore.Connect), for tests that
// read or write its tables directly; closed when the test ends.
func DB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, _, err := sqlstore.Connect(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
