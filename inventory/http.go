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
// api.AdminAuth) and the buyers' stock view. The routes that mount them are
// listed in one place, cmd/shardstock/routes.go.
type Handlers struct{ *Service }

// productID is the path's product id; a malformed one is not found.
func productID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return "", shardstock.ErrNotFound
	}
	return id, nil
}

// PostPause turns the kill switch on (an empty body).
func (s Handlers) PostPause(c echo.Context) error { return s.pause(c, true) }

// PostResume turns the kill switch off (an empty body).
func (s Handlers) PostResume(c echo.Context) error { return s.pause(c, false) }

func (s Handlers) pause(c echo.Context, paused bool) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	st, err := s.Pause(c.Request().Context(), id, paused)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

type stockBody struct {
	Add    int64 `json:"add"`
	Remove int64 `json:"remove"`
}

// PostStock adds or takes back units; an Idempotency-Key header makes a
// retried call change nothing more.
func (s Handlers) PostStock(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var b stockBody
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	key := c.Request().Header.Get("Idempotency-Key")
	if len(key) > 200 {
		return shardstock.Invalid("Idempotency-Key must be at most 200 characters")
	}
	st, err := s.ChangeStock(c.Request().Context(), id, b.Add, b.Remove, key)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

type windowBody struct {
	StartsAt *api.OptionalTime `json:"starts_at"`
	EndsAt   *api.OptionalTime `json:"ends_at"`
}

// PatchProduct moves the sale window.
func (s Handlers) PatchProduct(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var b windowBody
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
	st, err := s.MoveWindow(c.Request().Context(), id, starts, ends)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PostArchive archives a product whose sale is over and settled: SQL keeps
// its totals and its keys leave every shard (an empty body).
func (s Handlers) PostArchive(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	st, err := s.Archive(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// PostRebalance moves salable units between shards toward an even spread
// (an empty body).
func (s Handlers) PostRebalance(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	rep, err := s.Rebalance(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

type drainBody struct {
	Drained *bool `json:"drained"`
}

// PostDrain takes a shard out of rotation ({"drained": true}, the default) or
// puts it back ({"drained": false}).
func (s Handlers) PostDrain(c echo.Context) error {
	idx, err := strconv.Atoi(c.Param("index"))
	if err != nil {
		return shardstock.ErrNotFound
	}
	var b drainBody
	if err := api.Decode(c, &b, true); err != nil {
		return err
	}
	drained := b.Drained == nil || *b.Drained
	moved, err := s.Drain(c.Request().Context(), idx, drained)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"shard": idx, "drained": drained, "moved": moved})
}

// GetReconcile reports a product's drift between the shards and SQL.
func (s Handlers) GetReconcile(c echo.Context) error { return s.reconcile(c, false) }

// PostReconcile reports the drift and fixes what is safe to fix.
func (s Handlers) PostReconcile(c echo.Context) error { return s.reconcile(c, true) }

func (s Handlers) reconcile(c echo.Context, fix bool) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	r, err := s.Reconcile(c.Request().Context(), id, fix)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// GetStock is the buyers' view of a product's stock, never cached.
func (s Handlers) GetStock(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	v, err := s.Stock(c.Request().Context(), id)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, v)
}

// GetProducts lists every product's status.
func (s Handlers) GetProducts(c echo.Context) error {
	ctx := c.Request().Context()
	ids, err := s.catalog.ProductIDs(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	out := make([]*ProductStatus, 0, len(ids))
	for _, id := range ids {
		st, err := s.Status(ctx, id)
		if err != nil {
			return err
		}
		out = append(out, st)
	}
	return c.JSON(http.StatusOK, out)
}

type sessionBody struct {
	Title    string           `json:"title"`
	StartsAt api.OptionalTime `json:"starts_at"`
	EndsAt   api.OptionalTime `json:"ends_at"`
	Products []string         `json:"products"`
}

// GetSessions lists every session, by start.
func (s Handlers) GetSessions(c echo.Context) error {
	ss, err := s.catalog.Sessions(c.Request().Context())
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return c.JSON(http.StatusOK, ss)
}

// GetSession answers one session.
func (s Handlers) GetSession(c echo.Context) error {
	ss, err := s.catalog.Sessions(c.Request().Context())
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	for _, x := range ss {
		if x.ID == c.Param("id") {
			return c.JSON(http.StatusOK, x)
		}
	}
	return shardstock.ErrNotFound
}

// DeleteSession removes a session; its products keep selling only in a
// window of their own or of their other sessions.
func (s Handlers) DeleteSession(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	ctx := c.Request().Context()
	found, err := s.catalog.DeleteSession(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if !found {
		return shardstock.ErrNotFound
	}
	if err := s.RefreshControls(ctx); err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	return c.NoContent(http.StatusNoContent)
}

// PutSession defines a session (201) or changes it (200).
func (s Handlers) PutSession(c echo.Context) error {
	var b sessionBody
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	ss := shardstock.Session{ID: c.Param("id"), Title: b.Title, StartsAt: b.StartsAt.UTC(), EndsAt: b.EndsAt.UTC(), Products: b.Products}
	created, err := s.DefineSession(c.Request().Context(), ss)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, ss)
	}
	return c.JSON(http.StatusOK, ss)
}

// productBody is the PUT body; the id comes from the path.
type productBody struct {
	Stock        int64            `json:"stock"`
	PerUserLimit int64            `json:"per_user_limit"`
	StartsAt     api.OptionalTime `json:"starts_at"`
	EndsAt       api.OptionalTime `json:"ends_at"`
	Title        string           `json:"title"`
	PriceCents   int64            `json:"price_cents"`
}

// PutProduct defines a product (201); the same definition again answers
// 200, a different one 409.
func (s Handlers) PutProduct(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.Invalid("product id must be 1-64 characters of [A-Za-z0-9_-]")
	}
	var b productBody
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	created, err := s.Define(c.Request().Context(), shardstock.Product{
		ID: id, Stock: b.Stock, PerUserLimit: b.PerUserLimit,
		StartsAt: b.StartsAt.Time, EndsAt: b.EndsAt.Time, Title: b.Title, PriceCents: b.PriceCents,
	})
	if err != nil {
		return err
	}
	st, err := s.Status(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, st)
	}
	return c.JSON(http.StatusOK, st)
}

// GetProduct answers a product's status, shard by shard.
func (s Handlers) GetProduct(c echo.Context) error {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return shardstock.ErrNotFound
	}
	st, err := s.Status(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// GetShards answers the shard overview.
func (s Handlers) GetShards(c echo.Context) error {
	return c.JSON(http.StatusOK, s.Shards(c.Request().Context()))
}
