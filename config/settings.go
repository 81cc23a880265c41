package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/spool"
)

// setting is one SHARDSTOCK_* variable: its flag, built-in default and
// --help text, and parse, which checks a value and writes it into a Config.
// parse is given the value trimmed (the default when the variable is unset
// or empty) and returns the problem, which parseConfig prefixes with the
// name; rules that join settings are Config.validate's. A secret has no flag
// (a flag's value shows in ps to every local user): it is read from the
// environment or a --FLAG-file only, and never printed.
type setting struct {
	name, flag, def, help string
	secret                bool
	// file: a value that may carry passwords (URLs), so it may also come
	// from a --FLAG-file (a container's secret), beside its flag.
	file  bool
	parse func(c *Config, v string) error
}

// settings are every SHARDSTOCK_* variable serve reads, parsed in this
// order; the configuration table of docs/OPERATIONS.md lists the same
// names (a test).
var settings = []setting{
	// Where it listens, and the shards.
	{name: "SHARDSTOCK_HTTP_ADDR", flag: "http-addr", def: "127.0.0.1:8080", help: "listen address",
		parse: parseHTTPAddr},
	{name: "SHARDSTOCK_REDIS_CA_FILE", flag: "redis-ca-file", help: "PEM file of the CA that signs the rediss:// shards' certificates (default: the system's roots)",
		parse: func(c *Config, v string) error { return readCAsInto(&c.RedisCAs, v) }},
	{name: "SHARDSTOCK_SHARDS", flag: "shards", file: true, help: "comma-separated Redis master URLs, order = shard index (required)",
		parse: parseShards},
	{name: "SHARDSTOCK_SHARD_TIMEOUT", flag: "shard-timeout", def: durationDef(shard.DefaultTimeout), help: "deadline of one call on one shard",
		parse: parseShardTimeout},
	{name: "SHARDSTOCK_COALESCE", flag: "coalesce", def: "on", help: "on: concurrent script calls to one shard share one pipeline round trip; off: one round trip each",
		parse: parseCoalesce},
	{name: "SHARDSTOCK_BATCH_GAP", flag: "batch-gap", def: "3ms", help: "under load, a shard's purchase round trips leave at most one per gap, each carrying every purchase that came meanwhile (fewer script executions and fsyncs); 0: each as soon as the previous is answered",
		parse: parseBatchGap},
	{name: "SHARDSTOCK_START", flag: "start", def: "home", help: "first shard a purchase reserves on: home (the buyer's home shard, hashed from the user id, which also keeps the buyer's per-user limit: one script execution per purchase) or random (the claim at home, then a random shard: two)",
		parse: parseStart},

	// Who is believed.
	{name: "SHARDSTOCK_DEV", flag: "dev", help: "1: for a local try: allow a missing admin token (make one up and print it) and unsigned payment results",
		parse: parseDev},
	{name: "SHARDSTOCK_ADMIN_TOKEN", flag: "admin-token", secret: true, help: "bearer token for /admin/* (required unless SHARDSTOCK_DEV=1)",
		parse: func(c *Config, v string) error { c.AdminToken = v; return nil }},
	{name: "SHARDSTOCK_USER_AUTH", flag: "user-auth", def: "header", help: "buyer identity: header (trust X-User-ID; only behind an authenticating gateway) or hmac (HS256 tokens)",
		parse: parseUserAuth},
	{name: "SHARDSTOCK_HMAC_SECRET", flag: "hmac-secret", secret: true, help: "key of the buyers' tokens in hmac mode (32+ bytes)",
		parse: parseHMACSecret},
	{name: "SHARDSTOCK_PAYMENT_SECRET", flag: "payment-secret", secret: true, help: "key of the payment results' signature (callback X-Signature, message signature; 32+ bytes); required unless SHARDSTOCK_DEV=1",
		parse: parsePaySecret},
	{name: "SHARDSTOCK_PAYMENT_SECRET_PREVIOUS", flag: "payment-secret-previous", secret: true, help: "while the payment secret is rotated, the one going out: results signed with it are accepted too (32+ bytes). Rotate in three steps: every coordinator gets the new secret with the old one here; then the payment centre signs with the new one; then this is removed",
		parse: func(c *Config, v string) error { return parseKey(&c.PayPrevious, v) }},
	{name: "SHARDSTOCK_QUEUE_SECRET", flag: "queue-secret", secret: true, help: "key of the waiting rooms' place tokens (32+ bytes); empty: one made up and kept in the database, shared by the coordinators of the catalog. Set it to check places at the edge too",
		parse: parseQueueSecret},
	{name: "SHARDSTOCK_TRUSTED_PROXIES", flag: "trusted-proxies", def: defaultTrustedProxies, help: "peers (CIDRs, comma-separated, or none) whose X-User-ID (header mode) and X-Forwarded-For are believed: your authenticating gateway",
		parse: parseTrustedProxies},

	// The message transport and the order database.
	{name: "SHARDSTOCK_MQ", flag: "mq", def: "streams", help: "message transport: streams (Redis Streams on the shards) or rocketmq://HOST:9876[?broker=HOST:10911] (the broker's ACL credentials as ACCESSKEY:SECRETKEY@ only from the environment, or see SHARDSTOCK_MQ_CREDENTIALS)",
		parse: parseMQ},
	{name: "SHARDSTOCK_MQ_CREDENTIALS", flag: "mq-credentials", secret: true, help: "the RocketMQ broker's ACL user, ACCESSKEY:SECRETKEY (deploy/rocketmq.sh credentials coordinator prints them, and keeps them in a file for --mq-credentials-file)",
		parse: func(c *Config, v string) error { c.mqCredentialsVar = v; return nil }},
	{name: "SHARDSTOCK_DB_CA_FILE", flag: "db-ca-file", help: "PEM file of the CA that signs the MySQL/MariaDB server's certificate, for a DSN with ?tls=true (default: the system's roots)",
		parse: func(c *Config, v string) error { return readCAsInto(&c.DBCAs, v) }},
	{name: "SHARDSTOCK_DB", flag: "db", file: true, def: "sqlite:./data/orders.db", help: "order database: sqlite:PATH or mysql://user:pass@tcp(host:port)/db",
		parse: parseDB},

	// Orders.
	{name: "SHARDSTOCK_PAY_TIMEOUT", flag: "pay-timeout", def: durationDef(order.DefaultPayTimeout), help: "unpaid orders are cancelled after this",
		parse: func(c *Config, v string) error { return positiveDuration(&c.PayTimeout, v) }},
	{name: "SHARDSTOCK_FAIL_FAST_AGE", flag: "fail-fast-age", def: durationDef(order.DefaultFailFastAge), help: "a reservation older than this when consumed becomes a failed order and is released",
		parse: func(c *Config, v string) error { return positiveDuration(&c.FailFastAge, v) }},
	{name: "SHARDSTOCK_CLAIM_IDLE", flag: "claim-idle", def: durationDef(messaging.DefaultClaimIdle), help: "outbox entries another coordinator left unprocessed this long are taken over",
		parse: func(c *Config, v string) error { return positiveDuration(&c.ClaimIdle, v) }},
	{name: "SHARDSTOCK_ARCHIVE_AFTER", flag: "archive-after", def: "24h", help: "a product is archived (its shard keys deleted, its totals kept in SQL) this long after its window ended, once its orders are final; off: only by the archive call",
		parse: parseArchiveAfter},
	{name: "SHARDSTOCK_ORDER_RATE", flag: "order-rate", def: fmt.Sprint(order.DefaultRate), help: "order creations per second for all coordinators together (a token bucket on the shards; a guard for the database; make bench measures what the pipeline can do)",
		parse: parseOrderRate},

	// The buyers' load: limits, admission, the spool.
	{name: "SHARDSTOCK_RATE_LIMITS", flag: "rate-limits", def: flashsale.DefaultLimits, help: "buyer-side limits per second: global=N,product=N|auto,user=N,ip=N (0: none), or off",
		parse: parseRateLimits},
	{name: "SHARDSTOCK_MAX_INFLIGHT", flag: "max-inflight", def: fmt.Sprint(flashsale.DefaultMaxInFlight), help: "purchases at the shards at once in this process; past it a purchase waits up to 50ms, then gets 503 with Retry-After before it touches Redis (admission control)",
		parse: func(c *Config, v string) error {
			return positiveInt(&c.MaxInFlight, v, "must be a positive number of purchases")
		}},
	{name: "SHARDSTOCK_SPOOL_DIR", flag: "spool-dir", def: "./data/spool", help: "directory of the disk spool for purchases no shard can take; off disables it (503 instead)",
		parse: parseSpoolDir},
	{name: "SHARDSTOCK_SPOOL_MAX_ENTRIES", flag: "spool-max-entries", def: fmt.Sprint(spool.DefaultMaxEntries), help: "most purchases waiting in the spool; beyond it, 503",
		parse: func(c *Config, v string) error { return positiveInt(&c.SpoolEntries, v, "must be a positive number") }},
	{name: "SHARDSTOCK_SPOOL_MAX_BYTES", flag: "spool-max-bytes", def: fmt.Sprint(spool.DefaultMaxBytes), help: "largest spool file in bytes; beyond it, 503",
		parse: parseSpoolBytes},

	// Pages and logs.
	{name: "SHARDSTOCK_PAGES_DIR", flag: "pages-dir", help: "publish each product's sale page to this directory for an edge to serve as files (deploy/nginx.sh --pages DIR); empty: pages only from the coordinator",
		parse: func(c *Config, v string) error { c.PagesDir = v; return nil }},
	{name: "SHARDSTOCK_LOG_FORMAT", flag: "log-format", def: "text", help: "log format: text or json",
		parse: parseLogFormat},
	{name: "SHARDSTOCK_LOG_LEVEL", flag: "log-level", def: "info", help: "log level: debug, info, warn or error",
		parse: parseLogLevel},
}

