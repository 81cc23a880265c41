package shard

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// A refused connection proves the script never ran, so the attempt may give
// its claim back; this pins that go-redis reports it as a dial error.
func TestRefusedConnectionIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	s, err := Open([]string{"redis://" + addr + "/0"}, Config{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Ping(context.Background(), 0)
	if err == nil || !notSent(err) {
		t.Fatalf("ping of a closed port: %v (notSent %v), want a dial error", err, notSent(err))
	}
}

// Errors that prove a step never left this process leave an attempt
// certain (its claim may be given back); a deadline that passed while a
// call was in flight does not.
func TestNotSentClassifiesStepErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"shard down, not tried", errShardDown, true},
		{"shard fenced after a restart", fmt.Errorf("shard 1: %w", errFenced), true},
		{"queued past its deadline, not sent", errStepDeadline, true},
		{"deadline while in flight", context.DeadlineExceeded, false},
	} {
		if got := notSent(tc.err); got != tc.want {
			t.Errorf("%s: notSent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
