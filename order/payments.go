package order

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/api"
)

// Payment results reach the order service two ways, checked alike: the
// provider's HTTP callback (POST /api/v1/orders/{id}/pay, http.go) and a
// message on the queue (ApplyPaymentMessage), the way a payment centre
// publishes them. Both carry a PaymentResult; with Config.PaySecret set its
// signature (SignPayment) binds the order, the result, the amount, the
// provider's transaction id and the time.

// PaymentResult is a payment result: the callback's body, and a payment
// message's body.
type PaymentResult struct {
	Result string `json:"result"` // "success" or "fail"
	PaymentCallback
}

// PaymentCallback is what a signed payment result binds besides the result
// (required for a callback when a payment secret is set, and for every
// message).
type PaymentCallback struct {
	OrderID       string `json:"order_id,omitempty"`
	AmountCents   *int64 `json:"amount_cents,omitempty"`
	TransactionID string `json:"transaction_id,omitempty"`
	Timestamp     int64  `json:"timestamp,omitempty"` // unix seconds
}

// SignPayment is the signature of a payment result's body: "sha256=" and
// the hex HMAC-SHA256 of the body under secret. A callback carries it in
// X-Signature, a message in its signature property (or stream field).
func SignPayment(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// signedBy says whether signature is body's under the payment secret, in
// constant time; without a secret every body passes (dev).
func (s *Service) signedBy(body []byte, signature string) bool {
	if len(s.cfg.PaySecret) == 0 {
		return true
	}
	ok := hmac.Equal([]byte(signature), []byte(SignPayment(s.cfg.PaySecret, body)))
	if len(s.cfg.PayPrevious) > 0 && hmac.Equal([]byte(signature), []byte(SignPayment(s.cfg.PayPrevious, body))) {
		ok = true
	}
	return ok
}

// callbackWindow is how far a signed callback's timestamp may be from now.
const callbackWindow = 5 * time.Minute

// errBadCallback answers a signed callback that does not bind this order.
func errBadCallback(why string) error {
	return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: "payment callback refused: " + why}
}

// incomplete says what a signed result lacks ("" when nothing).
func (cb PaymentCallback) incomplete() string {
	switch {
	case cb.TransactionID == "" || len(cb.TransactionID) > 128:
		return "transaction_id must be 1-128 characters"
	case cb.AmountCents == nil:
		return "amount_cents is missing"
	}
	return ""
}

// CheckCallbackSignature refuses (401) a callback body whose signature
// (its X-Signature header) is not SignPayment's under Config.PaySecret;
// without a secret every body passes (dev).
func (s *Service) CheckCallbackSignature(body []byte, signature string) error {
	if !s.signedBy(body, signature) {
		return &shardstock.Error{Code: shardstock.ErrUnauthorized.Code, Message: "the payment callback signature (X-Signature) is missing or wrong"}
	}
	return nil
}

// CheckCallback refuses (401) a callback for the caller's order id when
// Config.PaySecret is set and cb was made for another order, for another
// amount than the product's price, outside the time window, without a
// transaction id, or with a transaction id that paid another order already;
// a repeat for the same order passes (paying is idempotent). Without a
// secret every callback passes (dev). Get's errors for an order the caller
// cannot see; ErrUnavailable when the database does not answer.
func (s *Service) CheckCallback(ctx context.Context, id, user string, cb PaymentCallback) error {
	if len(s.cfg.PaySecret) == 0 {
		return nil
	}
	if cb.OrderID != id {
		return errBadCallback("it was signed for another order")
	}
	if why := cb.incomplete(); why != "" {
		return errBadCallback(why)
	}
	if d := s.cfg.Now().Sub(time.Unix(cb.Timestamp, 0)); d > callbackWindow || d < -callbackWindow {
		return errBadCallback("its timestamp is not within 5 minutes of now")
	}
	return s.bindCallback(ctx, id, user, cb)
}

// bindCallback binds a signed callback to the caller's order (bind).
func (s *Service) bindCallback(ctx context.Context, id, user string, cb PaymentCallback) error {
	o, err := s.Get(ctx, id, user)
	if err != nil {
		return err
	}
	why, err := s.bind(ctx, o, cb)
	if err != nil {
		return err
	}
	if why != "" {
		return errBadCallback(why)
	}
	return nil
}

