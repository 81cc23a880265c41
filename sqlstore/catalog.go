package sqlstore

// The product catalog: definitions, and the shards each product was
// initialised on.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SaveProduct records a product definition, once. It returns created =
// false and the stored definition when the id exists already.
func (s *Catalog) SaveProduct(ctx context.Context, id, definition string) (created bool, stored string, err error) {
	_, err = s.db.ExecContext(ctx, `INSERT INTO products (id, definition, created_at) VALUES (?, ?, ?)`,
		id, definition, time.Now().UnixMilli())
	if err == nil {
		return true, definition, nil
	}
	if !isDuplicate(err) {
		return false, "", fmt.Errorf("save product %s: %w", id, err)
	}
	stored, err = s.ProductDefinition(ctx, id)
	return false, stored, err
}

// ProductDefinition returns a product's stored definition, or "" if none.
func (s *Catalog) ProductDefinition(ctx context.Context, id string) (string, error) {
	var def string
	err := s.reads.QueryRowContext(ctx, `SELECT definition FROM products WHERE id = ?`, id).Scan(&def)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load product %s: %w", id, err)
	}
	return def, nil
}

// ProductIDs lists every product id.
func (s *Catalog) ProductIDs(ctx context.Context) ([]string, error) {
	rows, err := s.reads.QueryContext(ctx, `SELECT id FROM products ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list products: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// InitialisedShards lists the shards on record as initialised for product.
func (s *Catalog) InitialisedShards(ctx context.Context, product string) (map[int]bool, error) {
	out, err := s.shardSet(ctx, `SELECT shard FROM product_shards WHERE product_id = ?`, product)
	if err != nil {
		return nil, fmt.Errorf("initialised shards of %s: %w", product, err)
	}
	return out, nil
}

// RecordInit puts shard on record as initialised for product (once).
func (s *Catalog) RecordInit(ctx context.Context, product string, shard int, epoch string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO product_shards (product_id, shard, epoch, created_at) VALUES (?, ?, ?, ?)`,
		product, shard, epoch, time.Now().UnixMilli())
	if err != nil && !isDuplicate(err) {
		return fmt.Errorf("record init of %s on shard %d: %w", product, shard, err)
	}
	return nil
}
