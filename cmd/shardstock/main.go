// Command shardstock is the sharded-inventory flash-sale coordinator.
//
//	shardstock serve     run the server (buyer API, admin API, metrics)
//	shardstock admin     an operator's client for the admin API (package admincli)
//	shardstock loadgen   drive buyers at a server (package loadgen)
//	shardstock help      show this help
//
// Configuration is by SHARDSTOCK_* environment variables, each mirrored by a
// flag; run "shardstock serve --help" for the list.
//
// This package is the wiring (server.go's Main: open the adapters, hand
// each service its ports, start the loops, list the routes) and the
// command line; it may import every package, and none imports it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/admincli"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/loadgen"
)

const usage = `shardstock — a sharded-inventory flash-sale coordinator

Usage:
  shardstock serve [flags]   run the server (buyer API, admin API, /metrics)
  shardstock token --user ID [--ttl 1h]
                             print a buyer token for hmac mode, signed with SHARDSTOCK_HMAC_SECRET
  shardstock loadgen [flags] drive the buyer API (race, steady, flood, crowd) and report; see "shardstock loadgen --help"
  shardstock admin COMMAND   an operator's client: status, pause, resume, add, remove, end, archive,
                             shards, drain, rebalance, reconcile; see "shardstock admin --help"
  shardstock help            show this help

Each flag mirrors a SHARDSTOCK_* environment variable; see "shardstock serve --help".
The HTTP contract is api/openapi.yaml (served at /openapi.yaml); the README explains the rest.
`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], getenv, stdout, stderr)
	case "token":
		return token(args[1:], getenv, stdout, stderr)
	case "loadgen":
		return loadgen.Main(args[1:], getenv, stdout, stderr)
	case "admin":
		return admincli.Main(args[1:], getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "shardstock: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func serve(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet()
	cfg, err := config.Parse(fs, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		config.PrintUsage(stdout, fs)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: config: %v\n", err)
		return 2
	}
	m := NewMain(cfg, stdout)
	redis.SetLogger(redisLog{m.log})
	stray, nearest := config.StrayVariables(os.Environ())
	for i, name := range stray {
		m.log.Warn(name+" is not a setting serve reads (it is left out): did you mean "+nearest[i]+"?", "variable", name, "nearest", nearest[i])
	}
	if getenv("GOGC") == "" {
		// The server's live heap is small (tens of MiB) and every request
		// allocates: collecting at 4x the live heap instead of 2x halves
		// the collector's share of a purchase for a few MiB more. GOGC set
		// in the environment wins.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := m.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "shardstock: %v\n", err)
		m.Close()
		return 1
	}
	<-ctx.Done()
	m.log.Info("shutting down: draining in-flight requests")
	if err := m.Close(); err != nil {
		fmt.Fprintf(stderr, "shardstock: shutdown: %v\n", err)
		return 1
	}
	m.log.Info("stopped")
	return 0
}

// token prints a buyer token (for tests, load generation, or a gateway).
func token(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "the buyer's user id (1-64 characters of [A-Za-z0-9_-])")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid (at most 24h)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: shardstock token --user ID [--ttl 1h]\n\nPrints an HS256 token signed with SHARDSTOCK_HMAC_SECRET.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	secret := getenv("SHARDSTOCK_HMAC_SECRET")
	if len(secret) < flashsale.MinSecretLen {
		fmt.Fprintln(stderr, "shardstock: token: SHARDSTOCK_HMAC_SECRET must be set, at least 32 bytes")
		return 2
	}
	tok, err := flashsale.MintToken([]byte(secret), *user, *ttl, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "shardstock: token: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout, tok)
	return 0
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// redisLog sends go-redis's own log lines (dial failures while a shard is
// down, say) to the debug level: shard health reports them once, better.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
