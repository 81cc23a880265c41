package main

import (
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
	"strconv"
	"strings"
	"time"

	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
)

// Config is the server's configuration: SHARDSTOCK_* variables, each
// mirrored by a flag (a flag wins over its variable).
type Config struct {
	HTTPAddr   string
	Shards     []string
	AdminToken string
	UserAuth   string
	HMACSecret []byte // hmac mode: the token key
	PaySecret  []byte // the payment callback signature key; empty: unsigned
	// DBCAs verify a MySQL server reached with ?tls=true
	// (SHARDSTOCK_DB_CA_FILE); nil: the system's roots.
	DBCAs *x509.CertPool
	// RedisCAs verify rediss:// shards (SHARDSTOCK_REDIS_CA_FILE); nil: the
	// system's roots.
	RedisCAs *x509.CertPool
	// TrustedProxies are the peers whose X-User-ID and X-Forwarded-For are
	// believed; nil: none. NewMain's callers in tests leave it nil, which
	// Main reads as loopback.
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
	// ArchiveEvery is how often the automatic archive looks (tests); zero: 1m.
	ArchiveEvery time.Duration
	SpoolDir     string // "" or "off": no spool
	SpoolEntries int
	SpoolBytes   int64
	Limits       flashsale.Limits
	Coalesce     bool
	BatchGap     time.Duration
	Start        shard.Start
	// GeneratedToken is true when Dev made up AdminToken.
	GeneratedToken bool
	// MaxInFlight bounds the purchases at the shards at once (admission
	// control); zero: the handler's default.
	MaxInFlight int
	// PagesDir, if set, receives the product pages (Pages.Publish).
	PagesDir string
	// Clock is the coordinator's wall clock (tests skew it); nil: time.Now.
	Clock func() time.Time
	// OrderClock is the order service's clock (tests move it); nil: time.Now.
	OrderClock func() time.Time
	// EmptyTTL is how long a shard found sold out is skipped (tests);
	// zero: shard.Config's default.
	EmptyTTL time.Duration
	// HeaderTimeout bounds reading a request's headers (slow clients);
	// zero: 5s.
	HeaderTimeout time.Duration
}

// configError names the setting at fault; it is printed as one line.
type configError struct{ name, problem string }

func (e *configError) Error() string { return e.name + ": " + e.problem }

// variable describes one setting for --help and for parsing. A secret has
// no flag (a flag's value shows in ps to every local user): it is read from
// the environment only, and never printed.
type variable struct {
	name, flag, def, help string
	secret                bool
}

