package client

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/shardstock/shardstock/api"
)

// Products answers every product's status (GET api.AdminProductsPath).
func (c *Client) Products(ctx context.Context) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodGet, path: api.AdminProductsPath})
}

// Product answers product id's status, shard by shard.
func (c *Client) Product(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodGet, path: api.Path(api.AdminProductPath, id)})
}

// Shards answers every shard and whether it answers.
func (c *Client) Shards(ctx context.Context) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodGet, path: api.AdminShardsPath})
}

// Pause turns product id's kill switch on; the answer is its status.
func (c *Client) Pause(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminPausePath, id)})
}

// Resume turns product id's kill switch off; the answer is its status.
func (c *Client) Resume(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminResumePath, id)})
}

// Archive archives product id; the answer is its status.
func (c *Client) Archive(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminArchivePath, id)})
}

// Rebalance spreads product id's salable units over the live shards; the
// answer is what moved.
func (c *Client) Rebalance(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminRebalancePath, id)})
}

// ChangeStock puts units of product id on sale or takes them back; a
// non-empty key (at most 200 characters) makes a repeat with the same key
// change nothing more. The answer is the product's status.
func (c *Client) ChangeStock(ctx context.Context, id string, change api.StockChange, key string) (json.RawMessage, error) {
	cl := call{method: http.MethodPost, path: api.Path(api.AdminStockPath, id), body: change}
	if key != "" {
		cl.header = http.Header{api.IdempotencyKeyHeader: {key}}
	}
	return c.admin(ctx, cl)
}

// MoveWindow moves product id's sale window; the answer is its status.
func (c *Client) MoveWindow(ctx context.Context, id string, w api.SaleWindow) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPatch, path: api.Path(api.AdminProductPath, id), body: w})
}

// Drain takes shard out of rotation (drained) or puts it back; the answer
// says what moved.
func (c *Client) Drain(ctx context.Context, shard int, drained bool) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodPost, path: shardPath(api.AdminDrainPath, shard),
		body: api.ShardDrain{Drained: &drained}})
}

// Reconcile reports product id's drift between the shards and the orders,
// fixing nothing.
func (c *Client) Reconcile(ctx context.Context, id string) (json.RawMessage, error) {
	return c.admin(ctx, call{method: http.MethodGet, path: api.Path(api.AdminReconcilePath, id)})
}
