package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisOptions is how slotd reaches Redis when it is not one server named by
// [redis] url: Sentinel (Addrs are the Sentinels, MasterName the monitored
// master) or Cluster (Addrs are seed nodes). The zero value means url mode,
// or the embedded store when url is empty too.
type RedisOptions struct {
	Addrs            []string // [redis] addrs: host:port of the Sentinels or of Cluster seed nodes
	MasterName       string   // [redis] master_name: Sentinel mode
	Cluster          bool     // [redis] cluster = true: Cluster mode
	Username         string   // [redis] username: ACL user on the data nodes
	Password         string   // [redis] password: on the data nodes
	SentinelUsername string   // [redis] sentinel_username: ACL user on the Sentinels
	SentinelPassword string   // [redis] sentinel_password: on the Sentinels
	DB               int      // [redis] db: Sentinel mode only (a Cluster has only db 0)
	// MinReplicasAck is [redis] min_replicas_ack: after a won claim and
	// after a complete, WAIT for this many replicas of the master that took
	// the write (0, the default: do not wait). See lock.WithMinReplicasAck.
	MinReplicasAck int
	// TLS is [redis] tls = true: TLS to the Sentinels and Redis servers of
	// addrs (url asks for TLS with rediss://).
	TLS bool
	// TLSConfig holds the CA to trust and the client certificate from
	// [redis] tls_ca_file, tls_cert_file and tls_key_file, read at load;
	// nil when none is set (the system's roots, no client certificate).
	TLSConfig *tls.Config
	// Redlock is [redis] redlock: the URLs of at least MinRedlockNodes
	// independent masters, each parsed as url is; the slot protocol runs
	// on all of them and a quorum decides (see redislock.NewRedlock).
	Redlock []string
}

// MinRedlockNodes is the fewest masters [redis] redlock takes: with fewer,
// a quorum is every node and one node down stops every slot.
const MinRedlockNodes = 3

// Redis connection modes, as RedisMode names them.
const (
	ModeEmbedded = "embedded" // no Redis: the in-memory store, one replica
	ModeURL      = "url"      // one server (or a proxy) named by [redis] url
	ModeSentinel = "sentinel" // [redis] addrs + master_name
	ModeCluster  = "cluster"  // [redis] addrs + cluster = true
	ModeRedlock  = "redlock"  // [redis] redlock: independent masters, decided by quorum
)

// RedisMode says how this configuration reaches Redis.
func (c *Config) RedisMode() string {
	switch {
	case len(c.Redis.Redlock) > 0:
		return ModeRedlock
	case c.Redis.MasterName != "":
		return ModeSentinel
	case c.Redis.Cluster:
		return ModeCluster
	case c.RedisURL != "":
		return ModeURL
	}
	return ModeEmbedded
}

// Embedded reports whether slotd runs on its in-memory store: no Redis, one
// replica.
func (c *Config) Embedded() bool {
	return c.RedisMode() == ModeEmbedded && !c.UsesZooKeeper() && !c.UsesEtcd()
}

// The [redis] keys of the Sentinel and Cluster modes, and min_replicas_ack.
var redisModeKeys = append([]string{"addrs", "master_name", "cluster", "username", "password",
	"sentinel_username", "sentinel_password", "db", "min_replicas_ack", "redlock"}, redisTLSKeys...)

// MaxReplicasAck bounds min_replicas_ack: far more replicas than anyone runs.
const MaxReplicasAck = 100

func (c *Config) readRedis(t table) {
	c.readRedisURLEnv(t)
	if v, ok := t.str("url"); ok && v != "" {
		if _, err := ParseRedisURL(v); err != nil {
			t.errorf("url", "%v", err)
		} else {
			c.RedisURL = v
		}
	}
	if v, ok := t.str("prefix"); ok {
		switch {
		case v == "":
			t.errorf("prefix", "must not be empty")
		case strings.ContainsAny(v, "{}") || strings.IndexFunc(v, badNameRune) >= 0:
			t.errorf("prefix", "%q must not contain braces (they are Redis Cluster hash tags in slotd's keys), whitespace or control characters", v)
		default:
			c.Prefix = v
		}
	}
	c.readRedisMode(t)
	c.readRedisTLS(t)
}

