package shardstock

import "errors"

// Error is the one domain error type. Code is the stable machine-readable
// code of the API ({"error": code, "message": message}); two Errors match
// with errors.Is when their codes are equal.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is makes errors.Is(err, ErrSoldOut) true for any *Error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The sentinel errors. Adapters wrap infrastructure failures in
// ErrUnavailable; an outage is never reported as ErrSoldOut.
var (
	ErrInvalid      = &Error{"bad_request", "the request is invalid"}
	ErrUnauthorized = &Error{"unauthorized", "missing or invalid credentials"}
	ErrNotFound     = &Error{"not_found", "no such resource"}
	// ErrNotFound, naming what was not found.
	ErrNoProduct       = &Error{"not_found", "no such product"}
	ErrNoOrder         = &Error{"not_found", "no such order"}
	ErrNoTicket        = &Error{"not_found", "no such ticket"}
	ErrNoShard         = &Error{"not_found", "no such shard"}
	ErrNoSession       = &Error{"not_found", "no such sale session"}
	ErrNotStarted      = &Error{"not_started", "the sale has not started yet"}
	ErrEnded           = &Error{"ended", "the sale has ended"}
	ErrPaused          = &Error{"paused", "sales of this product are paused"}
	ErrLimitReached    = &Error{"limit_reached", "you already hold the maximum number of units of this product"}
	ErrConflict        = &Error{"conflict", "the request conflicts with the current state"}
	ErrKeyReused       = &Error{"idempotency_key_reused", "this Idempotency-Key was first used with another product or request"}
	ErrSoldOut         = &Error{"sold_out", "the product is sold out"}
	ErrTooLarge        = &Error{"too_large", "the request body is too large"}
	ErrHeadersTooLarge = &Error{"headers_too_large", "the request headers are too large"}
	ErrUnsupported     = &Error{"unsupported_media_type", "the request body must be application/json"}
	ErrRateLimited     = &Error{"rate_limited", "too many requests, retry later"}
	ErrUnavailable     = &Error{"unavailable", "the service cannot take this request now, retry later"}
	ErrInternal        = &Error{"internal", "internal error"}
	// The waiting room's (403): joining before the line opens, buying
	// without an admitted place, with a revoked place, joining without the
	// proof of work the line asks for.
	ErrQueueNotOpen = &Error{"not_open", "the waiting room for this product is not open yet"}
	ErrNotAdmitted  = &Error{"not_admitted", "this product sells through a waiting room: join it and buy when admitted"}
	ErrRevoked      = &Error{"revoked", "your place in this waiting room was revoked"}
	ErrWorkRequired = &Error{"work_required", "joining this waiting room needs a proof of work"}
)

// Invalid returns an ErrInvalid with a specific message.
func Invalid(msg string) error { return &Error{ErrInvalid.Code, msg} }

// Conflict returns an ErrConflict with a specific message.
func Conflict(msg string) error { return &Error{ErrConflict.Code, msg} }

// Public is the *Error a client may be shown for err: its own *Error, or
// ErrInternal for any other error (whose text may name hosts or keys).
// The HTTP status of each code is api's.
func Public(err error) *Error {
	e, ok := err.(*Error) // most errors are a sentinel itself: no unwrapping
	if !ok && !errors.As(err, &e) {
		return ErrInternal
	}
	return e
}

// InDoubt is an ErrUnavailable purchase some of whose steps went unanswered
// and could not be resolved: on the shards in Shards (bit i: shard i) the
// reservation id may hold a unit, or a step may still take one. Whoever
// tries the purchase again with the same id passes Shards along, and the
// shard set resolves them before anything else is decided (shard/walk.go):
// a buyer's answer is then the truth, and an id is never held on two
// shards.
type InDoubt struct {
	Shards uint64
	Err    error // wraps ErrUnavailable
}

func (e *InDoubt) Error() string { return e.Err.Error() }
func (e *InDoubt) Unwrap() error { return e.Err }

// DoubtOf returns the shards err leaves in doubt (an *InDoubt in its
// chain), or 0.
func DoubtOf(err error) uint64 {
	var d *InDoubt
	if errors.As(err, &d) {
		return d.Shards
	}
	return 0
}

// The one rule for "do not try again", read by every transport and retry
// loop:
//
//   - IsRefused: the message can never be applied, by any process (a forged
//     or contradicted settlement, a refused payment result, a reservation
//     of a product the catalog does not have). It changed nothing; the
//     transport moves it, with the reason, to a dead letter for an operator
//     (a settlement or a payment result on either transport, a reservation
//     on the broker; the outbox parks a reservation, as a Permanent one).
//   - IsPermanent (every refusal is permanent too): this process cannot
//     apply it, and trying again will not help; another process may (one
//     with the whole shard list). A stream entry is parked (left pending for
//     an operator or another coordinator), a retry loop stops.
//   - anything else: nothing was decided; deliver or try again later.

// Permanent marks err as one no retry in this process can fix. The mark
// keeps err's text, and errors.Is still finds err.
func Permanent(err error) error { return &permanent{err: err} }

// Refused marks err as a message nobody can ever apply: Permanent, and
// dead-lettered (see above).
func Refused(err error) error { return &permanent{err: err, refused: true} }

// IsPermanent reports whether err, or an error it wraps, was marked
// Permanent or Refused.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}

// IsRefused reports whether err, or an error it wraps, was marked Refused.
func IsRefused(err error) bool {
	var p *permanent
	for e := err; errors.As(e, &p); e = p.err {
		if p.refused {
			return true
		}
	}
	return false
}

type permanent struct {
	err     error
	refused bool
}

func (e *permanent) Error() string { return e.err.Error() }
func (e *permanent) Unwrap() error { return e.err }