var variables = []variable{
	{"SHARDSTOCK_HTTP_ADDR", "http-addr", "127.0.0.1:8080", "listen address", false},
	{"SHARDSTOCK_SHARDS", "shards", "", "comma-separated Redis master URLs, order = shard index (required)", false},
	{"SHARDSTOCK_ADMIN_TOKEN", "admin-token", "", "bearer token for /admin/* (required unless SHARDSTOCK_DEV=1)", true},
	{"SHARDSTOCK_USER_AUTH", "user-auth", "header", "buyer identity: header (trust X-User-ID; only behind an authenticating gateway) or hmac (HS256 tokens)", false},
	{"SHARDSTOCK_HMAC_SECRET", "hmac-secret", "", "key of the buyers' tokens in hmac mode (32+ bytes)", true},
	{"SHARDSTOCK_PAYMENT_SECRET", "payment-secret", "", "key of the payment results' signature (callback X-Signature, message signature; 32+ bytes); required unless SHARDSTOCK_DEV=1", true},
	{"SHARDSTOCK_DEV", "dev", "", "1: for a local try: allow a missing admin token (make one up and print it) and unsigned payment results", false},
	{"SHARDSTOCK_TRUSTED_PROXIES", "trusted-proxies", "127.0.0.0/8,::1/128", "peers (CIDRs, comma-separated, or none) whose X-User-ID (header mode) and X-Forwarded-For are believed: your authenticating gateway", false},
	{"SHARDSTOCK_REDIS_CA_FILE", "redis-ca-file", "", "PEM file of the CA that signs the rediss:// shards' certificates (default: the system's roots)", false},
	{"SHARDSTOCK_SHARD_TIMEOUT", "shard-timeout", "250ms", "deadline of one call on one shard", false},
	{"SHARDSTOCK_COALESCE", "coalesce", "on", "on: concurrent script calls to one shard share one pipeline round trip; off: one round trip each", false},
	{"SHARDSTOCK_BATCH_GAP", "batch-gap", "3ms", "under load, a shard's purchase round trips leave at most one per gap, each carrying every purchase that came meanwhile (fewer script executions and fsyncs); 0: each as soon as the previous is answered", false},
	{"SHARDSTOCK_START", "start", "home", "first shard a purchase reserves on: home (the buyer's home shard, hashed from the user id, which also keeps the buyer's per-user limit: one script execution per purchase) or random (the claim at home, then a random shard: two)", false},
	{"SHARDSTOCK_MQ", "mq", "streams", "message transport: streams (Redis Streams on the shards) or rocketmq://HOST:9876[?broker=HOST:10911] (the broker's ACL credentials as ACCESSKEY:SECRETKEY@ only from the environment, or see SHARDSTOCK_MQ_CREDENTIALS)", false},
	{"SHARDSTOCK_MQ_CREDENTIALS", "mq-credentials", "", "the RocketMQ broker's ACL user, ACCESSKEY:SECRETKEY (deploy/rocketmq.sh credentials coordinator prints them, and keeps them in a file for --mq-credentials-file)", true},
	{"SHARDSTOCK_DB", "db", "sqlite:./data/orders.db", "order database: sqlite:PATH or mysql://user:pass@tcp(host:port)/db", false},
	{"SHARDSTOCK_DB_CA_FILE", "db-ca-file", "", "PEM file of the CA that signs the MySQL/MariaDB server's certificate, for a DSN with ?tls=true (default: the system's roots)", false},
	{"SHARDSTOCK_PAY_TIMEOUT", "pay-timeout", "15m", "unpaid orders are cancelled after this", false},
	{"SHARDSTOCK_FAIL_FAST_AGE", "fail-fast-age", "30m", "a reservation older than this when consumed becomes a failed order and is released", false},
	{"SHARDSTOCK_ORDER_RATE", "order-rate", "10000", "order creations per second for all coordinators together (a token bucket on the shards; a guard for the database; make bench measures what the pipeline can do)", false},
	{"SHARDSTOCK_CLAIM_IDLE", "claim-idle", "30s", "outbox entries another coordinator left unprocessed this long are taken over", false},
	{"SHARDSTOCK_ARCHIVE_AFTER", "archive-after", "24h", "a product is archived (its shard keys deleted, its totals kept in SQL) this long after its window ended, once its orders are final; off: only by the archive call", false},
	{"SHARDSTOCK_RATE_LIMITS", "rate-limits", flashsale.DefaultLimits, "buyer-side limits per second: global=N,product=N|auto,user=N,ip=N (0: none), or off", false},
	{"SHARDSTOCK_MAX_INFLIGHT", "max-inflight", "1024", "purchases at the shards at once in this process; past it a purchase waits up to 50ms, then gets 503 with Retry-After before it touches Redis (admission control)", false},
	{"SHARDSTOCK_SPOOL_DIR", "spool-dir", "./data/spool", "directory of the disk spool for purchases no shard can take; off disables it (503 instead)", false},
	{"SHARDSTOCK_SPOOL_MAX_ENTRIES", "spool-max-entries", "100000", "most purchases waiting in the spool; beyond it, 503", false},
	{"SHARDSTOCK_SPOOL_MAX_BYTES", "spool-max-bytes", "67108864", "largest spool file in bytes; beyond it, 503", false},
	{"SHARDSTOCK_PAGES_DIR", "pages-dir", "", "publish each product's sale page to this directory for an edge to serve as files (deploy/nginx.sh --pages DIR); empty: pages only from the coordinator", false},
	{"SHARDSTOCK_LOG_FORMAT", "log-format", "text", "log format: text or json", false},
	{"SHARDSTOCK_LOG_LEVEL", "log-level", "info", "log level: debug, info, warn or error", false},
}

