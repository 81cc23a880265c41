package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardstock/shardstock"
)

// The sale report's seconds (table sale_seconds): report.ReportStore.

// AddSeconds writes a batch of per-second counts in one transaction: a
// count of kind "outcome" or "latency" is added to what other coordinators
// wrote for the same second, one of kind "salable" replaces it.
func (s *Reports) AddSeconds(ctx context.Context, rows []shardstock.SaleSecond) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for start := 0; start < len(rows); start += 200 {
		batch := rows[start:min(start+200, len(rows))]
		for _, replace := range []bool{false, true} {
			var vals []string
			var args []any
			for _, r := range batch {
				if (r.Kind == shardstock.KindSalable) != replace {
					continue
				}
				vals = append(vals, "(?, ?, ?, ?, ?)")
				args = append(args, r.Product, r.Second, r.Kind, r.Label, r.N)
			}
			if len(vals) == 0 {
				continue
			}
			q := `INSERT INTO sale_seconds (product_id, second, kind, label, n) VALUES ` + strings.Join(vals, ", ") + s.upsert(replace)
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("sale seconds: %w", err)
			}
		}
	}
	return tx.Commit()
}

// SaleSeconds returns every recorded second of product, in time order.
func (s *Reports) SaleSeconds(ctx context.Context, product string) ([]shardstock.SaleSecond, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT second, kind, label, n FROM sale_seconds WHERE product_id = ? ORDER BY second`, product)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []shardstock.SaleSecond
	for rows.Next() {
		r := shardstock.SaleSecond{Product: product}
		if err := rows.Scan(&r.Second, &r.Kind, &r.Label, &r.N); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
