package order

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Orders are the buyer's calls on their own orders (Service).
type Orders interface {
	Get(ctx context.Context, id, user string) (*shardstock.Order, error)
	Pay(ctx context.Context, id, user string, success bool) (*shardstock.Order, error)
	Cancel(ctx context.Context, id, user string) (*shardstock.Order, error)
}

// Callbacks check a payment callback before it is applied (Service):
// its signature over the raw body, then what the signed body binds.
type Callbacks interface {
	CheckCallbackSignature(body []byte, signature string) error
	CheckCallback(ctx context.Context, id, user string, cb PaymentCallback) error
}

var (
	_ Orders    = (*Service)(nil)
	_ Callbacks = (*Service)(nil)
)

// Handlers are the buyer's order calls over HTTP; Identity says who the
// caller is. The routes that mount them are listed in one place,
// cmd/shardstock/routes.go.
type Handlers struct {
	Orders    Orders
	Callbacks Callbacks
	Identity  api.Identity
}

// caller checks the order id format and the caller's identity.
func (h Handlers) caller(c echo.Context) (id, user string, err error) {
	id = c.Param("id")
	if !shardstock.ValidID(id) {
		return "", "", shardstock.ErrNoOrder
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
	o, err := h.Orders.Get(c.Request().Context(), id, user)
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
	b, err := h.paymentResult(c)
	if err != nil {
		return err
	}
	if err := h.Callbacks.CheckCallback(c.Request().Context(), id, user, b.PaymentCallback); err != nil {
		return err
	}
	o, err := h.Orders.Pay(c.Request().Context(), id, user, b.Result == "success")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}

// paymentResult reads the callback's body: signed (401), then a
// PaymentResult (400, 415).
func (h Handlers) paymentResult(c echo.Context) (PaymentResult, error) {
	var b PaymentResult
	body, err := api.ReadBody(c)
	if err != nil {
		return b, err
	}
	if err := h.Callbacks.CheckCallbackSignature(body, c.Request().Header.Get(api.SignatureHeader)); err != nil {
		return b, err
	}
	if err := api.DecodeBody(c, body, &b, false); err != nil {
		return b, err
	}
	if b.Result != "success" && b.Result != "fail" {
		return b, shardstock.Invalid(`result must be "success" or "fail"`)
	}
	return b, nil
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
	o, err := h.Orders.Cancel(c.Request().Context(), id, user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, o)
}
