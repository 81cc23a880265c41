package waitroom

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Rooms is what the handlers need of a Room.
type Rooms interface {
	Join(ctx context.Context, product, buyer, work string) (Place, error)
	Look(ctx context.Context, product, buyer, token string) (Place, error)
	Define(ctx context.Context, product string, d api.QueueDefinition) (Summary, error)
	Summary(ctx context.Context, product string) (Summary, error)
	Pause(ctx context.Context, product string) (Summary, error)
	Resume(ctx context.Context, product string) (Summary, error)
	Advance(ctx context.Context, product string, by int64) (Summary, error)
	Revoke(ctx context.Context, product, buyer string) (Summary, error)
	Lines() []Summary
}

// Handlers serve the waiting room's routes: the buyers' QueuePath and the
// operators' AdminQueue paths.
type Handlers struct {
	Rooms    Rooms
	Identity api.Identity
}

func productID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !shardstock.ValidID(id) {
		return "", shardstock.ErrNoProduct
	}
	return id, nil
}

// PostQueue joins the buyer to the product's line.
func (h Handlers) PostQueue(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	user, err := h.Identity(c.Request())
	if err != nil {
		return err
	}
	var body api.QueueJoin
	if err := api.Decode(c, &body, true); err != nil {
		return err
	}
	p, err := h.Rooms.Join(c.Request().Context(), id, user, body.Work)
	if err != nil {
		return err
	}
	return answer(c, p)
}

// GetQueue is the buyer's place (X-Queue-Token), or the line's public face
// without one.
func (h Handlers) GetQueue(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	user, err := h.Identity(c.Request())
	if err != nil {
		return err
	}
	p, err := h.Rooms.Look(c.Request().Context(), id, user, c.Request().Header.Get(api.QueueTokenHeader))
	if err != nil {
		return err
	}
	return answer(c, p)
}

func answer(c echo.Context, p Place) error {
	hd := c.Response().Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("Retry-After", strconv.Itoa(int(max(p.RetryAfter.Round(time.Second), time.Second)/time.Second)))
	return c.JSON(http.StatusOK, p)
}

// GetQueues lists every waiting room, by product (the operators' page).
func (h Handlers) GetQueues(c echo.Context) error {
	lines := h.Rooms.Lines()
	slices.SortFunc(lines, func(a, b Summary) int { return strings.Compare(a.Product, b.Product) })
	return c.JSON(http.StatusOK, lines)
}

// PutQueue defines the product's waiting room.
func (h Handlers) PutQueue(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var d api.QueueDefinition
	if err := api.Decode(c, &d, false); err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Define(c.Request().Context(), id, d))
}

// GetAdminQueue is the line as operators see it.
func (h Handlers) GetAdminQueue(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Summary(c.Request().Context(), id))
}

// PostPause stops the line's clock.
func (h Handlers) PostPause(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Pause(c.Request().Context(), id))
}

// PostResume runs the line's clock again.
func (h Handlers) PostResume(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Resume(c.Request().Context(), id))
}

// PostAdvance admits more places at once.
func (h Handlers) PostAdvance(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var a api.QueueAdvance
	if err := api.Decode(c, &a, false); err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Advance(c.Request().Context(), id, a.By))
}

// PostRevoke makes a buyer's place admit nobody.
func (h Handlers) PostRevoke(c echo.Context) error {
	id, err := productID(c)
	if err != nil {
		return err
	}
	var rv api.QueueRevoke
	if err := api.Decode(c, &rv, false); err != nil {
		return err
	}
	return summarise(c)(h.Rooms.Revoke(c.Request().Context(), id, rv.User))
}

func summarise(c echo.Context) func(Summary, error) error {
	return func(s Summary, err error) error {
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, s)
	}
}