// bind checks a signed result against order o: the amount is the order's
// (its product's price), and the transaction id paid no other order (it is
// recorded for o here). why != "": refused; err: nothing was decided.
func (s *Service) bind(ctx context.Context, o *shardstock.Order, cb PaymentCallback) (why string, err error) {
	p, err := s.product(ctx, o.ProductID)
	if err != nil {
		return "", fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if *cb.AmountCents != p.PriceCents {
		return "amount_cents is not the order's amount", nil
	}
	was, err := s.store.RecordTransaction(ctx, cb.TransactionID, o.ID)
	if err != nil {
		return "", fmt.Errorf("%w: %w", shardstock.ErrUnavailable, err)
	}
	if was != "" && was != o.ID {
		return "its transaction_id paid another order", nil
	}
	return "", nil
}

// ErrPaymentRefused marks a payment message that can never be applied (a
// bad signature, not a payment result, another amount, a transaction id
// that paid another order, an order that does not exist here, a success
// for an order already released): the consumer moves it to the dead-letter
// topic or stream for an operator, where a success asks for a refund. It
// is shardstock.Refused: no consumer tries it again.
var ErrPaymentRefused = shardstock.Refused(errors.New("payment message refused"))

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPaymentRefused, fmt.Sprintf(format, args...))
}

// What ApplyPaymentMessage did with a message it accepted.
const (
	PaymentApplied   = "applied"   // the order took the result
	PaymentDuplicate = "duplicate" // the order had this result already
	// PaymentStale: a fail for an order that is paid: an earlier attempt's
	// result, overtaken by the success (no money was taken by it).
	PaymentStale = "stale"
)

// ApplyPaymentMessage applies a payment result that arrived as a message
// (body: a PaymentResult; signature: SignPayment of the body) exactly as a
// callback is applied, idempotently: a repeat is PaymentDuplicate.
//
// The checks are the callback's (signature, order, amount, transaction id)
// but for the timestamp window. The window keeps a captured callback from
// being replayed over HTTP later; a message comes from the queue, which
// only the payment centre writes to, and may wait there far longer than 5
// minutes (a coordinator or broker outage) without being any less true. A
// message replayed anyway changes nothing: the order's state machine only
// moves out of awaiting_payment once, and a transaction id pays one order.
//
// Errors: ErrPaymentRefused (never applicable: dead-letter it), or any
// other error: nothing was decided (the order is not written yet — a result
// may overtake its reservation on the queue — or the database did not
// answer); deliver the message again later.
func (s *Service) ApplyPaymentMessage(ctx context.Context, body []byte, signature string) (string, error) {
	if !s.signedBy(body, signature) {
		return "", refused("the signature is missing or wrong")
	}
	var m PaymentResult
	if err := api.DecodeStrict(body, &m); err != nil {
		return "", refused("not a payment result: %v", err)
	}
	switch {
	case m.Result != "success" && m.Result != "fail":
		return "", refused(`result must be "success" or "fail"`)
	case !shardstock.ValidID(m.OrderID):
		return "", refused("order_id %q is not an order id", m.OrderID)
	}
	if why := m.incomplete(); why != "" {
		return "", refused("%s", why)
	}
	o, err := s.find(ctx, m.OrderID)
	switch {
	case err != nil:
		return "", err
	case o == nil:
		return "", refused("order %s does not exist here", m.OrderID)
	case o.Status == shardstock.StatusPending:
		return "", shardstock.Conflict("order " + o.ID + " is not written yet")
	}
	why, err := s.bind(ctx, o, m.PaymentCallback)
	if err != nil {
		return "", err
	}
	if why != "" {
		return "", refused("order %s: %s", o.ID, why)
	}
	success := m.Result == "success"
	to := shardstock.StatusCancelled
	if success {
		to = shardstock.StatusPaid
	}
	now, changed, err := s.transitionChanged(ctx, o.ID, o.UserID, to)
	switch {
	case err == nil && changed:
		return PaymentApplied, nil
	case err == nil:
		return PaymentDuplicate, nil
	case !errors.Is(err, shardstock.ErrConflict) || now == nil || now.Status == shardstock.StatusPending:
		return "", err
	case !success: // and the order is paid
		return PaymentStale, nil
	}
	return "", refused("order %s was paid after it was %s: refund transaction %s", o.ID, now.Status, m.TransactionID)
}