// notYet are contract variables of features this version does not have;
// setting one is reported at start rather than silently ignored.
var notYet = []string{}

// parseConfig reads settings from args (flags) over getenv, validates them
// and fills defaults. Its error names the bad setting. The flags' defaults
// are the built-in ones, so --help never shows what the environment holds.
func parseConfig(fs *flag.FlagSet, args []string, getenv func(string) string) (*Config, error) {
	flags := make(map[string]*string, len(variables))
	files := map[string]*string{}
	for _, v := range variables {
		if v.secret {
			files[v.name] = fs.String(v.flag+"-file", "", fmt.Sprintf("file holding %s (or set %s)", strings.ToLower(strings.TrimPrefix(v.name, "SHARDSTOCK_")), v.name))
			continue
		}
		flags[v.name] = fs.String(v.flag, v.def, fmt.Sprintf("%s [%s]", v.help, v.name))
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &configError{"arguments", fmt.Sprintf("unexpected %q", fs.Args())}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["mq"] {
		if u, err := url.Parse(*flags["SHARDSTOCK_MQ"]); err == nil && u.User != nil {
			return nil, &configError{"SHARDSTOCK_MQ", "--mq carries credentials, which ps shows to every local user: put them in the environment (SHARDSTOCK_MQ or SHARDSTOCK_MQ_CREDENTIALS) or in --mq-credentials-file"}
		}
	}
	vals := make(map[string]string, len(variables))
	for _, v := range variables {
		switch e := getenv(v.name); {
		case v.secret && set[v.flag+"-file"]:
			b, err := os.ReadFile(*files[v.name])
			if err != nil {
				return nil, &configError{v.name, fmt.Sprintf("--%s-file: %v", v.flag, err)}
			}
			vals[v.name] = strings.TrimRight(string(b), "\r\n")
		case set[v.flag]:
			vals[v.name] = *flags[v.name]
		case e != "":
			vals[v.name] = e
		default:
			vals[v.name] = v.def
		}
	}
	return buildConfig(func(name string) string { return strings.TrimSpace(vals[name]) })
}

// printServeUsage is serve --help: the flags with their built-in defaults,
// then the settings read from the environment only.
func printServeUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "Usage: shardstock serve [flags]\n\nRuns the server until SIGINT or SIGTERM, then drains in-flight requests.\n"+
		"Each setting is a flag or the SHARDSTOCK_* variable in brackets; a flag wins.\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, "\nSecrets, from the environment or a --*-file flag above (never a flag of their own: ps shows flags):\n")
	for _, v := range variables {
		if v.secret {
			fmt.Fprintf(w, "  %s\n    \t%s\n", v.name, v.help)
		}
	}
	fmt.Fprint(w, "\nThe HTTP contract: api/openapi.yaml (served at /openapi.yaml); the README explains the rest.\n")
}

func buildConfig(get func(string) string) (*Config, error) {
	c := &Config{HTTPAddr: get("SHARDSTOCK_HTTP_ADDR"), AdminToken: get("SHARDSTOCK_ADMIN_TOKEN"),
		UserAuth: get("SHARDSTOCK_USER_AUTH"), LogFormat: get("SHARDSTOCK_LOG_FORMAT"),
		MQ: get("SHARDSTOCK_MQ"), DB: get("SHARDSTOCK_DB")}
	steps := []func(get func(string) string) error{c.parseAddr, c.parseShards, c.parseDev,
		c.parseAuth, c.parseTimeout, c.parseLog, c.parseOrders}
	for _, step := range steps {
		if err := step(get); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Config) parseAddr(func(string) string) error {
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return &configError{"SHARDSTOCK_HTTP_ADDR", fmt.Sprintf("%q is not host:port", c.HTTPAddr)}
	}
	return nil
}

