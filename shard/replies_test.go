package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is a Redis error reply, as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func TestAnswered(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	cases := []struct {
		name string
		err  error
		up   bool
	}{
		{"success", nil, true},
		{"error reply means it answered", replyError("ERR wrong number of arguments"), true},
		{"redis.Nil means it answered", redis.Nil, true},
		{"loading is not ready", replyError("LOADING Redis is loading the dataset in memory"), false},
		{"refused", refused, false},
		{"wrapped refused", fmt.Errorf("shard 0: %w", refused), false},
		{"deadline", context.DeadlineExceeded, false},
	}
	for _, tc := range cases {
		if got := Answered(tc.err); got != tc.up {
			t.Errorf("%s: Answered = %v, want %v", tc.name, got, tc.up)
		}
	}
}

func TestWhatAnErrorReplySays(t *testing.T) {
	wrapped := func(err error) error { return fmt.Errorf("shard 1: %w", err) }
	cases := []struct {
		name string
		says func(error) bool
		err  error
	}{
		{"NOSCRIPT", noScript, replyError("NOSCRIPT No matching script. Please use EVAL.")},
		{"OOM", OutOfMemory, wrapped(replyError("OOM command not allowed when used memory > 'maxmemory'."))},
		{"BUSYGROUP", GroupExists, replyError("BUSYGROUP Consumer Group name already exists")},
		{"NOGROUP", GroupLost, wrapped(replyError("NOGROUP No such key 'ss:settle' or consumer group 'inventory'"))},
		{"UNBLOCKED", StreamDeleted, replyError("UNBLOCKED the stream key no longer exists")},
	}
	for _, tc := range cases {
		if !tc.says(tc.err) {
			t.Errorf("%s: not recognised in %v", tc.name, tc.err)
		}
		for _, other := range []error{nil, replyError("ERR unknown command"), errors.New(tc.err.Error()), context.DeadlineExceeded} {
			if tc.says(other) {
				t.Errorf("%s: said of %v", tc.name, other)
			}
		}
	}
}
