package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// A database outage (issue 40): the coordinators lose their MariaDB (the
// server stopped, its machine lost, a partition) while the sale goes on.
// Every connection they hold to it ends at once and none can be opened
// until it returns; the model's own reads go on by another road, so the
// checks still see the order table. Purchases go on against the shards
// (their reservations wait in the streams for the order writers); what
// needs the database answers 503, never 500, and nothing is lost: the
// writers, the settlement and give-back sweeps and the resyncs pick up
// when it returns. Only MariaDB is reached over a network: a SQLite file
// is the coordinator's own (its slow disk is the stall-orders step).

// dbNetSeq names each history's database network (mysql's dialers are
// registered by name, once per process).
var dbNetSeq atomic.Int64

// coordinatorDB is the database address the coordinators are given: a
// MariaDB's through a network a db-down step can end.
func (h *history) coordinatorDB() string {
	if !strings.HasPrefix(h.db, "mysql://") || !strings.Contains(h.db, "@tcp(") {
		return h.db
	}
	if h.dbNet == nil {
		h.dbNet = newSeverable()
		h.dbNetName = fmt.Sprintf("model-db-%d", dbNetSeq.Add(1))
		dial := h.dbNet.dial(realDial)
		mysql.RegisterDialContext(h.dbNetName, func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})
	}
	return strings.Replace(h.db, "@tcp(", "@"+h.dbNetName+"(", 1)
}

// dbDown ends the coordinators' every connection to their database and
// refuses new ones; dbUp lets them connect again.
func (h *history) dbDown() {
	h.dbNet.kill()
	h.dbAway = true
	h.logf("the database goes down (every coordinator's connection to it ends, none can be made)")
}

func (h *history) dbUp() {
	h.dbNet.revive()
	h.dbAway = false
	h.logf("the database is back")
}