func parseHTTPAddr(c *Config, v string) error {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return fmt.Errorf("%q is not host:port", v)
	}
	c.HTTPAddr = v
	return nil
}

// readCAsInto reads a PEM file of CA certificates into dst; "" leaves dst
// nil (the system's roots).
func readCAsInto(dst **x509.CertPool, file string) error {
	if file == "" {
		return nil
	}
	pool, err := ReadCAs(file)
	if err != nil {
		return err
	}
	*dst = pool
	return nil
}

// ReadCAs reads a PEM file of CA certificates.
func ReadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// parseShards reads the masters' URLs, in shard order; no master twice.
func parseShards(c *Config, v string) error {
	if v == "" {
		return errors.New("required: comma-separated Redis URLs, e.g. redis://127.0.0.1:6479/0,redis://127.0.0.1:6579/0")
	}
	seen := map[string]int{} // host and path -> shard index
	for i, u := range strings.Split(v, ",") {
		u = strings.TrimSpace(u)
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss") || pu.Host == "" {
			return fmt.Errorf("shard %d: %q is not a redis:// or rediss:// URL", i, redactURL(u))
		}
		key := pu.Host + pu.Path
		if j, dup := seen[key]; dup {
			return fmt.Errorf("shards %d and %d are the same master %s", j, i, key)
		}
		seen[key] = i
		c.Shards = append(c.Shards, u)
	}
	if len(c.Shards) > shard.MaxShards {
		return fmt.Errorf("at most %d shards", shard.MaxShards)
	}
	return nil
}

