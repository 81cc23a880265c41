package order

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Identity extracts the buyer's user id from a request (ErrUnauthorized).
type Identity func(r *http.Request) (string, error)

// Register mounts the buyer's order routes on e.
func (s *Service) Register(e *echo.Echo, identity Identity) {
	h := &handlers{s: s, identity: identity}
	e.GET("/api/v1/orders/:id", h.get)
	e.POST("/api/v1/orders/:id/pay", h.pay)
	e.POST("/api/v1/orders/:id/cancel", h.cancel)
}

type handlers struct {
	s        *Service
	identity Identity
}

// caller checks the order id format and the caller's identity.
func (h *handlers) caller(c echo.Context) (id, user string, err error) {
	id = c.Param("id")
	if !shardstock.ValidID(id) {
		return "", "", shardstock.ErrNotFound
	}
	user, err = h.identity(c.Request())
	return id, user, err
}

func (h *handlers) get(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	o, err := h.s.Get(c.Request().Context(), id, user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

type payBody struct {
	Result string `json:"result"`
}

func (h *handlers) pay(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	var b payBody
	if err := api.Decode(c, &b, false); err != nil {
		return err
	}
	if b.Result != "success" && b.Result != "fail" {
		return shardstock.Invalid(`result must be "success" or "fail"`)
	}
	o, err := h.s.Pay(c.Request().Context(), id, user, b.Result == "success")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}

func (h *handlers) cancel(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	o, err := h.s.Cancel(c.Request().Context(), id, user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}
