package inventory

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Handlers are the inventory's HTTP handlers: the admin API (mounted behind
// api.AdminAuth) and the buyers' stock view. Each field is the part of the
// inventory its handlers call. The routes that mount them are listed in
// one place, cmd/shardstock/routes.go.
type Handlers struct {
	Catalog    *Catalog  // defines products and sale sessions
	Sales      *Sale     // the kill switch, the window, the archive
	Stock      *Stock    // units on and off sale, between shards, off a shard
	Reconciler *Audit    // a product's shards against SQL
	Views      *Views    // each product's status, its stock for buyers, the shards
	Restarts   *Restarts // an operator's calls on a fenced shard
}

// productID is the path's product id; a malformed one is not found.
func productID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return "", shardstock.ErrNoProduct
	}
	return id, nil
}

// shardIndex is the path's shard index; a malformed one is not found.
func shardIndex(c echo.Context) (int, error) {
	i, err := strconv.Atoi(c.Param("index"))
	if err != nil {
		return 0, shardstock.ErrNoShard
	}
	return i, nil
}

// PostPause turns the kill switch on (an empty body).
func (h Handlers) PostPause(c echo.Context) error { return h.pause(c, true) }

// PostResume turns the kill switch off (an empty body).
func (h Handlers) PostResume(c echo.Context) error { return h.pause(c, false) }