func (c *Config) parseShards(get func(string) string) error {
	if f := get("SHARDSTOCK_REDIS_CA_FILE"); f != "" {
		pool, err := readCAs(f)
		if err != nil {
			return &configError{"SHARDSTOCK_REDIS_CA_FILE", err.Error()}
		}
		c.RedisCAs = pool
	}
	raw := get("SHARDSTOCK_SHARDS")
	if raw == "" {
		return &configError{"SHARDSTOCK_SHARDS", "required: comma-separated Redis URLs, e.g. redis://127.0.0.1:6479/0,redis://127.0.0.1:6579/0"}
	}
	seen := map[string]int{}
	for i, u := range strings.Split(raw, ",") {
		u = strings.TrimSpace(u)
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss") || pu.Host == "" {
			return &configError{"SHARDSTOCK_SHARDS", fmt.Sprintf("shard %d: %q is not a redis:// or rediss:// URL", i, redactURL(u))}
		}
		key := pu.Host + pu.Path
		if j, dup := seen[key]; dup {
			return &configError{"SHARDSTOCK_SHARDS", fmt.Sprintf("shards %d and %d are the same master %s", j, i, key)}
		}
		seen[key] = i
		c.Shards = append(c.Shards, u)
	}
	if len(c.Shards) > shard.MaxShards {
		return &configError{"SHARDSTOCK_SHARDS", fmt.Sprintf("at most %d shards", shard.MaxShards)}
	}
	return nil
}

// readCAs reads a PEM file of CA certificates.
func readCAs(f string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", f)
	}
	return pool, nil
}

// redactURL hides a password in a URL shown in an error.
func redactURL(u string) string {
	if pu, err := url.Parse(u); err == nil {
		return pu.Redacted()
	}
	return "(unparseable URL)"
}

func (c *Config) parseDev(get func(string) string) error {
	switch get("SHARDSTOCK_DEV") {
	case "", "0":
	case "1":
		c.Dev = true
	default:
		return &configError{"SHARDSTOCK_DEV", "must be 1 or unset"}
	}
	if c.AdminToken == "" && !c.Dev {
		return &configError{"SHARDSTOCK_ADMIN_TOKEN", "required (or set SHARDSTOCK_DEV=1 for a generated one)"}
	}
	if c.AdminToken == "" {
		b := make([]byte, 16)
		rand.Read(b)
		c.AdminToken, c.GeneratedToken = hex.EncodeToString(b), true
	}
	if len(c.AdminToken) < 16 && !c.Dev {
		return &configError{"SHARDSTOCK_ADMIN_TOKEN", "too short: use at least 16 characters"}
	}
	return nil
}

func (c *Config) parseAuth(get func(string) string) error {
	if pay := get("SHARDSTOCK_PAYMENT_SECRET"); pay != "" {
		if len(pay) < 32 {
			return &configError{"SHARDSTOCK_PAYMENT_SECRET", "too short: use at least 32 bytes"}
		}
		c.PaySecret = []byte(pay)
	}
	if err := c.parseTrustedProxies(get("SHARDSTOCK_TRUSTED_PROXIES")); err != nil {
		return err
	}
	switch c.UserAuth {
	case "header":
	case "hmac":
		secret := get("SHARDSTOCK_HMAC_SECRET")
		if len(secret) < 32 {
			return &configError{"SHARDSTOCK_HMAC_SECRET", "hmac mode needs a secret of at least 32 bytes"}
		}
		c.HMACSecret = []byte(secret)
	default:
		return &configError{"SHARDSTOCK_USER_AUTH", fmt.Sprintf("%q: must be header or hmac", c.UserAuth)}
	}
	// Unsigned payment results would let any buyer pay their own order:
	// refused in every mode but the developer's.
	if c.PaySecret == nil && !c.Dev {
		return &configError{"SHARDSTOCK_PAYMENT_SECRET", "required, so payment results are signed (32+ bytes); SHARDSTOCK_DEV=1 waives it for a local try"}
	}
	return nil
}

