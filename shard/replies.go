package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
)

// What a call's error says: the one place that reads go-redis's errors and
// Redis's error replies. ha, metrics and messaging are told the outcome
// (Answered; the stream and memory replies below), never the text.

// Answered reports whether a call's error still came with an answer from
// the shard: an error reply proves it is up, except LOADING (a shard
// loading its data is not ready) and a refusal of this coordinator's
// credentials (Refused: it answers, but serves nothing).
// ha.HealthConfig.Answered is set to it.
func Answered(err error) bool {
	if err == nil {
		return true
	}
	var reply redis.Error
	return errors.As(err, &reply) && !redis.HasErrorPrefix(err, "LOADING") && !Refused(err)
}

// Refused reports whether err is the shard refusing this coordinator: no
// password where it wants one (NOAUTH), a wrong one (WRONGPASS), a user
// without the rights (NOPERM), or a password where it has none. That is a
// settings mistake (SHARDSTOCK_SHARDS), not an outage.
func Refused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	return redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") || redis.HasErrorPrefix(err, "NOPERM") ||
		strings.Contains(reply.Error(), "without any password configured")
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

// noScript: the shard does not have the script (EVALSHA after a restart).
func noScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// OutOfMemory reports whether the shard refused a write at its maxmemory
// (OOM): scripts that free memory may still run there.
func OutOfMemory(err error) bool { return redis.HasErrorPrefix(err, "OOM") }

// GroupExists reports whether XGROUP CREATE found the consumer group there
// already (BUSYGROUP).
func GroupExists(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// GroupLost reports whether a stream read found no consumer group
// (NOGROUP): the shard lost its data, so the group is created again.
func GroupLost(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// StreamDeleted reports whether a blocked stream read ended because a
// stream it waited on was deleted (UNBLOCKED: a product archived).
func StreamDeleted(err error) bool { return redis.HasErrorPrefix(err, "UNBLOCKED") }

// CheckCredentials asks every shard at once whether it takes this
// coordinator's credentials, and returns an error naming each that refuses
// them (Refused), with what to change: a settings mistake, which would
// otherwise look like an outage for as long as it lasts. A shard that does
// not answer at all is no error here (it is waited for, as ever).
func (s *Set) CheckCredentials(ctx context.Context) error {
	addrs := s.Addrs()
	refusals := make([]error, len(addrs))
	var wg sync.WaitGroup // (at once: a shard that does not answer costs one timeout, not one each)
	for i := range addrs {
		wg.Go(func() {
			if err := s.Ping(ctx, i); Refused(err) {
				refusals[i] = err
			}
		})
	}
	wg.Wait()
	var errs *multierror.Error
	hint := "give each shard's user and password in its URL: redis://USER:PASSWORD@host:port/0"
	for i, err := range refusals {
		if err == nil {
			continue
		}
		errs = multierror.Append(errs, fmt.Errorf("shard %d (%s) refuses this coordinator: %w", i, addrs[i], err))
		if redis.HasErrorPrefix(err, "NOPERM") {
			hint = "the shard's user lacks rights the coordinator needs (deploy/redis.sh's coordinator user has them: scripts, streams, INFO)"
		}
	}
	if errs != nil {
		errs.ErrorFormat = oneLine
		return fmt.Errorf("%w; %s", errs, hint)
	}
	return nil
}

// oneLine formats errors as one line, joined by "; ".
func oneLine(errs []error) string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = strings.TrimRight(err.Error(), ".")
	}
	return strings.Join(out, "; ")
}
