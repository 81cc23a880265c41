package shard

import (
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What a call's error says about the shard: the one place that reads
// go-redis's errors (ha, metrics and messaging are told the outcome).

// Answered reports whether a call's error still came with an answer from
// the shard: an error reply (other than LOADING: a shard loading its data
// is not ready) proves it is up. ha.Health.Answered is set to it.
func Answered(err error) bool {
	if err == nil {
		return true
	}
	var reply redis.Error
	return errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "LOADING")
}

// notSent reports whether err proves the command never reached the shard
// (so a script certainly did not run). Any other error leaves the outcome
// unknown: the script may have run before the connection broke.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, errShardDown) || errors.Is(err, errFenced) || errors.Is(err, errStepDeadline) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}