// envNameRE is what an environment variable's name may look like.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// readRedisURLEnv reads [redis] url_env, the name of an environment
// variable holding the Redis URL, so that the URL's password can come from
// a secret store (a Kubernetes Secret, a systemd EnvironmentFile) instead of
// the config file. It is read once, at load, like the rest of the file.
func (c *Config) readRedisURLEnv(t table) {
	name, ok := t.str("url_env")
	if !ok {
		return
	}
	if u, _ := t.str("url"); u != "" {
		t.errorf("url_env", "set either url or url_env, not both")
		return
	}
	if !envNameRE.MatchString(name) {
		t.errorf("url_env", "%q is not an environment variable name (want [A-Za-z_][A-Za-z0-9_]*)", name)
		return
	}
	v, set := os.LookupEnv(name)
	if v == "" {
		why := "is not set"
		if set {
			why = "is empty"
		}
		t.errorf("url_env", "environment variable %s %s: it must hold the Redis URL (redis://[user:password@]host:port[/db])", name, why)
		return
	}
	if _, err := ParseRedisURL(v); err != nil {
		t.errorf("url_env", "environment variable %s: %v", name, err)
		return
	}
	c.RedisURL, c.URLEnv = v, name
}

// ParseRedisURL parses a Redis URL as go-redis does: redis://, rediss://
// (TLS) or unix://, with an ACL user and password and a database number,
// and a TCP port from 1 to 65535. It is the only place slotd parses one.
// Its error never holds a byte of the URL, which may hold a password: the
// errors of net/url and go-redis quote the part they stumbled on, and when
// a password holds a character that must be percent-encoded (/ ? # @ %),
// that part is a piece of the password (`invalid port ":s3cr" after host`;
// all of it when the URL ends in /). So the error says which part is
// wrong in words of its own, and how to encode a password.
func ParseRedisURL(s string) (*redis.Options, error) {
	opt, err := redis.ParseURL(s)
	if err == nil && opt.Network == "tcp" {
		_, port, _ := net.SplitHostPort(opt.Addr)
		if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
			err = errBadPort
		}
	}
	if err != nil {
		return nil, fmt.Errorf("invalid Redis URL (want redis://[user:password@]host:port[/db], rediss://... or unix:///path): %s%s",
			urlProblem(err), encodingHint(s))
	}
	return opt, nil
}

var errBadPort = errors.New("bad port")

// urlProblem says what is wrong with a Redis URL in fixed words, choosing
// them by the text of err, none of which it copies.
func urlProblem(err error) string {
	if errors.Is(err, errBadPort) {
		return "the port must be a number from 1 to 65535"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		msg := ue.Err.Error()
		switch {
		case strings.Contains(msg, "invalid port"):
			return "what follows the host's colon is not a port number"
		case strings.Contains(msg, "invalid URL escape"):
			return "a % is not followed by two hexadecimal digits (write a % as %25)"
		case strings.Contains(msg, "invalid userinfo"):
			return "the user or password holds a character that must be percent-encoded"
		case strings.Contains(msg, "control character"):
			return "it holds a control character"
		case strings.Contains(msg, "missing protocol scheme"), strings.Contains(msg, "first path segment"):
			return "it has no scheme (redis://, rediss:// or unix://)"
		case strings.Contains(msg, "in host name"):
			return "the host holds a character a host name may not"
		}
		return "it is not a well-formed URL"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "invalid URL scheme"):
		return "the scheme must be redis://, rediss:// or unix://"
	case strings.Contains(msg, "invalid database number"):
		return "the database (the path, or ?db=) must be a number"
	case strings.Contains(msg, "invalid URL path"):
		return "the path must be one database number, such as /0"
	case strings.Contains(msg, "empty unix socket path"):
		return "unix:// needs the socket's path (unix:///run/redis.sock)"
	case strings.Contains(msg, "unexpected option"):
		return "a query option is not one go-redis knows"
	}
	for _, name := range redisURLOptions {
		if strings.HasPrefix(msg, "redis: invalid "+name+" ") {
			return "the query option " + name + " has a bad value"
		}
	}
	return "it is not a valid Redis URL"
}

