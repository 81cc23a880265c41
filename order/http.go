package order

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Handlers are the buyer's order calls over HTTP; Identity says who the
// caller is. The routes that mount them are listed in one place,
// cmd/shardstock/routes.go.
type Handlers struct {
	Service  *Service
	Identity api.Identity
}

// checkSignature verifies the callback's signature in constant time.
func (h Handlers) checkSignature(c echo.Context, body []byte) error {
	if !h.Service.signedBy(body, c.Request().Header.Get("X-Signature")) {
		return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: "the payment callback signature (X-Signature) is missing or wrong"}
	}
	return nil
}

// caller checks the order id format and the caller's identity.
func (h Handlers) caller(c echo.Context) (id, user string, err error) {
	id = c.Param("id")
	if !shardstock.ValidID(id) {
		return "", "", shardstock.ErrNotFound
	}
	user, err = h.Identity(c.Request())
	return id, user, err
}

// Get answers the caller's own order.
func (h Handlers) Get(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	o, err := h.Service.Get(c.Request().Context(), id, user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

// PostPay is the payment callback. With Config.PaySecret set, it must
// carry X-Signature: sha256=<hex HMAC-SHA256 of the body under the secret>
// (SignPayment).
func (h Handlers) PostPay(c echo.Context) error {
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
	if len(h.Service.cfg.PaySecret) > 0 {
		if err := h.Service.checkCallback(c.Request().Context(), id, user, b.PaymentCallback); err != nil {
			return err
		}
	}
	o, err := h.Service.Pay(c.Request().Context(), id, user, b.Result == "success")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}

// PostCancel cancels the caller's order awaiting payment (an empty body).
func (h Handlers) PostCancel(c echo.Context) error {
	id, user, err := h.caller(c)
	if err != nil {
		return err
	}
	if err := api.Decode(c, &struct{}{}, true); err != nil {
		return err
	}
	o, err := h.Service.Cancel(c.Request().Context(), id, user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}