func (h Handlers) pause(c echo.Context, paused bool) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	st, err := h.Sales.Pause(c.Request().Context(), id, paused)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PostStock adds or takes back units; an Idempotency-Key header makes a
// retried call change nothing more.
func (h Handlers) PostStock(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var b api.StockChange
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	key := c.Request().Header.Get(api.IdempotencyKeyHeader)
	if len(key) > 200 {
		return shardstock.Invalid("Idempotency-Key must be at most 200 characters")
	}
	st, err := h.Stock.ChangeStock(c.Request().Context(), id, b.Add, b.Remove, key)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PatchProduct moves the sale window.
func (h Handlers) PatchProduct(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var b api.SaleWindow
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	if b.StartsAt == nil && b.EndsAt == nil {
		return shardstock.Invalid("give ends_at (or starts_at, before the sale starts)")
	}
	var starts, ends *time.Time
	if b.StartsAt != nil {
		starts = &b.StartsAt.Time
	}
	if b.EndsAt != nil {
		ends = &b.EndsAt.Time
	}
	st, err := h.Sales.MoveWindow(c.Request().Context(), id, starts, ends)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PostArchive archives a product whose sale is over and settled: SQL keeps
// its totals and its keys leave every shard (an empty body).
func (h Handlers) PostArchive(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	st, err := h.Sales.Archive(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PostRebalance moves salable units between shards toward an even spread
// (an empty body).
func (h Handlers) PostRebalance(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNoProduct
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	rep, err := h.Stock.Rebalance(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// PostDrain takes a shard out of rotation ({"drained": true}, the default) or
// puts it back ({"drained": false}).
func (h Handlers) PostDrain(c echo.Context) error {
	idx, err := shardIndex(c)
	if err != nil {
		return err
	}
	var b api.ShardDrain
	if err := api.Decode(c, &b, true); err != nil {
		return err
	}
	drained := b.Drained == nil || *b.Drained
	moved, err := h.Stock.Drain(c.Request().Context(), idx, drained)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"shard": idx, "drained": drained, "moved": moved})
}

// GetReconcile reports a product's drift between the shards and SQL.
func (h Handlers) GetReconcile(c echo.Context) error { return h.reconcile(c, false) }

// PostReconcile reports the drift and fixes what is safe to fix.
func (h Handlers) PostReconcile(c echo.Context) error { return h.reconcile(c, true) }

func (h Handlers) reconcile(c echo.Context, fix bool) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNoProduct
	}
	r, err := h.Reconciler.Reconcile(c.Request().Context(), id, fix)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// GetStock is the buyers' view of a product's stock, never cached.
func (h Handlers) GetStock(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNoProduct
	}
	v, err := h.Views.Stock(c.Request().Context(), id)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, v)
}

// GetProducts lists every product's status.
func (h Handlers) GetProducts(c echo.Context) error {
	out, err := h.Views.Statuses(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// GetSessions lists every session, by start.
func (h Handlers) GetSessions(c echo.Context) error {
	ss, err := h.Catalog.Sessions(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ss)
}

// GetSession answers one session.
func (h Handlers) GetSession(c echo.Context) error {
	ss, err := h.Catalog.Sessions(c.Request().Context())
	if err != nil {
		return err
	}
	for _, x := range ss {
		if x.ID == c.Param("id") {
			return c.JSON(http.StatusOK, x)
		}
	}
	return shardstock.ErrNoSession
}

// DeleteSession removes a session; its products keep selling only in a
// window of their own or of their other sessions.
func (h Handlers) DeleteSession(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNoSession
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	if err := h.Catalog.DeleteSession(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// PutSession defines a session (201) or changes it (200).
func (h Handlers) PutSession(c echo.Context) error {
	var b api.SessionDefinition
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	ss := shardstock.Session{ID: c.Param("id"), Title: b.Title, StartsAt: b.StartsAt.UTC(), EndsAt: b.EndsAt.UTC(), Products: b.Products}
	created, err := h.Catalog.DefineSession(c.Request().Context(), ss)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, ss)
	}
	return c.JSON(http.StatusOK, ss)
}

// PutProduct defines a product (201); the same definition again answers
// 200, a different one 409.
func (h Handlers) PutProduct(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.Invalid("product id must be 1-64 characters of [A-Za-z0-9_-]")
	}
	var b api.ProductDefinition
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	limit := int64(1) // (the default, when it is left out)
	if b.PerUserLimit != nil {
		if limit = *b.PerUserLimit; limit < 1 {
			return shardstock.Invalid(fmt.Sprintf("per_user_limit must be between 1 and %d (left out, it is 1)", shardstock.MaxPerUserLimit))
		}
	}
	created, err := h.Catalog.Define(c.Request().Context(), shardstock.Product{
		ID: id, Stock: b.Stock, PerUserLimit: limit,
		StartsAt: b.StartsAt.Time, EndsAt: b.EndsAt.Time, Title: b.Title, PriceCents: b.PriceCents, Currency: b.Currency,
	})
	if err != nil {
		return err
	}
	st, err := h.Views.Status(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, st)
	}
	return c.JSON(http.StatusOK, st)
}

// GetProduct answers a product's status, shard by shard.
func (h Handlers) GetProduct(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNoProduct
	}
	st, err := h.Views.Status(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// GetShards answers the shard overview.
func (h Handlers) GetShards(c echo.Context) error {
	return c.JSON(http.StatusOK, h.Views.Shards(c.Request().Context()))
}

// PostResync is an operator's call on a fenced shard: without "accept" it
// runs the shard's resync now and answers whether the fence opened (409
// with the disagreement when it stays); with "accept": true it takes a
// shard a disagreement keeps fenced as it stands (Restarts.Accept).
func (h Handlers) PostResync(c echo.Context) error {
	i, err := shardIndex(c)
	if err != nil {
		return err
	}
	var b api.ShardResync
	if err := api.Decode(c, &b, true); err != nil {
		return err
	}
	ctx := c.Request().Context()
	if !b.Accept {
		run, err := h.Restarts.ResyncNow(ctx, i)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run})
	}
	run, problem, actions, err := h.Restarts.Accept(ctx, i)
	if err != nil {
		return err
	}
	if problem == "" { // it was not fenced
		return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run})
	}
	return c.JSON(http.StatusOK, map[string]any{"shard": i, "fenced": false, "run_id": run, "accepted": problem, "actions": actions})
}
