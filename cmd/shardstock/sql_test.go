package main

import (
	"context"
	"crypto/x509"
	"database/sql"
	"testing"

	"github.com/shardstock/shardstock/sqlstore"
)

// testDB reads and writes a database directly, as an operator's client
// would (grants, TLS, rows the app's API does not show).
type testDB struct{ *sql.DB }

// openDB opens the database of dsn (sqlstore.Connect), closed when the test
// ends; roots verify a MySQL server reached with ?tls=true.
func openDB(t testing.TB, dsn string, roots *x509.CertPool) testDB {
	t.Helper()
	db, _, err := sqlstore.Connect(dsn, roots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return testDB{db}
}

// Exec runs one statement.
func (d testDB) Exec(ctx context.Context, stmt string) error {
	_, err := d.DB.ExecContext(ctx, stmt)
	return err
}

// Query runs a query and returns its rows as strings.
func (d testDB) Query(ctx context.Context, q string, args ...any) ([][]string, error) {
	rows, err := d.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
		}
		out = append(out, row)
	}
	return out, rows.Err()
}
