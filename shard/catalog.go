package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
)

// CatalogKey stamps a shard with the id of the catalog (the SQL database
// of products and orders) whose stock it holds. Two catalogs on the same
// shards would read each other's outbox entries and count each other's
// units; the stamp makes the second refuse instead.
const CatalogKey = "ss:catalog"

// ClaimCatalog checks that shard i belongs to catalog id, and stamps it
// when it has no stamp yet (a new or wiped shard, or one from before
// stamps) unless it holds products the catalog does not know (known says
// whether it does). Errors: shardstock.ErrForeignCatalog with what was found,
// transport errors. It runs while the shard is fenced (shardstock.ResyncContext).
func (s *Fence) ClaimCatalog(ctx context.Context, i int, id string, known func(product string) bool) error {
	sh := s.shards[i]
	ctx = shardstock.ResyncContext(ctx)
	var stamp string
	var products []string
	err := s.call(ctx, sh, func(ctx context.Context) error {
		var err error
		stamp, err = sh.Client.Get(ctx, CatalogKey).Result()
		if errors.Is(err, redis.Nil) {
			stamp, err = "", nil
		}
		if err == nil && stamp == "" {
			products, err = sh.Client.SMembers(ctx, productsKey).Result()
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("shard %d: catalog stamp: %w", i, err)
	case stamp == id:
		return nil
	case stamp != "":
		return fmt.Errorf("shard %d: %w (catalog %s; this database is catalog %s)", i, shardstock.ErrForeignCatalog, stamp, id)
	}
	var unknown []string
	for _, p := range products {
		if !known(p) {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		if len(unknown) > 5 {
			unknown = append(unknown[:5], "...")
		}
		return fmt.Errorf("shard %d: %w: it has no catalog stamp and holds products this database does not know (%s)",
			i, shardstock.ErrForeignCatalog, strings.Join(unknown, ", "))
	}
	var won bool
	err = s.call(ctx, sh, func(ctx context.Context) error {
		var err error
		won, err = sh.Client.SetNX(ctx, CatalogKey, id, 0).Result()
		return err
	})
	if err != nil {
		return fmt.Errorf("shard %d: catalog stamp: %w", i, err)
	}
	if !won { // another coordinator stamped it a moment ago
		return s.ClaimCatalog(ctx, i, id, known)
	}
	return nil
}
