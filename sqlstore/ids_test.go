package sqlstore_test

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// Ids are compared exactly, as Redis and SQLite compare them: on MariaDB
// every string column of every table — the ones a later migration adds
// too — has a binary utf8mb4 collation, and so do the defaults a table or
// column created without COLLATE takes.
func TestMariaDBComparesEveryStringExactly(t *testing.T) {
	dsn, ok := sqlstoretest.DSNs(t)["mariadb"]
	if !ok {
		t.Skip("no MariaDB")
	}
	sqlstoretest.Open(t, dsn) // migrated
	db := sqlstoretest.DB(t, dsn)
	for _, c := range []struct {
		name, query, mustHave string
	}{
		{"column", `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME), COLLATION_NAME FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL`, "product_controls.product_id"},
		{"table default (of a column added without COLLATE)", `SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'`, "product_archive"},
		{"database default (of a table created without COLLATE)", `SELECT 'database', DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA
			WHERE SCHEMA_NAME = DATABASE()`, "database"},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := collations(t, db, c.query+` ORDER BY 1`)
			if _, ok := seen[c.mustHave]; !ok {
				t.Fatalf("%s not found among %v", c.mustHave, seen)
			}
			for _, what := range slices.Sorted(maps.Keys(seen)) {
				if coll := seen[what]; !strings.HasPrefix(coll, "utf8mb4_") || !strings.HasSuffix(coll, "_bin") {
					t.Errorf("%s: collation %s, want utf8mb4_bin (exact comparison)", what, coll)
				}
			}
		})
	}
}

// collations runs query, which selects (name, collation) rows.
func collations(t *testing.T, db *sql.DB, query string) map[string]string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, coll string
		if err := rows.Scan(&name, &coll); err != nil {
			t.Fatal(err)
		}
		out[name] = coll
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Products lamp and Lamp are two products: pausing or archiving one leaves
// the other as it was.
func TestProductControlsKeepCaseApart(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			must(t, s.Controls.SetPaused(ctx, "lamp", true))
			must(t, s.Controls.SetPaused(ctx, "Lamp", false))
			must(t, s.Controls.SetArchive(ctx, "Vase", shardstock.ArchiveDone))
			must(t, s.Controls.SetPaused(ctx, "vase", false))
			must(t, s.Controls.RecordArchiveTotals(ctx, "Vase", []shardstock.ShardTotals{{Shard: 0, Sold: 5}}))
			must(t, s.Controls.RecordArchiveTotals(ctx, "vase", []shardstock.ShardTotals{{Shard: 0, Sold: 7}}))
			c, err := s.Controls.ProductControls(ctx)
			must(t, err)
			for _, want := range []struct {
				id       string
				controls shardstock.Controls
			}{
				{"lamp", shardstock.Controls{Paused: true, Version: 1}}, // (one change each)
				{"Lamp", shardstock.Controls{Version: 1}},
				{"Vase", shardstock.Controls{Archive: shardstock.ArchiveDone, Version: 1}},
				{"vase", shardstock.Controls{Version: 1}},
			} {
				got, ok := c[want.id]
				if !ok || got != want.controls {
					t.Errorf("controls of %s: %+v (on record: %v), want %+v", want.id, got, ok, want.controls)
				}
			}
			for id, sold := range map[string]int64{"Vase": 5, "vase": 7} {
				totals, err := s.Controls.ArchiveTotals(ctx, id)
				must(t, err)
				if len(totals) != 1 || totals[0].Sold != sold {
					t.Errorf("archive totals of %s: %+v, want one shard with %d sold", id, totals, sold)
				}
			}
		})
	}
}

// Payment transactions tx-A and tx-a are two payments: the second is not a
// replay of the first.
func TestPaymentTransactionsKeepCaseApart(t *testing.T) {
	for name, s := range sqlstoretest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for _, c := range []struct{ transaction, order string }{{"tx-A", "order-1"}, {"tx-a", "order-2"}} {
				was, err := s.Orders.RecordTransaction(ctx, c.transaction, c.order)
				must(t, err)
				if was != "" {
					t.Errorf("transaction %s of %s: on record for %s already, want new", c.transaction, c.order, was)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
