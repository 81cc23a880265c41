package order

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Register mounts the buyer's order routes on e. With Config.PaySecret
// set, the payment callback must carry X-Signature: sha256=<hex
// HMAC-SHA256 of the body under the secret> (SignPayment).
func (s *Service) Register(e *echo.Echo, identity api.Identity) {
	h := &handlers{s: s, identity: identity}
	e.GET("/api/v1/orders/:id", h.get)
	e.POST("/api/v1/orders/:id/pay", h.pay)
	e.POST("/api/v1/orders/:id/cancel", h.cancel)
}

type handlers struct {
	s        *Service
	identity api.Identity
}

// checkSignature verifies the callback's signature in constant time.
func (h *handlers) checkSignature(c echo.Context, body []byte) error {
	if !h.s.signedBy(body, c.Request().Header.Get("X-Signature")) {
		return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: "the payment callback signature (X-Signature) is missing or wrong"}
	}
	return nil
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

func (h *handlers) pay(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	body, err := api.ReadBody(c)
	if err != nil {
		return err
	}
	if err := h.checkSignature(c, body); err != nil {
		return err
	}
	var b PaymentResult
	if err := api.DecodeBody(c, body, &b, false); err != nil {
		return err
	}
	if b.Result != "success" && b.Result != "fail" {
		return shardstock.Invalid(`result must be "success" or "fail"`)
	}
	if len(h.s.cfg.PaySecret) > 0 {
		if err := h.s.checkCallback(c.Request().Context(), id, user, b.PaymentCallback); err != nil {
			return err
		}
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
