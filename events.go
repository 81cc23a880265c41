package shardstock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// OrderStatus is where an order stands (api/openapi.yaml). Pending is only
// ever computed (a hold with no order row yet), never stored.
type OrderStatus string

// The order statuses.
const (
	StatusPending         OrderStatus = "pending"
	StatusAwaitingPayment OrderStatus = "awaiting_payment"
	StatusPaid            OrderStatus = "paid"
	StatusCancelled       OrderStatus = "cancelled"
	StatusFailed          OrderStatus = "failed"
)

// OrderStatuses are the statuses a stored order row can have.
var OrderStatuses = []OrderStatus{StatusAwaitingPayment, StatusPaid, StatusCancelled, StatusFailed}

// Order is an order row.
type Order struct {
	ID        string      `json:"order_id"`
	UserID    string      `json:"user_id"`
	ProductID string      `json:"product_id"`
	Shard     int         `json:"shard"`
	Status    OrderStatus `json:"status"`
	// PayBy is when an order awaiting payment is cancelled if unpaid: the
	// payment timeout after its row was written (zero: not known, as for a
	// pending reservation or a row from before 0.7.0).
	PayBy time.Time `json:"pay_by,omitzero"`
	// ReservedAt is when its reservation was made (the reserving
	// coordinator's clock); zero when not read. Not part of the API.
	ReservedAt time.Time `json:"-"`
}

// ReservationEvent is what a shard's outbox says about one reservation. The
// purchase script writes the fields res, user and at; the product and the
// shard are those of the stream (ReservationFromOutbox).
type ReservationEvent struct {
	ID        string `json:"id"`
	UserID    string `json:"user"`
	ProductID string `json:"product"`
	Shard     int    `json:"shard"`
	AtMS      int64  `json:"at"` // unix ms on the coordinator that reserved
}

// At is the reservation time.
func (e ReservationEvent) At() time.Time { return time.UnixMilli(e.AtMS) }

// ReservationFromOutbox decodes an entry of the outbox stream of product on
// shard: its fields res, user and at. An entry that names its product and
// shard itself (written by 0.6.0, or by hand) is taken as it says: one
// naming a product the catalog lacks is then parked by the consumer for an
// operator, not dropped.
func ReservationFromOutbox(f map[string]any, product string, shard int) (ReservationEvent, error) {
	if _, ok := f["product"]; !ok {
		f["product"] = product
	}
	if _, ok := f["shard"]; !ok {
		f["shard"] = strconv.Itoa(shard)
	}
	return ReservationFromFields(f)
}

// ReservationFromFields decodes an outbox stream entry's fields, product and
// shard included.
func ReservationFromFields(f map[string]any) (ReservationEvent, error) {
	str := func(k string) string { s, _ := f[k].(string); return s }
	shard, err1 := strconv.Atoi(str("shard"))
	at, err2 := strconv.ParseInt(str("at"), 10, 64)
	e := ReservationEvent{ID: str("res"), UserID: str("user"), ProductID: str("product"), Shard: shard, AtMS: at}
	if err1 != nil || err2 != nil || e.ID == "" || !ValidID(e.UserID) || !ValidID(e.ProductID) {
		return e, fmt.Errorf("malformed outbox entry %v", f)
	}
	return e, nil
}

// Action is what a settlement makes the holder shard do with a hold.
type Action string

// The settlement actions.
const (
	// Confirm: the order was paid; locked -> sold.
	Confirm Action = "confirm"
	// Release: the order was cancelled, failed or timed out; locked ->
	// salable, and the buyer's claim is given back.
	Release Action = "release"
	// ReleaseDuplicate: a second hold for one reservation id (a reserve that
	// ran on a shard whose answer was lost, then failed over); locked ->
	// salable, the claim stays with the order.
	ReleaseDuplicate Action = "release_duplicate"
)

// Settlement is the pay-result message: apply Action to hold OrderID of
// ProductID on Shard. Applying it twice changes nothing.
type Settlement struct {
	OrderID   string `json:"order_id"`
	ProductID string `json:"product_id"`
	UserID    string `json:"user_id"`
	Shard     int    `json:"shard"`
	Action    Action `json:"action"`
}

// Encode is the message body.
func (s Settlement) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// DecodeSettlement parses a message body.
func DecodeSettlement(b []byte) (Settlement, error) {
	var s Settlement
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("settlement: %w", err)
	}
	switch s.Action {
	case Confirm, Release, ReleaseDuplicate:
	default:
		return s, fmt.Errorf("settlement: unknown action %q", s.Action)
	}
	if !ValidID(s.ProductID) || s.OrderID == "" {
		return s, fmt.Errorf("settlement: malformed %+v", s)
	}
	return s, nil
}

// Encode is the message body of a reservation relayed to a broker.
func (e ReservationEvent) Encode() []byte {
	b, _ := json.Marshal(e)
	return b
}

// DecodeReservation parses a relayed reservation message body.
func DecodeReservation(b []byte) (ReservationEvent, error) {
	var e ReservationEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("reservation: %w", err)
	}
	if e.ID == "" || !ValidID(e.UserID) || !ValidID(e.ProductID) {
		return e, fmt.Errorf("reservation: malformed %+v", e)
	}
	return e, nil
}

// OrderCounts are a product's orders on one shard: awaiting payment, paid,
// and released (cancelled or failed).
type OrderCounts struct {
	AwaitingPayment int64 `json:"awaiting_payment"`
	Paid            int64 `json:"paid"`
	Released        int64 `json:"released"`
}

// Transfer moves salable units of a product from one shard to another
// (rebalance, drain). State: started, out (Moved units taken off From), done.
type Transfer struct {
	ID        string `json:"id"`
	ProductID string `json:"product_id"`
	From      int    `json:"from"`
	To        int    `json:"to"`
	Wanted    int64  `json:"wanted"`
	Moved     int64  `json:"moved"`
	State     string `json:"state"`
}

// NewOrder is one order row to write for a reservation: the product's
// per-user limit and the status to write (awaiting_payment, or failed).
type NewOrder struct {
	Event  ReservationEvent
	Limit  int64
	Status OrderStatus
}

// ErrOrderExists: an order with that reservation id exists already (the
// order store's answer to a second insert).
var ErrOrderExists = errors.New("order exists")

// SaleSecond is one count of the sale report (package report): in Second
// (unix seconds) of Product's sale, N purchases answered Label (Kind
// KindOutcome), N answered within Label ms (KindLatency, a histogram
// bucket), or shard Label's salable units (KindSalable).
type SaleSecond struct {
	Product string
	Second  int64
	Kind    string
	Label   string
	N       int64
}

// The kinds of SaleSecond.
const (
	KindOutcome = "outcome"
	KindLatency = "latency"
	KindSalable = "salable"
)
