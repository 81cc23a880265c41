package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
)

// ProductControls returns the operator's changes to every product that has
// any (product_controls).
func (s *Controls) ProductControls(ctx context.Context) (map[string]shardstock.Controls, error) {
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
func (s *Controls) SetPaused(ctx context.Context, id string, paused bool) error {
	v := 0
	if paused {
		v = 1
	}
	return s.updateControls(ctx, id, `paused = ?`, v)
}

// SetWindow records product id's window as moved by the operator.
func (s *Controls) SetWindow(ctx context.Context, id string, starts, ends time.Time) error {
	return s.updateControls(ctx, id, `window_set = 1, starts_ms = ?, ends_ms = ?`, shardstock.UnixMS(starts), shardstock.UnixMS(ends))
}

// SetArchive records how far product id's archive got.
func (s *Controls) SetArchive(ctx context.Context, id string, st shardstock.ArchiveState) error {
	return s.updateControls(ctx, id, `archived = ?`, int(st))
}

// updateControls changes product id's controls row, creating it first if
// there is none (an UPDATE, then an INSERT, then the UPDATE again: the
// same statements on SQLite and MariaDB).
func (s *Controls) updateControls(ctx context.Context, id, set string, args ...any) error {
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
func (s *Controls) RecordArchiveTotals(ctx context.Context, id string, totals []shardstock.ShardTotals) error {
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
func (s *Controls) ArchiveTotals(ctx context.Context, id string) ([]shardstock.ShardTotals, error) {
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
