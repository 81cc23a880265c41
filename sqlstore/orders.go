package sqlstore

// The order rows: written once per reservation, moved through the order
// state machine, swept for timeouts and settlements, counted.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardstock/shardstock"
)

const orderColumns = `id, user_id, product_id, shard, status, pay_by, reserved_at`

func scanOrder(row interface{ Scan(...any) error }) (*shardstock.Order, error) {
	var o shardstock.Order
	var payBy, reserved sql.NullInt64
	if err := row.Scan(&o.ID, &o.UserID, &o.ProductID, &o.Shard, &o.Status, &payBy, &reserved); err != nil {
		return nil, err
	}
	if reserved.Valid && reserved.Int64 > 0 {
		o.ReservedAt = time.UnixMilli(reserved.Int64)
	}
	if payBy.Valid && o.Status == shardstock.StatusAwaitingPayment {
		o.PayBy = time.UnixMilli(payBy.Int64).UTC()
	}
	return &o, nil
}

// Order returns order id, or nil if there is none.
func (s *Orders) Order(ctx context.Context, id string) (*shardstock.Order, error) {
	o, err := scanOrder(s.reads.QueryRowContext(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load order %s: %w", id, err)
	}
	return o, nil
}

// Insert writes the order row of reservation ev. With status
// awaiting_payment it takes the buyer's lowest free seq in 1..limit; when
// none is free the order is written as failed instead (the per-user limit's
// last guard) and marked for settlement. It returns the status written, or
// shardstock.ErrOrderExists when the reservation id has a row already.
func (s *Orders) Insert(ctx context.Context, ev shardstock.ReservationEvent, limit int64, status shardstock.OrderStatus, now, payBy time.Time) (shardstock.OrderStatus, error) {
	for attempt := 0; ; attempt++ {
		written, err := s.insertOnce(ctx, ev, limit, status, now, payBy)
		if err == nil || !(isDuplicate(err) || isLockConflict(err)) || attempt >= 5 {
			return written, err
		}
		if isLockConflict(err) {
			continue
		}
		if o, lerr := s.Order(ctx, ev.ID); lerr != nil {
			return "", lerr
		} else if o != nil {
			return "", shardstock.ErrOrderExists
		}
		// Another order of the same buyer took the seq first: try the next.
	}
}

func (s *Orders) insertOnce(ctx context.Context, ev shardstock.ReservationEvent, limit int64, status shardstock.OrderStatus, now, payBy time.Time) (shardstock.OrderStatus, error) {
	return insertRow(ctx, s.db, ev, limit, status, now, payBy)
}

// dbtx is what one insert needs: the database, or a transaction.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func insertRow(ctx context.Context, q dbtx, ev shardstock.ReservationEvent, limit int64, status shardstock.OrderStatus, now, payBy time.Time) (shardstock.OrderStatus, error) {
	var seq sql.NullInt64
	if status == shardstock.StatusAwaitingPayment {
		free, err := freeSeq(ctx, q, ev.ProductID, ev.UserID, limit)
		if err != nil {
			return "", err
		}
		if free == 0 {
			status = shardstock.StatusFailed
		} else {
			seq = sql.NullInt64{Int64: free, Valid: true}
		}
	}
	pending := 0
	if status != shardstock.StatusAwaitingPayment {
		pending = 1 // failed: the unit goes back on sale, the claim back to the buyer
	}
	ms := now.UnixMilli()
	_, err := q.ExecContext(ctx, `INSERT INTO orders
		(id, product_id, user_id, shard, seq, status, reserved_at, created_at, updated_at, settle_pending, claim_pending, pay_by)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ev.ID, ev.ProductID, ev.UserID, ev.Shard, seq, status, ev.AtMS, ms, ms, pending, pending, payByOf(status, payBy))
	return status, err
}

// payByOf is the pay_by column of a row written with status.
func payByOf(status shardstock.OrderStatus, payBy time.Time) sql.NullInt64 {
	if status != shardstock.StatusAwaitingPayment {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: payBy.UnixMilli(), Valid: true}
}

// InsertBatch writes the rows of several reservations in one transaction,
// as Insert would write each: one commit (one disk flush) instead of one per
// order. It returns the status written per row, "" for a reservation id
// that has a row already (left as it is). Any error rolls the whole batch
// back — a seq taken meanwhile by another process included — and the caller
// falls back to Insert, row by row.
func (s *Orders) InsertBatch(ctx context.Context, rows []shardstock.NewOrder, now, payBy time.Time) ([]shardstock.OrderStatus, error) {
	for attempt := 0; ; attempt++ {
		out, err := s.insertBatch(ctx, rows, now, payBy)
		if err == nil || !isLockConflict(err) || attempt >= 3 {
			return out, err
		}
	}
}

func (s *Orders) insertBatch(ctx context.Context, rows []shardstock.NewOrder, now, payBy time.Time) ([]shardstock.OrderStatus, error) {
	stmts := s.batch.prepared(ctx, s.db) // before the transaction: see prepared
	t, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer t.Rollback()
	tx := stmtTx{tx: t, stmts: stmts}
	exists, err := existingIDs(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	seqs, err := seqsInUse(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	out := make([]shardstock.OrderStatus, len(rows))
	var fresh []insertValues
	for i, r := range rows {
		if exists[r.Event.ID] {
			continue // exists: out[i] stays ""
		}
		exists[r.Event.ID] = true // a repeat within the batch is a repeat too
		v := insertValues{ev: r.Event, status: r.Status}
		if v.status == shardstock.StatusAwaitingPayment {
			v.seq = seqs.take(r.Event.ProductID, r.Event.UserID, r.Limit)
			if !v.seq.Valid {
				v.status = shardstock.StatusFailed
			}
		}
		out[i] = v.status
		fresh = append(fresh, v)
	}
	if err := insertAll(ctx, tx, fresh, now, payBy); err != nil {
		return nil, fmt.Errorf("insert %d orders: %w", len(fresh), err)
	}
	if err := t.Commit(); err != nil {
		return nil, fmt.Errorf("commit %d orders: %w", len(rows), err)
	}
	return out, nil
}

// existingIDs returns which of the rows' reservation ids have an order row.
func existingIDs(ctx context.Context, q dbtx, rows []shardstock.NewOrder) (map[string]bool, error) {
	out := make(map[string]bool, len(rows))
	for lo := 0; lo < len(rows); lo += maxChunk {
		chunk := rows[lo:min(lo+maxChunk, len(rows))]
		args := make([]any, len(chunk), padded(len(chunk)))
		for i, r := range chunk {
			args[i] = r.Event.ID
		}
		n := padded(len(chunk))
		if err := collect(ctx, q, existsQuery(n), padArgs(args, n), func(r *sql.Rows) error {
			var id string
			err := r.Scan(&id)
			out[id] = true
			return err
		}); err != nil {
			return nil, fmt.Errorf("look up orders: %w", err)
		}
	}
	return out, nil
}

// usedSeqs are the seqs the live orders of some buyers use, by product and
// buyer.
type usedSeqs map[[2]string]map[int64]bool

// take returns the lowest seq in 1..limit the buyer's live orders do not
// use and marks it used; invalid when all are.
func (u usedSeqs) take(product, user string, limit int64) sql.NullInt64 {
	k := [2]string{product, user}
	if u[k] == nil {
		u[k] = map[int64]bool{}
	}
	for n := int64(1); n <= limit; n++ {
		if !u[k][n] {
			u[k][n] = true
			return sql.NullInt64{Int64: n, Valid: true}
		}
	}
	return sql.NullInt64{}
}

// seqsInUse reads the seqs the batch's buyers' live orders use.
func seqsInUse(ctx context.Context, q dbtx, rows []shardstock.NewOrder) (usedSeqs, error) {
	users := map[string][]any{} // product -> buyers
	seen := map[[2]string]bool{}
	for _, r := range rows {
		k := [2]string{r.Event.ProductID, r.Event.UserID}
		if r.Status == shardstock.StatusAwaitingPayment && !seen[k] {
			seen[k] = true
			users[k[0]] = append(users[k[0]], k[1])
		}
	}
	out := usedSeqs{}
	for product, us := range users {
		for lo := 0; lo < len(us); lo += maxChunk {
			chunk := us[lo:min(lo+maxChunk, len(us))]
			n := padded(len(chunk))
			args := padArgs(append([]any{product}, chunk...), n+1)
			err := collect(ctx, q, seqsQuery(n), args, func(r *sql.Rows) error {
				var user string
				var seq int64
				if err := r.Scan(&user, &seq); err != nil {
					return err
				}
				k := [2]string{product, user}
				if out[k] == nil {
					out[k] = map[int64]bool{}
				}
				out[k][seq] = true
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("read seqs: %w", err)
			}
		}
	}
	return out, nil
}

type insertValues struct {
	ev     shardstock.ReservationEvent
	seq    sql.NullInt64
	status shardstock.OrderStatus
}

// insertAll writes rows with multi-row INSERTs (pieces of maxChunk rows or
// fewer).
func insertAll(ctx context.Context, q dbtx, rows []insertValues, now, payBy time.Time) error {
	ms := now.UnixMilli()
	for _, n := range pieces(len(rows)) {
		chunk := rows[:n]
		rows = rows[n:]
		args := make([]any, 0, 12*n)
		for _, v := range chunk {
			pending := 0
			if v.status != shardstock.StatusAwaitingPayment {
				pending = 1
			}
			args = append(args, v.ev.ID, v.ev.ProductID, v.ev.UserID, v.ev.Shard, v.seq, v.status, v.ev.AtMS, ms, ms, pending, pending, payByOf(v.status, payBy))
		}
		if _, err := q.ExecContext(ctx, insertQuery(n), args...); err != nil {
			return err
		}
	}
	return nil
}

// placeholders is "?, ?, …" for n parameters.
func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// collect runs query and calls row for each result row.
func collect(ctx context.Context, q dbtx, query string, args []any, row func(*sql.Rows) error) error {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := row(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// freeSeq returns the lowest seq in 1..limit the buyer's live orders of the
// product do not use, or 0.
func freeSeq(ctx context.Context, q dbtx, product, user string, limit int64) (int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq FROM orders WHERE product_id = ? AND user_id = ? AND seq IS NOT NULL`, product, user)
	if err != nil {
		return 0, fmt.Errorf("read seqs: %w", err)
	}
	defer rows.Close()
	used := map[int64]bool{}
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		used[n] = true
	}
	for n := int64(1); n <= limit; n++ {
		if !used[n] {
			return n, rows.Err()
		}
	}
	return 0, rows.Err()
}

