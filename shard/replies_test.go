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
