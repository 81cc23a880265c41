package shard

import "strings"

// A purchase step and its answer, as lua/purchase.lua has them: the ops it
// takes and the statuses it answers. Keep this file and the script's
// header in step.

// step is one purchase step of one product on one shard.
type step struct {
	product  string
	op       string
	user, id string
	asOf     string // unix ms the sale window is checked at; "": now
	gen      string // the void generation a P or R step is sent for (walk.go); "": none
}

// Step ops.
const (
	opPurchase = "P" // claim, then reserve here (the buyer's home)
	opClaim    = "C" // claim only
	opReserve  = "R" // reserve only; the claim is held at the home
	opUnclaim  = "U" // give the claim back
	opReclaim  = "K" // claim again for a reservation made already (no window check)
	opResolve  = "Q" // resolve a P or R step whose answer was lost (walk.go)
)

// status is a step's answer.
type status string

const (
	statusOK         status = "ok"          // reserved (P, R); claim recorded (C); given back (U)
	statusDup        status = "dup"         // the id holds a unit here already (P, R: a replay)
	statusVoid       status = "void"        // the id is fenced here: P, R under another generation; Q under reply.gen now
	statusHeld       status = "held"        // Q: the id holds a unit here
	statusEmpty      status = "empty"       // no salable unit here (P: the claim is recorded)
	statusLimit      status = "limit"       // the buyer's claims fill the limit (P, C; nothing written)
	statusNotStarted status = "not_started" // before the sale window (nothing written)
	statusEnded      status = "ended"       // after the sale window (nothing written)
	// The script answers "unknown" for both of these; the step's op tells
	// them apart (readReply), and they mean different things to the walk.
	statusNoRegister status = "no_register" // P, C: no per-user limit register here, nobody vouches for the limit
	statusNotHere    status = "not_here"    // R: the product is not on this shard, so it has no unit to sell
)

// reply is a step's answer, read.
type reply struct {
	status status
	gen    string // with statusVoid from a Q: the generation the id is fenced under now
}

// readReply reads the script's answer s to a step of op: the one place that
// reads purchase.lua's replies.
func readReply(op, s string) reply {
	if s == "unknown" {
		if op == opReserve {
			return reply{status: statusNotHere}
		}
		return reply{status: statusNoRegister}
	}
	if gen, ok := strings.CutPrefix(s, "void "); ok {
		return reply{status: statusVoid, gen: gen}
	}
	return reply{status: status(s)}
}