// Transition moves order id of user from awaiting_payment to status (paid,
// or cancelled, which frees its seq) and marks it for settlement. It
// reports whether this call made the change.
func (s *Orders) Transition(ctx context.Context, id, user string, status shardstock.OrderStatus, now time.Time) (bool, error) {
	res, err := s.exec(ctx, `UPDATE orders
		SET status = ?, seq = CASE WHEN ? = 'paid' THEN seq ELSE NULL END, settle_pending = 1,
		    claim_pending = CASE WHEN ? = 'paid' THEN 0 ELSE 1 END, updated_at = ?
		WHERE id = ? AND user_id = ? AND status = 'awaiting_payment'`,
		status, status, status, now.UnixMilli(), id, user)
	if err != nil {
		return false, fmt.Errorf("order %s -> %s: %w", id, status, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// CancelExpired cancels every order still awaiting payment whose payment
// deadline (pay_by) passed by now, and returns how many. Rows from before
// pay_by keep the old rule: reserved before cutoff. Two statements, so each
// is a range of the (status, pay_by) index (their OR in one would read every
// order awaiting payment).
func (s *Orders) CancelExpired(ctx context.Context, cutoff, now time.Time) (int64, error) {
	const cancel = `UPDATE orders
		SET status = 'cancelled', seq = NULL, settle_pending = 1, claim_pending = 1, updated_at = ?
		WHERE status = 'awaiting_payment' AND `
	var n int64
	for _, st := range []struct {
		where string
		arg   int64
	}{{`pay_by < ?`, now.UnixMilli()}, {`pay_by IS NULL AND reserved_at < ?`, cutoff.UnixMilli()}} {
		res, err := s.exec(ctx, cancel+st.where, now.UnixMilli(), st.arg)
		if err != nil {
			return n, fmt.Errorf("cancel expired: %w", err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return n, fmt.Errorf("cancel expired: %w", err)
		}
		n += k
	}
	return n, nil
}

// Unsettled returns up to limit orders whose final status the holder shard
// has not been told yet, leaving out the shards in skip.
func (s *Orders) Unsettled(ctx context.Context, limit int, skip []int) ([]shardstock.Order, error) {
	q, args := `SELECT `+orderColumns+` FROM orders WHERE settle_pending = 1`, []any{}
	if len(skip) > 0 {
		q += ` AND shard NOT IN (?` + strings.Repeat(`, ?`, len(skip)-1) + `)`
		for _, sh := range skip {
			args = append(args, sh)
		}
	}
	out, err := s.orders(ctx, q+` LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("unsettled: %w", err)
	}
	return out, nil
}

// orders runs a query of orderColumns and scans its rows.
func (s *Orders) orders(ctx context.Context, q string, args ...any) ([]shardstock.Order, error) {
	var out []shardstock.Order
	err := collect(ctx, s.writes, q, args, func(r *sql.Rows) error {
		o, err := scanOrder(r)
		if err == nil {
			out = append(out, *o)
		}
		return err
	})
	return out, err
}

// MarkSettled clears the settlement mark of order id if it is still in
// status (a later change would have set it again).
func (s *Orders) MarkSettled(ctx context.Context, id string, status shardstock.OrderStatus) error {
	_, err := s.exec(ctx, `UPDATE orders SET settle_pending = 0 WHERE id = ? AND status = ?`, id, status)
	if err != nil {
		return fmt.Errorf("mark settled %s: %w", id, err)
	}
	return nil
}

// ClaimsPending lists up to limit cancelled or failed orders whose
// settlement the transport took and whose buyer's per-user limit claim has
// not been given back yet, in id order from after the id after ("": from
// the first), so that a sweep pages past claims it could not give back.
func (s *Orders) ClaimsPending(ctx context.Context, after string, limit int) ([]shardstock.Order, error) {
	out, err := s.orders(ctx, `SELECT `+orderColumns+` FROM orders WHERE claim_pending = 1 AND settle_pending = 0 AND id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("claims pending: %w", err)
	}
	return out, nil
}

// MarkClaimReturned records that order id's claim was given back.
func (s *Orders) MarkClaimReturned(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `UPDATE orders SET claim_pending = 0 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("mark claim returned %s: %w", id, err)
	}
	return nil
}

// Resettle marks the final orders of product held on shards for settlement again (safe:
// settlements are idempotent) and returns how many.
func (s *Orders) Resettle(ctx context.Context, product string, shards []int) (int64, error) {
	if len(shards) == 0 {
		return 0, nil
	}
	args := []any{product}
	for _, sh := range shards {
		args = append(args, sh)
	}
	res, err := s.exec(ctx, `UPDATE orders SET settle_pending = 1
		WHERE product_id = ? AND status IN ('paid', 'cancelled', 'failed') AND shard IN (`+placeholders(len(shards))+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("resettle %s: %w", product, err)
	}
	return res.RowsAffected()
}

// LiveOrders lists the orders of product held on shard that are awaiting
// payment or paid (the order table's side of a per-user limit register
// rebuild, shard.Ledger).
func (s *Orders) LiveOrders(ctx context.Context, product string, shard int) ([]shardstock.Order, error) {
	out, err := s.orders(ctx, `SELECT `+orderColumns+` FROM orders WHERE product_id = ? AND shard = ? AND status IN (?, ?)`,
		product, shard, shardstock.StatusAwaitingPayment, shardstock.StatusPaid)
	if err != nil {
		return nil, fmt.Errorf("live orders: %w", err)
	}
	return out, nil
}

// ReleasedOrders lists the orders of product, on every shard, that were
// cancelled or failed (their buyers' claims are given back for good).
func (s *Orders) ReleasedOrders(ctx context.Context, product string) ([]shardstock.Order, error) {
	out, err := s.orders(ctx, `SELECT `+orderColumns+` FROM orders WHERE product_id = ? AND status IN (?, ?)`,
		product, shardstock.StatusCancelled, shardstock.StatusFailed)
	if err != nil {
		return nil, fmt.Errorf("released orders: %w", err)
	}
	return out, nil
}

// FinalOrders lists the orders of product held on shard that are paid,
// cancelled or failed (what a restarted shard must have settled).
func (s *Orders) FinalOrders(ctx context.Context, product string, shard int) ([]shardstock.Order, error) {
	out, err := s.orders(ctx, `SELECT `+orderColumns+` FROM orders WHERE product_id = ? AND shard = ? AND status IN (?, ?, ?)`,
		product, shard, shardstock.StatusPaid, shardstock.StatusCancelled, shardstock.StatusFailed)
	if err != nil {
		return nil, fmt.Errorf("final orders: %w", err)
	}
	return out, nil
}

// CountsByShard counts a product's orders per shard and status.
func (s *Orders) CountsByShard(ctx context.Context, product string) (map[int]shardstock.OrderCounts, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT shard, status, COUNT(*) FROM orders WHERE product_id = ? GROUP BY shard, status`, product)
	if err != nil {
		return nil, fmt.Errorf("count orders: %w", err)
	}
	defer rows.Close()
	out := map[int]shardstock.OrderCounts{}
	for rows.Next() {
		var shard int
		var status shardstock.OrderStatus
		var n int64
		if err := rows.Scan(&shard, &status, &n); err != nil {
			return nil, err
		}
		c := out[shard]
		switch status {
		case shardstock.StatusAwaitingPayment:
			c.AwaitingPayment += n
		case shardstock.StatusPaid:
			c.Paid += n
		default:
			c.Released += n
		}
		out[shard] = c
	}
	return out, rows.Err()
}

// CountAllByStatus counts every order by status.
func (s *Orders) CountAllByStatus(ctx context.Context) (map[shardstock.OrderStatus]int64, error) {
	return s.countBy(ctx, `SELECT status, COUNT(*) FROM orders GROUP BY status`)
}

// CountByStatus counts every order of product by status.
func (s *Orders) CountByStatus(ctx context.Context, product string) (map[shardstock.OrderStatus]int64, error) {
	return s.countBy(ctx, `SELECT status, COUNT(*) FROM orders WHERE product_id = ? GROUP BY status`, product)
}

func (s *Orders) countBy(ctx context.Context, q string, args ...any) (map[shardstock.OrderStatus]int64, error) {
	rows, err := s.reads.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count orders: %w", err)
	}
	defer rows.Close()
	out := map[shardstock.OrderStatus]int64{}
	for rows.Next() {
		var st shardstock.OrderStatus
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// OpenOrders counts product id's orders awaiting payment, and those whose
// final status the holder shard has not been told yet.
func (s *Orders) OpenOrders(ctx context.Context, id string) (awaiting, unsettled int64, err error) {
	err = s.reads.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN status = 'awaiting_payment' THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN settle_pending = 1 THEN 1 ELSE 0 END), 0)
		FROM orders WHERE product_id = ?`, id).Scan(&awaiting, &unsettled)
	if err != nil {
		return 0, 0, fmt.Errorf("open orders of %s: %w", id, err)
	}
	return awaiting, unsettled, nil
}

// RecordTransaction puts a payment provider's transaction id on record for
// order id, once. It returns the order the id was on record for before
// (id itself for a repeat), or "" when this call recorded it.
func (s *Orders) RecordTransaction(ctx context.Context, transaction, id string) (string, error) {
	_, err := s.db.ExecContext(ctx, `INSERT INTO payment_transactions (transaction_id, order_id, created_at) VALUES (?, ?, ?)`,
		transaction, id, time.Now().UnixMilli())
	if err == nil {
		return "", nil
	}
	if !isDuplicate(err) {
		return "", fmt.Errorf("record transaction: %w", err)
	}
	var was string
	if err := s.writes.QueryRowContext(ctx, `SELECT order_id FROM payment_transactions WHERE transaction_id = ?`, transaction).Scan(&was); err != nil {
		return "", fmt.Errorf("record transaction: %w", err)
	}
	return was, nil
}