// parseTrustedProxies reads the peers whose X-User-ID (header mode) and
// X-Forwarded-For are believed: CIDRs or addresses, comma-separated, or
// none.
func (c *Config) parseTrustedProxies(raw string) error {
	c.TrustedProxies = []netip.Prefix{}
	if raw == "none" {
		return nil
	}
	for _, f := range strings.Split(raw, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return &configError{"SHARDSTOCK_TRUSTED_PROXIES", fmt.Sprintf("%q is not a CIDR or an address", f)}
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.TrustedProxies = append(c.TrustedProxies, p.Masked())
	}
	return nil
}

func (c *Config) parseTimeout(get func(string) string) error {
	d, err := time.ParseDuration(get("SHARDSTOCK_SHARD_TIMEOUT"))
	if err != nil || d < time.Millisecond || d > time.Minute {
		return &configError{"SHARDSTOCK_SHARD_TIMEOUT", "must be a Go duration between 1ms and 1m, like 250ms"}
	}
	c.ShardTimeout = d
	return nil
}

func (c *Config) parseLog(get func(string) string) error {
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return &configError{"SHARDSTOCK_LOG_FORMAT", "must be text or json"}
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("SHARDSTOCK_LOG_LEVEL"))); err != nil {
		return &configError{"SHARDSTOCK_LOG_LEVEL", "must be debug, info, warn or error"}
	}
	return nil
}

func (c *Config) parseOrders(get func(string) string) error {
	if err := c.parseMQ(get); err != nil {
		return err
	}
	if f := get("SHARDSTOCK_DB_CA_FILE"); f != "" {
		pool, err := readCAs(f)
		if err != nil {
			return &configError{"SHARDSTOCK_DB_CA_FILE", err.Error()}
		}
		c.DBCAs = pool
	}
	if !strings.HasPrefix(c.DB, "sqlite:") && !strings.HasPrefix(c.DB, "mysql://") {
		return &configError{"SHARDSTOCK_DB", "must be sqlite:PATH or mysql://user:pass@tcp(host:port)/db"}
	}
	if c.DBCAs != nil && !dsnUsesTLS(c.DB) { // (it was silently ignored: plaintext to the database)
		return &configError{"SHARDSTOCK_DB_CA_FILE", "is set but SHARDSTOCK_DB does not use TLS: add ?tls=true to the mysql:// DSN, or unset the CA file"}
	}
	durations := []struct {
		name string
		dst  *time.Duration
	}{{"SHARDSTOCK_PAY_TIMEOUT", &c.PayTimeout}, {"SHARDSTOCK_FAIL_FAST_AGE", &c.FailFastAge}, {"SHARDSTOCK_CLAIM_IDLE", &c.ClaimIdle}}
	for _, d := range durations {
		v, err := time.ParseDuration(get(d.name))
		if err != nil || v <= 0 {
			return &configError{d.name, "must be a positive Go duration, like 15m"}
		}
		*d.dst = v
	}
	if a := get("SHARDSTOCK_ARCHIVE_AFTER"); a != "off" {
		v, err := time.ParseDuration(a)
		if err != nil || v <= 0 {
			return &configError{"SHARDSTOCK_ARCHIVE_AFTER", "must be a positive Go duration, like 24h, or off"}
		}
		c.ArchiveAfter = v
	}
	r, err := strconv.ParseFloat(get("SHARDSTOCK_ORDER_RATE"), 64)
	if err != nil || r <= 0 {
		return &configError{"SHARDSTOCK_ORDER_RATE", "must be a positive number of orders per second"}
	}
	c.OrderRate = r
	return c.parseSpool(get)
}

