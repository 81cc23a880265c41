package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// The plain statements the coordinators' loops repeat — every second the
// order sweep, the transfer resume, the product controls; every order
// look-up — are prepared once per database and kept, by their text, so
// SQLite does not parse and compile each again (about 60% of SQLite's CPU
// in the model test's fast mode, where 16 minutes of those loops pass at
// each payment timeout) and MySQL runs each in one round trip instead of
// prepare, execute and close. Statements built with a variable number of
// parameters come in few shapes; past maxCachedStmts, a statement runs
// unprepared.

const maxCachedStmts = 256

// stmtDB runs plain statements on db through prepared statements it keeps.
type stmtDB struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtDB(db *sql.DB) *stmtDB { return &stmtDB{db: db, m: map[string]*sql.Stmt{}} }

// stmt is q prepared on the database, or nil (the cache is full, or the
// database did not prepare it: the caller runs q unprepared, and reports
// whatever error that gives).
func (d *stmtDB) stmt(ctx context.Context, q string) *sql.Stmt {
	d.mu.Lock()
	st, ok := d.m[q]
	full := len(d.m) >= maxCachedStmts
	d.mu.Unlock()
	if ok || full {
		return st
	}
	st, err := d.db.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if prev, ok := d.m[q]; ok { // prepared meanwhile by another caller
		st.Close()
		return prev
	}
	d.m[q] = st
	return st
}

func (d *stmtDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := d.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return d.db.ExecContext(ctx, q, args...)
}

func (d *stmtDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return d.db.QueryContext(ctx, q, args...)
}

func (d *stmtDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRowContext(ctx, q, args...)
}

// close closes the kept statements.
func (d *stmtDB) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for q, st := range d.m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
		delete(d.m, q)
	}
	return first
}