// redisURLOptions are the query options go-redis reads from a URL: the
// only words of a URL that an error may name.
var redisURLOptions = []string{"protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout", "min_idle_conns",
	"max_idle_conns", "max_active_conns", "max_concurrent_dials", "pipeline_pool_size", "pipeline_read_buffer_size",
	"pipeline_write_buffer_size", "conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
	"conn_max_lifetime_jitter", "skip_verify"}

// encodingHint explains percent-encoding when s has an @ (so it may have a
// user or password) and what precedes its last @ holds a character that
// would end the userinfo early or is not a valid escape.
func encodingHint(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		rest = s
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return ""
	}
	info := rest[:at]
	bad := strings.ContainsAny(info, "/?#@[] ")
	for i := 0; i < len(info) && !bad; i++ {
		bad = info[i] == '%' && (i+2 >= len(info) || !isHex(info[i+1]) || !isHex(info[i+2]))
	}
	if !bad {
		return ""
	}
	return "; a user or password holding / ? # @ % [ ] or a space must be percent-encoded: / as %2F, ? as %3F, # as %23, @ as %40, % as %25, space as %20"
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// readRedisMode reads and cross-checks the mode keys after url has been
// read. Passwords are never quoted in errors.
func (c *Config) readRedisMode(t table) {
	o := &c.Redis
	if t.has("addrs") {
		o.Addrs = readAddrs(t, "addrs")
	}
	if v, ok := t.str("master_name"); ok {
		if v == "" || strings.IndexFunc(v, badNameRune) >= 0 {
			t.errorf("master_name", "%q: want the name the Sentinels monitor the master under (sentinel monitor <name> ...), without whitespace", v)
		} else {
			o.MasterName = v
		}
	}
	if v, ok := t.m["cluster"]; ok {
		if b, isBool := v.(bool); isBool {
			o.Cluster = b
		} else {
			t.errorf("cluster", "must be a boolean (true or false), not %s", tomlType(v))
		}
	}
	for _, s := range []struct {
		key string
		dst *string
	}{
		{"username", &o.Username}, {"password", &o.Password},
		{"sentinel_username", &o.SentinelUsername}, {"sentinel_password", &o.SentinelPassword},
	} {
		if v, ok := t.str(s.key); ok {
			*s.dst = v
		}
	}
	if n := t.integer("db", 0, math.MaxInt32, "a Redis database number"); n.set && !n.bad {
		o.DB = n.v
	}
	if n := t.integer("min_replicas_ack", 0, MaxReplicasAck, "replicas that must acknowledge a claim"); n.set && !n.bad {
		o.MinReplicasAck = n.v
	}

	// Which servers: url, or addrs with exactly one of master_name and
	// cluster. Every key that the chosen mode would ignore is an error, so
	// that a typo cannot silently pick another mode.
	addrsSet := t.has("addrs")
	switch {
	case c.RedisURL != "" && addrsSet:
		t.errorf("addrs", "set together with url (or url_env): url names one server; addrs lists Sentinels (with master_name) or Cluster nodes (with cluster = true); use one")
	case addrsSet && o.MasterName != "" && o.Cluster:
		t.errorf("cluster", "set together with master_name: master_name means Sentinel mode, cluster = true means Redis Cluster; use one")
	case addrsSet && o.MasterName == "" && !o.Cluster && !t.has("master_name"):
		t.errorf("addrs", "needs master_name (the Sentinels at addrs monitor that master) or cluster = true (addrs are Redis Cluster nodes); for one server use url")
	}
	if !addrsSet {
		for _, key := range []string{"master_name", "cluster"} {
			if t.has(key) && (key != "cluster" || o.Cluster) {
				t.errorf(key, "needs addrs: the host:port of the Sentinels (master_name) or of Cluster nodes (cluster = true)")
			}
		}
	}
	for _, key := range []string{"username", "password", "db"} {
		if t.has(key) && !addrsSet {
			t.errorf(key, "only with addrs (Sentinel or Cluster); with url, put it in the URL: redis://user:password@host:port/db")
		}
	}
	for _, key := range []string{"sentinel_username", "sentinel_password"} {
		if t.has(key) && o.MasterName == "" {
			t.errorf(key, "only with master_name: it authenticates slotd to the Sentinels")
		}
	}
	if o.Cluster && o.DB != 0 {
		t.errorf("db", "%d: a Redis Cluster has only database 0", o.DB)
	}
	if t.has("redlock") {
		c.readRedlock(t)
		return
	}
	if o.MinReplicasAck > 0 && c.RedisURL == "" && !addrsSet {
		t.errorf("min_replicas_ack", "%d needs Redis (url or addrs): the embedded store has no replicas", o.MinReplicasAck)
	}
}

