package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// StartTransfer records a transfer before its first step.
// A repeat of a recorded id returns the first record (a retried request).
func (s *Transfers) StartTransfer(ctx context.Context, t shardstock.Transfer) (shardstock.Transfer, error) {
	now := time.Now().UnixMilli()
	_, err := s.db.ExecContext(ctx, `INSERT INTO transfers (id, product_id, from_shard, to_shard, wanted, state, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 'started', ?, ?)`, t.ID, t.ProductID, t.From, t.To, t.Wanted, now, now)
	if err == nil {
		return t, nil
	}
	if isDuplicate(err) {
		ts, err := s.transfers(ctx, `WHERE id = ?`, t.ID)
		if err == nil && len(ts) == 1 {
			return ts[0], nil
		}
	}
	return t, fmt.Errorf("record transfer %s: %w", t.ID, err)
}

// MarkTransfer moves a transfer to state ("out" with moved, or "done" or
// "reversed"), forward only: started -> out -> done | reversed. Two
// coordinators may finish one transfer at once (a stock change's request
// and another's resume loop: inventory.Stock.RunResume); each step is
// idempotent, and a late "out" never takes a finished transfer back.
func (s *Transfers) MarkTransfer(ctx context.Context, id, state string, moved int64) error {
	// (out again is allowed: the same count, from the shard's record of it)
	_, err := s.db.ExecContext(ctx, `UPDATE transfers SET state = ?, moved = ?, updated_at = ? WHERE id = ? AND state IN ('started', 'out')`,
		state, moved, time.Now().UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("mark transfer %s %s: %w", id, state, err)
	}
	return nil
}

// UnfinishedTransfers lists the transfers not done, oldest first.
func (s *Transfers) UnfinishedTransfers(ctx context.Context) ([]shardstock.Transfer, error) {
	return s.transfers(ctx, `WHERE state NOT IN ('done', 'reversed')`)
}

// ShardTransfers lists the transfers from or to shard whose units left
// their source (state out, done or reversed), oldest first: what a shard
// that lost its last writes must have applied.
func (s *Transfers) ShardTransfers(ctx context.Context, shard int) ([]shardstock.Transfer, error) {
	return s.transfers(ctx, `WHERE state IN ('out', 'done', 'reversed') AND (from_shard = ? OR to_shard = ?)`, shard, shard)
}

func (s *Transfers) transfers(ctx context.Context, where string, args ...any) ([]shardstock.Transfer, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT id, product_id, from_shard, to_shard, wanted, moved, state
		FROM transfers `+where+` ORDER BY created_at`, args...)
	if err != nil {
		return nil, fmt.Errorf("unfinished transfers: %w", err)
	}
	defer rows.Close()
	var out []shardstock.Transfer
	for rows.Next() {
		var t shardstock.Transfer
		var moved sql.NullInt64
		if err := rows.Scan(&t.ID, &t.ProductID, &t.From, &t.To, &t.Wanted, &moved, &t.State); err != nil {
			return nil, err
		}
		t.Moved = moved.Int64
		out = append(out, t)
	}
	return out, rows.Err()
}

// millisOrZero is t in unix ms, 0 for the zero time.
func millisOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// StockChanges sums the units operators added to and removed from product
// id after its definition (finished stock changes in the transfer log:
// from or to shard -1, outside the shards).
func (s *Transfers) StockChanges(ctx context.Context, id string) (added, removed int64, err error) {
	err = s.reads.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN from_shard = -1 THEN moved ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN to_shard = -1 THEN moved ELSE 0 END), 0)
		FROM transfers WHERE product_id = ? AND state = 'done' AND (from_shard = -1 OR to_shard = -1)`, id).Scan(&added, &removed)
	if err != nil {
		return 0, 0, fmt.Errorf("stock changes of %s: %w", id, err)
	}
	return added, removed, nil
}

// RecordStockChange records the transfers of one stock change together,
// in one transaction, before any of them runs, and returns them; when the
// change was recorded before (a retried request with the same key), it
// returns that record instead, so a retry finishes the first plan rather
// than making a second one. Each transfer's id is changeID-<shard>.
func (s *Transfers) RecordStockChange(ctx context.Context, changeID string, plan []shardstock.Transfer) ([]shardstock.Transfer, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("record stock change %s: %w", changeID, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM transfers WHERE id LIKE ?`, changeID+"-%").Scan(&n); err != nil {
		return nil, fmt.Errorf("record stock change %s: %w", changeID, err)
	}
	if n == 0 {
		now := time.Now().UnixMilli()
		for _, t := range plan {
			if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (id, product_id, from_shard, to_shard, wanted, state, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, 'started', ?, ?)`, t.ID, t.ProductID, t.From, t.To, t.Wanted, now, now); err != nil {
				return nil, fmt.Errorf("record stock change %s: %w", changeID, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("record stock change %s: %w", changeID, err)
		}
		return plan, nil
	}
	tx.Rollback()
	return s.transfers(ctx, `WHERE id LIKE ?`, changeID+"-%")
}

// BindKey records that the Idempotency-Key whose hash is keyHash was used
// for request on product; it returns shardstock.ErrKeyReused when the key
// was first used for another product or request. Of two first uses at
// once, the one inserted first binds the key.
func (s *Transfers) BindKey(ctx context.Context, keyHash, product, request string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO stock_change_keys (key_hash, product_id, request, created_at) VALUES (?, ?, ?, ?)`,
		keyHash, product, request, time.Now().UnixMilli())
	if err == nil {
		return nil
	}
	if !isDuplicate(err) {
		return fmt.Errorf("bind idempotency key: %w", err)
	}
	var p, r string
	if err := s.writes.QueryRowContext(ctx, `SELECT product_id, request FROM stock_change_keys WHERE key_hash = ?`, keyHash).Scan(&p, &r); err != nil {
		return fmt.Errorf("bind idempotency key: %w", err)
	}
	if p != product || r != request {
		return &shardstock.Error{Code: shardstock.ErrKeyReused.Code,
			Message: fmt.Sprintf("this Idempotency-Key was first used to %s units of %s; use a new key for another change", r, p)}
	}
	return nil
}