// redactURL hides a password in a URL shown in an error.
func redactURL(u string) string {
	if pu, err := url.Parse(u); err == nil {
		return pu.Redacted()
	}
	return "(unparseable URL)"
}

func parseBatchGap(c *Config, v string) error {
	return durationWithin(&c.BatchGap, v, 0, 100*time.Millisecond, "must be a Go duration from 0 to 100ms, like 3ms")
}

func parseShardTimeout(c *Config, v string) error {
	return durationWithin(&c.ShardTimeout, v, time.Millisecond, time.Minute, "must be a Go duration between 1ms and 1m, like 250ms")
}

// durationWithin parses a Go duration from lo to hi into dst; problem is
// the answer otherwise.
func durationWithin(dst *time.Duration, v string, lo, hi time.Duration, problem string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		return errors.New(problem)
	}
	*dst = d
	return nil
}

func parseCoalesce(c *Config, v string) error {
	if v != "on" && v != "off" {
		return errors.New("must be on or off")
	}
	c.Coalesce = v == "on"
	return nil
}

func parseStart(c *Config, v string) error {
	start, err := shard.ParseStart(v)
	if err != nil {
		return errors.New("must be home or random")
	}
	c.Start = start
	return nil
}

func parseDev(c *Config, v string) error {
	if v != "" && v != "0" && v != "1" {
		return errors.New("must be 1 or unset")
	}
	c.Dev = v == "1"
	return nil
}

func parseUserAuth(c *Config, v string) error {
	if v != "header" && v != "hmac" {
		return fmt.Errorf("%q: must be header or hmac", v)
	}
	c.UserAuth = v
	return nil
}

// parseHMACSecret takes the buyers' token key; validate requires 32+
// bytes in hmac mode and drops it in header mode.
func parseHMACSecret(c *Config, v string) error {
	if v != "" {
		c.HMACSecret = []byte(v)
	}
	return nil
}

// parsePaySecret takes a key of 32+ bytes; "" leaves results unsigned
// (which validate allows only with Dev).
func parsePaySecret(c *Config, v string) error { return parseKey(&c.PaySecret, v) }

// parseKey sets *key to a key of 32+ bytes; "" leaves it unset.
func parseKey(key *[]byte, v string) error {
	if v == "" {
		return nil
	}
	if len(v) < 32 {
		return errors.New("too short: use at least 32 bytes")
	}
	*key = []byte(v)
	return nil
}

