package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shardstock/shardstock/api"
	"pgregory.net/rapid"
)

// The waiting room in the model (issue 40): 1 product in 4 sells through a
// line (fifo, a thousand places a second, the window an hour or ten
// minutes: the fast mode's payment timeouts pass it). Every buyer joins
// before a purchase and buys with their place; the line holds while the
// product is sold out and runs again when units come back, so a line that
// never moves on again is stranded stock (the checks at rest buy the rest
// through it). A 403 not_admitted is checked true when it is said: the
// buyer's place, looked at then, is not admitted.

// queueRoom draws whether p sells through a waiting room and defines it
// through coordinator c.
func (h *history) queueRoom(c int, p *mproduct) {
	if !h.coin(2, "a waiting room for "+p.id) {
		return
	}
	window := rapid.SampledFrom([]int{600, 3600}).Draw(h.t, "window seconds")
	rep := h.admin(c, "PUT", api.AdminBase+api.Path(api.AdminQueuePath, p.id),
		fmt.Sprintf(`{"mode":"fifo","rate":1000,"lead_seconds":600,"window_seconds":%d}`, window))
	if rep.status != 200 {
		h.fail("define the waiting room of %s: %s %s", p.id, rep.short(), rep.raw)
	}
	p.queued = true
	h.env.did("waiting-room", 1)
	h.roomsEverywhere()
	h.logf("%s sells through a waiting room (a thousand places a second, a window of %d s)", p.id, window)
}

// roomsEverywhere has every running coordinator read the lines now, as
// each does every half second.
func (h *history) roomsEverywhere() {
	if h.dbAway {
		return
	}
	for c, m := range h.coords {
		if m != nil {
			if err := m.room.Refresh(context.Background()); err != nil {
				h.fail("coordinator %d reads the waiting rooms: %v", c, err)
			}
		}
	}
}

// purchase sends user's purchase of p through coordinator c, with the
// buyer's place when p is queued (joining first). A patient buyer (the
// checks at rest) whose place waits, or is told sold out, while the shards
// have units salable looks again for a few seconds: a line held while sold
// out runs again once a count (a snapshot at most a second old, read every
// half second) finds units, then admits the places that joined meanwhile
// at its rate. (On the fake clock no time passes between a join and a
// purchase: place 1 of a line defined that instant is not reached yet.)
func (h *history) purchase(c int, user string, p *mproduct, patient bool) modelReply {
	if !p.queued {
		return h.call(c, "POST", "/api/v1/products/"+p.id+"/purchase", "", "X-User-ID", user)
	}
	token, rep := h.place(c, user, p)
	if token == "" {
		return rep // the join's answer (a 503 while the database is away) is the buyer's
	}
	send := func() modelReply {
		return h.call(c, "POST", "/api/v1/products/"+p.id+"/purchase", "", "X-User-ID", user, api.QueueTokenHeader, token)
	}
	rep = send()
	if rep.status != 403 || rep.str("error") != "not_admitted" {
		return rep
	}
	// Not admitted: true when the place, looked at now, is not admitted.
	// A place admitted on one coordinator's reading of the line may be
	// told to wait on another's a moment behind it (each reads the lines
	// every half second): the buyer looks again, as the page tells them to,
	// and buys again once admitted, for up to the patience.
	const patience = 10 * time.Second
	for deadline := time.Now().Add(patience); ; time.Sleep(100 * time.Millisecond) {
		look := h.call(c, "GET", "/api/v1/products/"+p.id+"/queue", "", "X-User-ID", user, api.QueueTokenHeader, token)
		status := look.str("status")
		waits := patient && (status == "waiting" || status == "held" || status == "sold_out") && h.salable(p) > 0
		if look.status != 200 || (status != "admitted" && !waits) {
			return rep // passed, revoked, sold out, waiting, or no answer: the 403 stands
		}
		if status == "admitted" { // (sent again before it is judged: the look may be the first to see the turn)
			h.roomsEverywhere()
			if rep = send(); rep.status != 403 || rep.str("error") != "not_admitted" {
				return rep
			}
		}
		if time.Now().After(deadline) {
			if status == "admitted" {
				h.fail("a 403 not_admitted to %s's place in %s's line, which is admitted: %s (look: %s)", user, p.id, rep.raw, look.raw)
			}
			lines, err := h.sql.Queues.QueueLines(context.Background())
			h.fail("stranded stock: %s's waiting room has admitted nobody for %s with %d units salable (%s's look: %s; the line at %s: %+v %v)", p.id, patience, h.salable(p), user, look.raw, time.Now().UTC().Format(time.RFC3339Nano), lines[p.id], err)
		}
	}
}

// salable is p's units salable on the shards that answer.
func (h *history) salable(p *mproduct) int64 {
	var n int64
	for i := range modelShards {
		if c, ok := h.counters(i, p.id); ok {
			n += c[0]
		}
	}
	return n
}

// place is user's place in p's line, joined through coordinator c when
// the buyer has none ("" and the join's answer when it failed).
func (h *history) place(c int, user string, p *mproduct) (string, modelReply) {
	key := p.id + "\x00" + user
	if t := h.places[key]; t != "" {
		return t, modelReply{}
	}
	rep := h.call(c, "POST", "/api/v1/products/"+p.id+"/queue", "", "X-User-ID", user)
	if rep.status != 200 || rep.str("token") == "" {
		return "", rep
	}
	if h.places == nil {
		h.places = map[string]string{}
	}
	h.places[key] = rep.str("token")
	return h.places[key], rep
}
