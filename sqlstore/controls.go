package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// ProductControls returns the operator's changes to every product that has
// any (product_controls).
func (s *Store) ProductControls(ctx context.Context) (map[string]shardstock.Controls, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT product_id, paused, window_set, starts_ms, ends_ms, archived, version FROM product_controls`)
	if err != nil {
		return nil, fmt.Errorf("product controls: %w", err)
	}
	defer rows.Close()
	out := map[string]shardstock.Controls{}
	for rows.Next() {
		var (
			id                      string
			paused, windowSet, arch int
			starts, ends, version   int64
		)
		if err := rows.Scan(&id, &paused, &windowSet, &starts, &ends, &arch, &version); err != nil {
			return nil, fmt.Errorf("product controls: %w", err)
		}
		out[id] = shardstock.Controls{Paused: paused == 1, WindowSet: windowSet == 1,
			StartsAt: msTime(starts), EndsAt: msTime(ends), Archive: shardstock.ArchiveState(arch), Version: version}
	}
	return out, rows.Err()
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// SetPaused records the kill switch of product id.
func (s *Store) SetPaused(ctx context.Context, id string, paused bool) error {
	v := 0
	if paused {
		v = 1
	}
	return s.updateControls(ctx, id, `paused = ?`, v)
}

// SetWindow records product id's window as moved by the operator.
func (s *Store) SetWindow(ctx context.Context, id string, starts, ends time.Time) error {
	return s.updateControls(ctx, id, `window_set = 1, starts_ms = ?, ends_ms = ?`, shardstock.UnixMS(starts), shardstock.UnixMS(ends))
}

// SetArchive records how far product id's archive got.
func (s *Store) SetArchive(ctx context.Context, id string, st shardstock.ArchiveState) error {
	return s.updateControls(ctx, id, `archived = ?`, int(st))
}

// updateControls changes product id's controls row, creating it first if
// there is none (an UPDATE, then an INSERT, then the UPDATE again: the
// same statements on SQLite and MariaDB).
func (s *Store) updateControls(ctx context.Context, id, set string, args ...any) error {
	now := time.Now().UnixMilli()
	update := func() (int64, error) {
		res, err := s.db.ExecContext(ctx, `UPDATE product_controls SET `+set+`, version = version + 1, updated_at = ? WHERE product_id = ?`,
			append(append([]any{}, args...), now, id)...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	n, err := update()
	if err == nil && n == 0 {
		_, err = s.db.ExecContext(ctx, `INSERT INTO product_controls (product_id, version, updated_at) VALUES (?, 0, ?)`, id, now)
		if err == nil || isDuplicate(err) {
			_, err = update()
		}
	}
	if err != nil {
		return fmt.Errorf("product %s controls: %w", id, err)
	}
	return nil
}

// RecordArchiveTotals keeps product id's final per-shard counters (once:
// a repeat keeps the first).
func (s *Store) RecordArchiveTotals(ctx context.Context, id string, totals []shardstock.ShardTotals) error {
	for _, t := range totals {
		_, err := s.db.ExecContext(ctx, `INSERT INTO product_archive (product_id, shard, alloc, salable, locked, sold) VALUES (?, ?, ?, ?, ?, ?)`,
			id, t.Shard, t.Alloc, t.Salable, t.Locked, t.Sold)
		if err != nil && !isDuplicate(err) {
			return fmt.Errorf("archive totals of %s: %w", id, err)
		}
	}
	return nil
}

// ArchiveTotals returns the final per-shard counters of an archived product.
func (s *Store) ArchiveTotals(ctx context.Context, id string) ([]shardstock.ShardTotals, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT shard, alloc, salable, locked, sold FROM product_archive WHERE product_id = ? ORDER BY shard`, id)
	if err != nil {
		return nil, fmt.Errorf("archive totals of %s: %w", id, err)
	}
	defer rows.Close()
	var out []shardstock.ShardTotals
	for rows.Next() {
		var t shardstock.ShardTotals
		if err := rows.Scan(&t.Shard, &t.Alloc, &t.Salable, &t.Locked, &t.Sold); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// StockChanges sums the units operators added to and removed from product
// id after its definition (finished stock changes in the transfer log:
// from or to shard -1, outside the shards).
func (s *Store) StockChanges(ctx context.Context, id string) (added, removed int64, err error) {
	err = s.reads.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN from_shard = -1 THEN moved ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN to_shard = -1 THEN moved ELSE 0 END), 0)
		FROM transfers WHERE product_id = ? AND state = 'done' AND (from_shard = -1 OR to_shard = -1)`, id).Scan(&added, &removed)
	if err != nil {
		return 0, 0, fmt.Errorf("stock changes of %s: %w", id, err)
	}
	return added, removed, nil
}

// OpenOrders counts product id's orders awaiting payment, and those whose
// final status the holder shard has not been told yet.
func (s *Store) OpenOrders(ctx context.Context, id string) (awaiting, unsettled int64, err error) {
	err = s.reads.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN status = 'awaiting_payment' THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN settle_pending = 1 THEN 1 ELSE 0 END), 0)
		FROM orders WHERE product_id = ?`, id).Scan(&awaiting, &unsettled)
	if err != nil {
		return 0, 0, fmt.Errorf("open orders of %s: %w", id, err)
	}
	return awaiting, unsettled, nil
}

// RecordStockChange records the transfers of one stock change together,
// in one transaction, before any of them runs, and returns them; when the
// change was recorded before (a retried request with the same key), it
// returns that record instead, so a retry finishes the first plan rather
// than making a second one. Each transfer's id is changeID-<shard>.
func (s *Store) RecordStockChange(ctx context.Context, changeID string, plan []shardstock.Transfer) ([]shardstock.Transfer, error) {
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
func (s *Store) BindKey(ctx context.Context, keyHash, product, request string) error {
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
