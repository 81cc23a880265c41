// Package config is the coordinator's configuration: every SHARDSTOCK_*
// setting with its flag, its built-in default and its check (settings.go),
// read into a Config that "shardstock serve" wires the server from, and the
// knobs only tests turn. Each default is written once, here or where the
// setting is read (docs/OPERATIONS.md's table is tested against it).
package config

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
)

// Config is the server's configuration: the SHARDSTOCK_* variables of
// settings.go, each mirrored by a flag (a flag wins over its variable), and
// the knobs only tests turn.
type Config struct {
	HTTPAddr   string
	Shards     []string
	AdminToken string
	UserAuth   string
	HMACSecret []byte // hmac mode: the token key
	PaySecret  []byte // the payment callback signature key; empty: unsigned
	// PayPrevious is the payment secret being rotated out (accepted too).
	PayPrevious []byte
	// QueueSecret signs the waiting rooms' places; nil: the database's.
	QueueSecret []byte
	// DBCAs verify a MySQL server reached with ?tls=true
	// (SHARDSTOCK_DB_CA_FILE); nil: the system's roots.
	DBCAs *x509.CertPool
	// RedisCAs verify rediss:// shards (SHARDSTOCK_REDIS_CA_FILE); nil: the
	// system's roots.
	RedisCAs *x509.CertPool
	// TrustedProxies are the peers whose X-User-ID and X-Forwarded-For are
	// believed; nil: the setting's default (defaultTrustedProxies,
	// loopback); empty: none.
	TrustedProxies []netip.Prefix
	Dev            bool
	ShardTimeout   time.Duration
	LogFormat      string
	LogLevel       slog.Level
	MQ             string // "streams" or rocketmq://host:port
	// MQCredentials sign the requests to the RocketMQ broker (its ACL):
	// from SHARDSTOCK_MQ's user info or SHARDSTOCK_MQ_CREDENTIALS (or
	// --mq-credentials-file); zero: unsigned.
	MQCredentials messaging.Credentials
	DB            string // sqlite:PATH or mysql://...
	PayTimeout    time.Duration
	FailFastAge   time.Duration
	OrderRate     float64
	ClaimIdle     time.Duration
	// ArchiveAfter: products are archived this long after their window
	// ended, once their orders are final; 0: never automatically.
	ArchiveAfter time.Duration
	SpoolDir     string // "": no spool
	SpoolEntries int
	SpoolBytes   int64
	Limits       flashsale.Limits
	Coalesce     bool
	BatchGap     time.Duration
	Start        shard.Start
	// MaxInFlight bounds the purchases at the shards at once (admission
	// control); zero: the handler's default.
	MaxInFlight int
	// PagesDir, if set, receives the product pages (Pages.Publish).
	PagesDir string
	// GeneratedToken is true when Dev made up AdminToken.
	GeneratedToken bool
	// Test holds what no variable sets; zero outside tests.
	Test TestKnobs

	// mqCredentialsVar is SHARDSTOCK_MQ_CREDENTIALS as given, until
	// validate checks it against SHARDSTOCK_MQ and moves it into
	// MQCredentials: a Config parseConfig returns never holds it.
	mqCredentialsVar string
}

// TestKnobs are what tests turn and no SHARDSTOCK_* variable sets; each
// zero value is the production behaviour.
type TestKnobs struct {
	// Clock is the coordinator's wall clock (tests skew it); nil: time.Now.
	Clock func() time.Time
	// OrderClock is the order service's clock (tests move it); nil: time.Now.
	OrderClock func() time.Time
	// EmptyTTL is how long a shard found sold out is skipped; zero:
	// shard.Config's default.
	EmptyTTL time.Duration
	// HeaderTimeout bounds reading a request's headers (slow clients);
	// zero: 5s.
	HeaderTimeout time.Duration
	// ArchiveEvery is how often the automatic archive looks; zero: 1m.
	ArchiveEvery time.Duration
	// TransferStep, if set, is called after each step of a stock
	// transfer (recorded, out, marked, in); an error stops the transfer
	// there, as a crash of the coordinator would (the model test).
	TransferStep func(step string) error
	// BeforeIngest, if set, is called before each batch of reservations
	// read from the queue is written as orders: a test holds it to stall
	// the order writer (a slow database) with the batch in hand.
	BeforeIngest func(ctx context.Context)
	// Dial, if set, opens the connections to the shards, and Listen the
	// HTTP listener (an in-memory network: the model test's fast mode runs
	// in a testing/synctest bubble, where no socket may be used).
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	Listen func(addr string) (net.Listener, error)
}

