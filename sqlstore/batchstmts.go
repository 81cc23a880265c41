package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
)

// InsertBatch's statements — the look-up of the ids that have a row, the
// read of the buyers' seqs, the multi-row INSERT — are prepared once per
// store, for row counts that are powers of two up to maxChunk: a batch is
// cut into such pieces and the IN lists are padded to one. Preparing them
// for every batch (SQLite parsing and compiling a 64-row INSERT) was about
// a fifth of an order row's CPU (issue 26: a scratch run of 200,000 rows in
// batches of 500, modernc SQLite, 25 against 19-21 us a row).

// maxChunk bounds the rows of one statement (12 parameters a row, well
// under SQLite's and MySQL's parameter limits).
const maxChunk = 64

// pieces cuts n rows into powers of two up to maxChunk, largest first.
func pieces(n int) []int {
	var out []int
	for n > 0 {
		k := maxChunk
		for k > n {
			k /= 2
		}
		out, n = append(out, k), n-k
	}
	return out
}

// padded is the smallest power of two at least n (n ≤ maxChunk): an IN
// list of n values is sent with that many, the last repeated.
func padded(n int) int {
	k := 1
	for k < n {
		k *= 2
	}
	return k
}

// padArgs repeats args' last value up to n values.
func padArgs(args []any, n int) []any {
	for len(args) < n {
		args = append(args, args[len(args)-1])
	}
	return args
}

func existsQuery(n int) string {
	return `SELECT id FROM orders WHERE id IN (` + placeholders(n) + `)`
}

func seqsQuery(n int) string {
	return `SELECT user_id, seq FROM orders WHERE product_id = ? AND seq IS NOT NULL AND user_id IN (` + placeholders(n) + `)`
}

func insertQuery(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO orders (id, product_id, user_id, shard, seq, status, reserved_at, created_at, updated_at, settle_pending, claim_pending, pay_by) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	return b.String()
}

// batchStmts are the prepared statements of InsertBatch, by query text.
// Their lock is a channel: whoever prepares them holds it while waiting
// for the database, and a wait on a channel is one a synctest bubble's
// fake clock moves on from (the model test's fast mode), a wait on a
// sync.Mutex is not.
type batchStmts struct {
	lock  chan struct{}        // 1 buffered: held while full
	stmts map[string]*sql.Stmt // nil until all are prepared
}

func newBatchStmts() *batchStmts { return &batchStmts{lock: make(chan struct{}, 1)} }

// prepared returns the batch statements, preparing them on db the first
// time. It must be called outside any transaction of db: SQLite's writer is
// one connection, and preparing while this process's transaction holds it
// would wait for itself. A statement that cannot be prepared (the database
// is down) leaves them all unprepared until a later call: nil, and the
// batch runs its statements unprepared.
func (b *batchStmts) prepared(ctx context.Context, db *sql.DB) map[string]*sql.Stmt {
	select {
	case b.lock <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	defer func() { <-b.lock }()
	if b.stmts != nil {
		return b.stmts
	}
	stmts := map[string]*sql.Stmt{}
	for k := 1; k <= maxChunk; k *= 2 {
		for _, q := range []string{existsQuery(k), seqsQuery(k), insertQuery(k)} {
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				for _, st := range stmts {
					st.Close()
				}
				return nil
			}
			stmts[q] = st
		}
	}
	b.stmts = stmts
	return stmts
}

// close closes the prepared statements.
func (b *batchStmts) close() error {
	b.lock <- struct{}{}
	defer func() { <-b.lock }()
	var errs []error
	for _, st := range b.stmts {
		errs = append(errs, st.Close())
	}
	b.stmts = nil
	return errors.Join(errs...)
}

// stmtTx runs a query through the transaction's copy of its prepared
// statement when there is one.
type stmtTx struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (t stmtTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.stmts[query]; st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

func (t stmtTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.stmts[query]; st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}