// parseMQ checks the transport and where its credentials come from: the
// URL's user info or SHARDSTOCK_MQ_CREDENTIALS, not both. No error repeats
// a secret.
func (c *Config) parseMQ(get func(string) string) error {
	creds := get("SHARDSTOCK_MQ_CREDENTIALS")
	if c.MQ == "streams" {
		if creds != "" {
			return &configError{"SHARDSTOCK_MQ_CREDENTIALS", "is set but SHARDSTOCK_MQ is streams: credentials are for a rocketmq:// broker"}
		}
		return nil
	}
	rc, err := messaging.ParseRocketMQ(c.MQ)
	if err != nil {
		if strings.Contains(err.Error(), "credentials") {
			return &configError{"SHARDSTOCK_MQ", err.Error()}
		}
		return &configError{"SHARDSTOCK_MQ", "must be streams or rocketmq://[ACCESSKEY:SECRETKEY@]HOST:PORT"}
	}
	c.MQCredentials = rc.Credentials
	if creds != "" {
		if !rc.Credentials.IsZero() {
			return &configError{"SHARDSTOCK_MQ_CREDENTIALS", "is set and SHARDSTOCK_MQ carries credentials too: set them in one place"}
		}
		if c.MQCredentials, err = messaging.ParseCredentials(creds); err != nil {
			return &configError{"SHARDSTOCK_MQ_CREDENTIALS", err.Error()}
		}
	}
	return nil
}

func (c *Config) parseSpool(get func(string) string) error {
	c.PagesDir = get("SHARDSTOCK_PAGES_DIR")
	inflight, err := strconv.Atoi(get("SHARDSTOCK_MAX_INFLIGHT"))
	if err != nil || inflight <= 0 {
		return &configError{"SHARDSTOCK_MAX_INFLIGHT", "must be a positive number of purchases"}
	}
	c.MaxInFlight = inflight
	if c.SpoolDir = get("SHARDSTOCK_SPOOL_DIR"); c.SpoolDir == "off" {
		c.SpoolDir = ""
	}
	n, err := strconv.Atoi(get("SHARDSTOCK_SPOOL_MAX_ENTRIES"))
	if err != nil || n <= 0 {
		return &configError{"SHARDSTOCK_SPOOL_MAX_ENTRIES", "must be a positive number"}
	}
	b, err := strconv.ParseInt(get("SHARDSTOCK_SPOOL_MAX_BYTES"), 10, 64)
	if err != nil || b < 4096 {
		return &configError{"SHARDSTOCK_SPOOL_MAX_BYTES", "must be a number of bytes, at least 4096"}
	}
	c.SpoolEntries, c.SpoolBytes = n, b
	l, err := flashsale.ParseLimits(get("SHARDSTOCK_RATE_LIMITS"))
	if err != nil {
		return &configError{"SHARDSTOCK_RATE_LIMITS", err.Error()}
	}
	c.Limits = l
	switch get("SHARDSTOCK_COALESCE") {
	case "on":
		c.Coalesce = true
	case "off":
	default:
		return &configError{"SHARDSTOCK_COALESCE", "must be on or off"}
	}
	if c.BatchGap, err = time.ParseDuration(get("SHARDSTOCK_BATCH_GAP")); err != nil || c.BatchGap < 0 || c.BatchGap > 100*time.Millisecond {
		return &configError{"SHARDSTOCK_BATCH_GAP", "must be a Go duration from 0 to 100ms, like 3ms"}
	}
	if c.Start, err = shard.ParseStart(get("SHARDSTOCK_START")); err != nil {
		return &configError{"SHARDSTOCK_START", "must be home or random"}
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
