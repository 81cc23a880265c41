package order

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Identity extracts the buyer's user id from a request (ErrUnauthorized).
type Identity func(r *http.Request) (string, error)

// Register mounts the buyer's order routes on e. With paySecret set, the
// payment callback must carry X-Signature: sha256=<hex HMAC-SHA256 of the
// body under paySecret>.
func (s *Service) Register(e *echo.Echo, identity Identity, paySecret []byte) {
	h := &handlers{s: s, identity: identity, paySecret: paySecret}
	e.GET("/api/v1/orders/:id", h.get)
	e.POST("/api/v1/orders/:id/pay", h.pay)
	e.POST("/api/v1/orders/:id/cancel", h.cancel)
}

type handlers struct {
	s         *Service
	identity  Identity
	paySecret []byte
}

// SignPayment is the X-Signature value for a payment callback body: a
// signed callback's body names the order, the result, the amount, the
// provider's transaction id and the time (PaymentCallback), so the
// signature binds all of them.
func SignPayment(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// checkSignature verifies the callback's signature in constant time.
func (h *handlers) checkSignature(c echo.Context, body []byte) error {
	if len(h.paySecret) == 0 {
		return nil
	}
	want := SignPayment(h.paySecret, body)
	if !hmac.Equal([]byte(c.Request().Header.Get("X-Signature")), []byte(want)) {
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

type payBody struct {
	Result string `json:"result"`
	PaymentCallback
}

// PaymentCallback is what a signed payment callback binds besides the
// result (required when a payment secret is set; ignored otherwise).
type PaymentCallback struct {
	OrderID       string `json:"order_id,omitempty"`
	AmountCents   *int64 `json:"amount_cents,omitempty"`
	TransactionID string `json:"transaction_id,omitempty"`
	Timestamp     int64  `json:"timestamp,omitempty"` // unix seconds
}

// callbackWindow is how far a signed callback's timestamp may be from now.
const callbackWindow = 5 * time.Minute

// errBadCallback answers a signed callback that does not bind this order.
func errBadCallback(why string) error {
	return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: "payment callback refused: " + why}
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
	var b payBody
	if err := api.DecodeBody(c, body, &b, false); err != nil {
		return err
	}
	if b.Result != "success" && b.Result != "fail" {
		return shardstock.Invalid(`result must be "success" or "fail"`)
	}
	if len(h.paySecret) > 0 {
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

// checkCallback refuses (401) a signed callback that was made for another
// order, for another amount than the product's price, outside the time
// window, without a transaction id, or whose transaction id paid another
// order already; a repeat for the same order passes (paying is idempotent).
func (s *Service) checkCallback(ctx context.Context, id, user string, cb PaymentCallback) error {
	switch {
	case cb.OrderID != id:
		return errBadCallback("it was signed for another order")
	case cb.TransactionID == "" || len(cb.TransactionID) > 128:
		return errBadCallback("transaction_id must be 1-128 characters")
	case cb.AmountCents == nil:
		return errBadCallback("amount_cents is missing")
	}
	if d := s.cfg.Now().Sub(time.Unix(cb.Timestamp, 0)); d > callbackWindow || d < -callbackWindow {
		return errBadCallback("its timestamp is not within 5 minutes of now")
	}
	o, err := s.Get(ctx, id, user)
	if err != nil {
		return err
	}
	p, err := s.product(ctx, o.ProductID)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if *cb.AmountCents != p.PriceCents {
		return errBadCallback("amount_cents is not the order's amount")
	}
	was, err := s.store.RecordTransaction(ctx, cb.TransactionID, id)
	if err != nil {
		return fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if was != "" && was != id {
		return errBadCallback("its transaction_id paid another order")
	}
	return nil
}