// configError names the setting at fault; it is printed as one line.
type configError struct{ name, problem string }

func (e *configError) Error() string { return e.name + ": " + e.problem }

// Parse reads settings from args (flags) over getenv, validates them
// and fills defaults. Its error names the bad setting. The flags' defaults
// are the built-in ones, so --help never shows what the environment holds.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (*Config, error) {
	flags, files := defineFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &configError{"arguments", fmt.Sprintf("unexpected %q", fs.Args())}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := refuseMQFlagCredentials(fs, given); err != nil {
		return nil, err
	}
	vals, err := settingValues(flags, files, given, getenv)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	for i, s := range settings {
		if err := s.parse(c, vals[i]); err != nil {
			return nil, &configError{s.name, err.Error()}
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// defineFlags defines each setting's flag on fs (--FLAG-file for a secret,
// and beside the flag for a value that may carry passwords) and returns
// their values, by index in settings: the flag's, and the file flag's.
func defineFlags(fs *flag.FlagSet) (flags, files []*string) {
	flags, files = make([]*string, len(settings)), make([]*string, len(settings))
	for i, s := range settings {
		if s.secret || s.file {
			short := strings.ToLower(strings.TrimPrefix(s.name, "SHARDSTOCK_"))
			files[i] = fs.String(s.flag+"-file", "", fmt.Sprintf("file holding %s (or set %s)", short, s.name))
		}
		if !s.secret {
			flags[i] = fs.String(s.flag, s.def, fmt.Sprintf("%s [%s]", s.help, s.name))
		}
	}
	return flags, files
}

// refuseMQFlagCredentials refuses a --mq with user info: ps shows flags.
func refuseMQFlagCredentials(fs *flag.FlagSet, given map[string]bool) error {
	if !given["mq"] {
		return nil
	}
	if u, err := url.Parse(fs.Lookup("mq").Value.String()); err == nil && u.User != nil {
		return &configError{"SHARDSTOCK_MQ", "--mq carries credentials, which ps shows to every local user: put them in the environment (SHARDSTOCK_MQ or SHARDSTOCK_MQ_CREDENTIALS) or in --mq-credentials-file"}
	}
	return nil
}

// settingValues reads every setting's value, trimmed, by index in
// settings: its --FLAG-file if given, else the flag if given, else the
// variable if not empty, else the built-in default. Its error names the
// secret whose file could not be read.
func settingValues(flags, files []*string, given map[string]bool, getenv func(string) string) ([]string, error) {
	vals := make([]string, len(settings))
	for i, s := range settings {
		v := getenv(s.name)
		switch {
		case files[i] != nil && given[s.flag+"-file"]:
			b, err := os.ReadFile(*files[i])
			if err != nil {
				return nil, &configError{s.name, fmt.Sprintf("--%s-file: %v", s.flag, err)}
			}
			v = strings.TrimRight(string(b), "\r\n")
		case !s.secret && given[s.flag]:
			v = *flags[i]
		case v == "":
			v = s.def
		}
		vals[i] = strings.TrimSpace(v)
	}
	return vals, nil
}

// PrintUsage is serve --help: the flags with their built-in defaults,
// then the settings read from the environment only.
func PrintUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "Usage: shardstock serve [flags]\n\nRuns the server until SIGINT or SIGTERM, then drains in-flight requests.\n"+
		"Each setting is a flag or the SHARDSTOCK_* variable in brackets; a flag wins.\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, "\nSecrets, from the environment or a --*-file flag above (never a flag of their own: ps shows flags):\n")
	for _, s := range settings {
		if s.secret {
			fmt.Fprintf(w, "  %s\n    \t%s\n", s.name, s.help)
		}
	}
	fmt.Fprint(w, "\nThe HTTP contract: api/openapi.yaml (served at /openapi.yaml); the README explains the rest.\n")
}

// validate applies the rules that join settings, once each was parsed on
// its own, and fills the admin token Dev may make up. Its error names the
// setting at fault.
func (c *Config) validate() error {
	rules := []func() error{c.checkAdminToken, c.checkHMACSecret, c.checkPaySecret, c.resolveMQCredentials, c.checkDBCAs}
	for _, rule := range rules {
		if err := rule(); err != nil {
			return err
		}
	}
	return nil
}

// checkAdminToken requires a token of 16+ characters unless Dev, which
// accepts a short one and makes one up when there is none.
func (c *Config) checkAdminToken() error {
	switch {
	case c.AdminToken == "" && !c.Dev:
		return &configError{"SHARDSTOCK_ADMIN_TOKEN", "required (or set SHARDSTOCK_DEV=1 for a generated one)"}
	case c.AdminToken == "":
		b := make([]byte, 16)
		rand.Read(b)
		c.AdminToken, c.GeneratedToken = hex.EncodeToString(b), true
	case len(c.AdminToken) < 16 && !c.Dev:
		return &configError{"SHARDSTOCK_ADMIN_TOKEN", "too short: use at least 16 characters"}
	}
	return nil
}

// checkHMACSecret requires a 32+ byte token key in hmac mode; in header
// mode, where nothing uses it, the key is dropped.
func (c *Config) checkHMACSecret() error {
	switch {
	case c.UserAuth != "hmac":
		c.HMACSecret = nil
	case len(c.HMACSecret) < flashsale.MinSecretLen:
		return &configError{"SHARDSTOCK_HMAC_SECRET", "hmac mode needs a secret of at least 32 bytes"}
	}
	return nil
}

// checkPaySecret requires the payment secret unless Dev: unsigned payment
// results would let any buyer pay their own order.
func (c *Config) checkPaySecret() error {
	if c.PaySecret == nil && !c.Dev {
		return &configError{"SHARDSTOCK_PAYMENT_SECRET", "required, so payment results are signed (32+ bytes); SHARDSTOCK_DEV=1 waives it for a local try"}
	}
	if c.PayPrevious != nil && c.PaySecret == nil {
		return &configError{"SHARDSTOCK_PAYMENT_SECRET_PREVIOUS", "set without SHARDSTOCK_PAYMENT_SECRET: it is the secret being rotated out, accepted beside the current one"}
	}
	return nil
}

// resolveMQCredentials takes the broker's credentials from
// SHARDSTOCK_MQ_CREDENTIALS when SHARDSTOCK_MQ is a rocketmq:// URL without
// user info. No error repeats a secret.
func (c *Config) resolveMQCredentials() error {
	raw := c.mqCredentialsVar
	switch {
	case raw == "":
		return nil
	case c.MQ == "streams":
		return &configError{"SHARDSTOCK_MQ_CREDENTIALS", "is set but SHARDSTOCK_MQ is streams: credentials are for a rocketmq:// broker"}
	case !c.MQCredentials.IsZero():
		return &configError{"SHARDSTOCK_MQ_CREDENTIALS", "is set and SHARDSTOCK_MQ carries credentials too: set them in one place"}
	}
	creds, err := messaging.ParseCredentials(raw)
	if err != nil {
		return &configError{"SHARDSTOCK_MQ_CREDENTIALS", err.Error()}
	}
	c.MQCredentials, c.mqCredentialsVar = creds, ""
	return nil
}

// checkDBCAs refuses a database CA file with a DSN that does not use TLS
// (the CA would be silently ignored: plaintext to the database).
func (c *Config) checkDBCAs() error {
	if c.DBCAs != nil && !dsnUsesTLS(c.DB) {
		return &configError{"SHARDSTOCK_DB_CA_FILE", "is set but SHARDSTOCK_DB does not use TLS: add ?tls=true to the mysql:// DSN, or unset the CA file"}
	}
	return nil
}

// dsnUsesTLS reports whether a mysql:// DSN asks for TLS (a tls parameter
// other than false; "skip-verify" and "preferred" also take the CA file).
func dsnUsesTLS(dsn string) bool {
	if !strings.HasPrefix(dsn, "mysql://") {
		return false
	}
	_, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return false
	}
	v, err := url.ParseQuery(query)
	if err != nil {
		return false
	}
	t := strings.ToLower(v.Get("tls"))
	return t != "" && t != "false"
}

// StrayVariables are the variables of environ ("NAME=value") that look
// like a setting serve reads and are not one: a misspelling or a wrong
// case, which would otherwise leave the setting at its default without a
// word. Each comes with the setting it is nearest to. Other SHARDSTOCK_*
// variables (the deploy scripts', the tests') are far from every setting
// and are left alone.
func StrayVariables(environ []string) (stray, nearest []string) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(name)
		rest, ok := strings.CutPrefix(up, "SHARDSTOCK_")
		if !ok || isSetting(name) {
			continue
		}
		best, bestD := "", len(up)
		for _, s := range settings {
			if d := editDistance(up, s.name); d < bestD {
				best, bestD = s.name, d
			}
		}
		if bestD <= min(2, len(rest)/4) {
			stray, nearest = append(stray, name), append(nearest, best)
		}
	}
	return stray, nearest
}

func isSetting(name string) bool {
	for _, s := range settings {
		if s.name == name {
			return true
		}
	}
	return false
}

// editDistance is the Levenshtein distance of a and b (ASCII names).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