// readRedlock reads [redis] redlock, an array of at least MinRedlockNodes
// Redis URLs of distinct servers, and refuses every key of the other modes
// beside it. A URL is never quoted, since it may hold a password: an item
// is named by its position and its host:port.
func (c *Config) readRedlock(t table) {
	for _, key := range []string{"url", "url_env", "addrs", "master_name", "cluster", "min_replicas_ack"} {
		if t.has(key) && (key != "url" || c.RedisURL != "") {
			t.errorf("redlock", "set together with %s: redlock lists every master slotd uses (a URL each); remove %s", key, key)
		}
	}
	list, ok := t.m["redlock"].([]any)
	if !ok {
		t.errorf("redlock", "must be an array of Redis URLs (redis://[user:password@]host:port[/db]), not %s", tomlType(t.m["redlock"]))
		return
	}
	if len(list) < MinRedlockNodes {
		t.errorf("redlock", "lists %d URL(s): Redlock needs at least %d independent masters (an odd number, so that a majority survives the loss of the others)", len(list), MinRedlockNodes)
		return
	}
	urls := make([]string, 0, len(list))
	seen := map[string]int{}
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			t.errorf("redlock", "item %d must be a Redis URL string, not %s", i+1, tomlType(e))
			continue
		}
		opt, err := ParseRedisURL(s)
		if err != nil {
			t.errorf("redlock", "item %d: %v", i+1, err)
			continue
		}
		server := opt.Network + " " + opt.Addr
		if j, dup := seen[server]; dup {
			t.errorf("redlock", "items %d and %d name the same server %s: Redlock needs independent masters", j, i+1, opt.Addr)
			continue
		}
		seen[server] = i + 1
		urls = append(urls, s)
	}
	if len(urls) == len(list) {
		c.Redis.Redlock = urls
	}
}

// readAddrs reads a non-empty array of distinct "host:port" strings.
func readAddrs(t table, key string) []string {
	v := t.m[key]
	list, ok := v.([]any)
	if !ok {
		t.errorf(key, "must be an array of \"host:port\" strings, not %s", tomlType(v))
		return nil
	}
	if len(list) == 0 {
		t.errorf(key, "is empty: list at least one \"host:port\" (or remove addrs and set url)")
		return nil
	}
	out := make([]string, 0, len(list))
	seen := map[string]bool{}
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			t.errorf(key, "item %d must be a \"host:port\" string, not %s", i+1, tomlType(e))
			continue
		}
		if why := checkHostPort(s); why != "" {
			t.errorf(key, "item %d %q: %s", i+1, s, why)
			continue
		}
		if seen[s] {
			t.errorf(key, "item %d %q is listed twice", i+1, s)
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// checkHostPort returns why s is not a "host:port" with a port in 1..65535,
// or "".
func checkHostPort(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want host:port (an IPv6 host in brackets: [::1]:26379)"
	}
	if host == "" || strings.IndexFunc(host, badNameRune) >= 0 {
		return "the host is empty or holds whitespace"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "the port must be a number from 1 to 65535"
	}
	return ""
}