// parseQueueSecret takes a key of 32+ bytes; "" leaves the database's.
func parseQueueSecret(c *Config, v string) error {
	if v == "" {
		return nil
	}
	if len(v) < 32 {
		return errors.New("too short: use at least 32 bytes")
	}
	c.QueueSecret = []byte(v)
	return nil
}

// durationDef is a default duration as the settings show it: 15m, not 15m0s.
func durationDef(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// defaultTrustedProxies is SHARDSTOCK_TRUSTED_PROXIES's default, and what
// a Config with none (nil) believes: loopback.
const defaultTrustedProxies = "127.0.0.0/8,::1/128"

// Proxies are the peers whose X-User-ID and X-Forwarded-For are believed:
// TrustedProxies, or the setting's default when it is nil (a Config made
// in code).
func (c *Config) Proxies() []netip.Prefix {
	if c.TrustedProxies != nil {
		return c.TrustedProxies
	}
	var d Config
	if err := parseTrustedProxies(&d, defaultTrustedProxies); err != nil {
		panic(err) // (a constant)
	}
	return d.TrustedProxies
}

// parseTrustedProxies reads the peers whose X-User-ID (header mode) and
// X-Forwarded-For are believed: CIDRs or addresses, comma-separated, or
// none.
func parseTrustedProxies(c *Config, v string) error {
	c.TrustedProxies = []netip.Prefix{}
	if v == "none" {
		return nil
	}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return fmt.Errorf("%q is not a CIDR or an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.TrustedProxies = append(c.TrustedProxies, p.Masked())
	}
	return nil
}

// parseMQ checks the transport; a rocketmq:// URL's user info becomes
// MQCredentials. No error repeats a secret.
func parseMQ(c *Config, v string) error {
	c.MQ = v
	if v == "streams" {
		return nil
	}
	rc, err := messaging.ParseRocketMQ(v)
	if err != nil {
		if strings.Contains(err.Error(), "credentials") {
			return err
		}
		return errors.New("must be streams or rocketmq://[ACCESSKEY:SECRETKEY@]HOST:PORT")
	}
	c.MQCredentials = rc.Credentials
	return nil
}

func parseDB(c *Config, v string) error {
	if !strings.HasPrefix(v, "sqlite:") && !strings.HasPrefix(v, "mysql://") {
		return errors.New("must be sqlite:PATH or mysql://user:pass@tcp(host:port)/db")
	}
	if path, ok := strings.CutPrefix(v, "sqlite:"); ok {
		// The file's own directory is made when missing (./data, the
		// default), not a tree of them: a path mistyped is said here.
		if up := filepath.Dir(filepath.Dir(path)); !isDir(up) {
			return fmt.Errorf("%s: no such directory; make it first, or name a file in a directory that exists", up)
		}
	}
	c.DB = v
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// positiveDuration parses a Go duration above zero into dst.
func positiveDuration(dst *time.Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("must be a positive Go duration, like 15m")
	}
	*dst = d
	return nil
}

// parseArchiveAfter reads a positive Go duration, or off (ArchiveAfter 0:
// no automatic archive).
func parseArchiveAfter(c *Config, v string) error {
	if v == "off" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("must be a positive Go duration, like 24h, or off")
	}
	c.ArchiveAfter = d
	return nil
}

func parseOrderRate(c *Config, v string) error {
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r <= 0 {
		return errors.New("must be a positive number of orders per second")
	}
	c.OrderRate = r
	return nil
}

func parseRateLimits(c *Config, v string) error {
	l, err := flashsale.ParseLimits(v)
	if err != nil {
		return err
	}
	c.Limits = l
	return nil
}

// positiveInt parses a whole number above zero into dst; problem is the
// error's text otherwise.
func positiveInt(dst *int, v, problem string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return errors.New(problem)
	}
	*dst = n
	return nil
}

// parseSpoolDir reads the spool's directory; off (SpoolDir "") disables
// the spool.
func parseSpoolDir(c *Config, v string) error {
	if v != "off" {
		c.SpoolDir = v
	}
	return nil
}

func parseSpoolBytes(c *Config, v string) error {
	b, err := strconv.ParseInt(v, 10, 64)
	if err != nil || b < 4096 {
		return errors.New("must be a number of bytes, at least 4096")
	}
	c.SpoolBytes = b
	return nil
}

func parseLogFormat(c *Config, v string) error {
	if v != "text" && v != "json" {
		return errors.New("must be text or json")
	}
	c.LogFormat = v
	return nil
}

func parseLogLevel(c *Config, v string) error {
	if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
		return errors.New("must be debug, info, warn or error")
	}
	return nil
}
