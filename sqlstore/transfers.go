package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// StartTransfer records a transfer before its first step.
// A repeat of a recorded id returns the first record (a retried request).
func (s *Store) StartTransfer(ctx context.Context, t shardstock.Transfer) (shardstock.Transfer, error) {
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
func (s *Store) MarkTransfer(ctx context.Context, id, state string, moved int64) error {
	// (out again is allowed: the same count, from the shard's record of it)
	_, err := s.db.ExecContext(ctx, `UPDATE transfers SET state = ?, moved = ?, updated_at = ? WHERE id = ? AND state IN ('started', 'out')`,
		state, moved, time.Now().UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("mark transfer %s %s: %w", id, state, err)
	}
	return nil
}

// UnfinishedTransfers lists the transfers not done, oldest first.
func (s *Store) UnfinishedTransfers(ctx context.Context) ([]shardstock.Transfer, error) {
	return s.transfers(ctx, `WHERE state NOT IN ('done', 'reversed')`)
}

// ShardTransfers lists the transfers from or to shard whose units left
// their source (state out, done or reversed), oldest first: what a shard
// that lost its last writes must have applied.
func (s *Store) ShardTransfers(ctx context.Context, shard int) ([]shardstock.Transfer, error) {
	return s.transfers(ctx, `WHERE state IN ('out', 'done', 'reversed') AND (from_shard = ? OR to_shard = ?)`, shard, shard)
}

func (s *Store) transfers(ctx context.Context, where string, args ...any) ([]shardstock.Transfer, error) {
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

// SetDrained puts shard on or off the drained list.
func (s *Store) SetDrained(ctx context.Context, shard int, drained bool) error {
	var err error
	if drained {
		_, err = s.db.ExecContext(ctx, `INSERT INTO drained_shards (shard, drained_at) VALUES (?, ?)`, shard, time.Now().UnixMilli())
		if isDuplicate(err) {
			err = nil
		}
	} else {
		_, err = s.db.ExecContext(ctx, `DELETE FROM drained_shards WHERE shard = ?`, shard)
	}
	if err != nil {
		return fmt.Errorf("drain shard %d: %w", shard, err)
	}
	return nil
}

// DrainedShards lists the drained shards.
func (s *Store) DrainedShards(ctx context.Context) (map[int]bool, error) {
	out, err := s.shardSet(ctx, `SELECT shard FROM drained_shards`)
	if err != nil {
		return nil, fmt.Errorf("drained shards: %w", err)
	}
	return out, nil
}

// SyncedRunID is the run id shard had when it was last resynced ("" when
// never).
func (s *Store) SyncedRunID(ctx context.Context, shard int) (string, error) {
	var run string
	err := s.reads.QueryRowContext(ctx, `SELECT run_id FROM shard_runs WHERE shard = ?`, shard).Scan(&run)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("synced run id of shard %d: %w", shard, err)
	}
	return run, nil
}

// millisOrZero is t in unix ms, 0 for the zero time.
func millisOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// SyncedAt is when shard was last put on record as resynced (zero: never,
// or recorded without a time: its first run).
func (s *Store) SyncedAt(ctx context.Context, shard int) (time.Time, error) {
	var ms int64
	err := s.reads.QueryRowContext(ctx, `SELECT synced_at FROM shard_runs WHERE shard = ?`, shard).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("resync time of shard %d: %w", shard, err)
	}
	if ms == 0 {
		return time.Time{}, nil // (recorded without a time)
	}
	return time.UnixMilli(ms), nil
}

// RecordSynced records that shard, running as run, was resynced at at
// (zero: no time).
func (s *Store) RecordSynced(ctx context.Context, shard int, run string, at time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM shard_runs WHERE shard = ?`, shard); err != nil {
		return fmt.Errorf("record resync of shard %d: %w", shard, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO shard_runs (shard, run_id, synced_at) VALUES (?, ?, ?)`,
		shard, run, millisOrZero(at)); err != nil && !isDuplicate(err) {
		return fmt.Errorf("record resync of shard %d: %w", shard, err)
	}
	return tx.Commit()
}

// RecordTransaction puts a payment provider's transaction id on record for
// order id, once. It returns the order the id was on record for before
// (id itself for a repeat), or "" when this call recorded it.
func (s *Store) RecordTransaction(ctx context.Context, transaction, id string) (string, error) {
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

// CatalogID returns the id of this catalog, made up and put on record by
// the first call on a new database (the first of concurrent calls wins).
func (s *Store) CatalogID(ctx context.Context) (string, error) {
	b := make([]byte, 12)
	rand.Read(b)
	_, err := s.db.ExecContext(ctx, `INSERT INTO catalog_meta (name, value) VALUES ('catalog_id', ?)`, hex.EncodeToString(b))
	if err != nil && !isDuplicate(err) {
		return "", fmt.Errorf("catalog id: %w", err)
	}
	var id string
	if err := s.reads.QueryRowContext(ctx, `SELECT value FROM catalog_meta WHERE name = 'catalog_id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("catalog id: %w", err)
	}
	return id, nil
}
