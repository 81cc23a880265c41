package client

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/shardstock/shardstock/api"
)

// Queues are the admin API's calls on the products' waiting rooms.
type Queues struct{ c *Client }

// Queues are c's calls on the waiting rooms.
func (c *Client) Queues() Queues { return Queues{c} }

// Show answers product id's waiting room (GET api.AdminQueuePath).
func (q Queues) Show(ctx context.Context, id string) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodGet, path: api.Path(api.AdminQueuePath, id)})
}

// Define opens (or changes) product id's waiting room.
func (q Queues) Define(ctx context.Context, id string, d api.QueueDefinition) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodPut, path: api.Path(api.AdminQueuePath, id), body: d})
}

// Pause stops product id's number now serving.
func (q Queues) Pause(ctx context.Context, id string) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminQueuePausePath, id)})
}

// Resume runs product id's number now serving again.
func (q Queues) Resume(ctx context.Context, id string) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminQueueResumePath, id)})
}

// Advance admits by more places of product id's line at once.
func (q Queues) Advance(ctx context.Context, id string, by int64) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminQueueAdvancePath, id), body: api.QueueAdvance{By: by}})
}

// Revoke makes user's place in product id's line admit nobody.
func (q Queues) Revoke(ctx context.Context, id, user string) (json.RawMessage, error) {
	return q.c.admin(ctx, call{method: http.MethodPost, path: api.Path(api.AdminQueueRevokePath, id), body: api.QueueRevoke{User: user}})
}
