// Redis registry: intents read from the string keys of one Redis database.
//
// # Key layout
//
// Each key <prefix><kind>.<name> holds ONE intent, as a YAML or JSON
// document in the format sluice apply -f reads:
//
//	SET sluice:intents:layer2network.tenant-a 'kind: Layer2Network
//	name: tenant-a
//	spec: {vlan: 100, vni: 10100}'
//
// <prefix> is the spec's prefix (default DefaultRedisPrefix,
// "sluice:intents:"); <kind>.<name> is intent.Key of the intent the key
// holds: the kind's lower-case token and the intent's name. A key is a
// Document whose Origin is the full key. It is an error of that Document,
// naming the key, when the key holds no intent, more than one, an intent
// whose kind and name are not those of the key, a document that does not
// parse, a value that is not a string, or a value over MaxKeyBytes (1 MiB,
// not read: STRLEN comes first). Keys outside the prefix are not read.
//
// # Reading and watching
//
// Fetch lists the keys with SCAN MATCH <prefix>*, asks their TYPE and
// STRLEN in one pipeline per 500 keys, and reads the strings with MGETs of
// at most 500 keys and 16 MiB; a key deleted in between is simply absent.
// Changed follows the keyspace notifications of the keys (PSUBSCRIBE
// __keyspace@<db>__:<prefix>*), which the server publishes only when its
// notify-keyspace-events setting has K and the g and $ classes (KA has
// all); Note says when it does not, or when that cannot be told. The
// setting is read again after each silence of redisIdlePing and, while the
// note says notifications are missing, when one arrives (at most once a
// second): a server whose notifications are turned on (CONFIG SET
// notify-keyspace-events KA) clears the note at its first notification.
// A change of this note nudges, so that the sync that follows writes it
// into the registry's status (and catches up what went unannounced).
//
// # Files
//
// redis.go opens the registry (the spec, its clients, their connection);
// redis_fetch.go is Fetch and how it reads the keys; redis_watch.go is
// Changed's subscription and the note about the server's setting.

package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const (
	// redisTimeout bounds a dial and each command's read and write, so
	// Fetch fails instead of hanging on a server that stopped answering.
	redisTimeout = 5 * time.Second
	// redisScanCount is the COUNT hint of each SCAN call.
	redisScanCount = 1000
	// redisMGetBatch is the most keys read by one MGET.
	redisMGetBatch = 500
	// redisMGetBytes is the most value bytes one MGET reads (by STRLEN).
	redisMGetBytes = 16 << 20
	// redisIdlePing is how long the subscription may be silent before a
	// PING checks that the connection still works.
	redisIdlePing = 30 * time.Second
	// redisNoteRecheck is how often, at most, a notification that arrives
	// while the note says some are missing has the setting read again.
	redisNoteRecheck = time.Second
	// redisMaxBackoff is the longest wait between subscription attempts.
	redisMaxBackoff = 30 * time.Second
)

// redisRetry: 1 s to redisMaxBackoff (30 s): a Redis that refuses the subscription is down or failing over; syncs cover the gap.
var redisRetry = backoff.Policy{Base: time.Second, Cap: redisMaxBackoff}

// redisRegistry reads intents from a Redis database: see the key layout
// at the top of this file.
type redisRegistry struct {
	*changeWatch
	opts         redis.Options // of each client; see newClient
	location     string
	prefix       string
	pattern      string // keyspace channel pattern of the prefix's keys
	passwordFile string
	caFile       string
	tls          *tls.Config // nil for redis://
}

// checkRedis checks a Redis registry spec without I/O: files named in it
// are read when connecting.
func checkRedis(spec *sluicev1.RedisRegistry) error {
	raw := spec.GetUrl()
	if raw == "" {
		return errors.New("redis.url: required, e.g. redis://redis.example:6379/0")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL, which may hold a password: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("redis.url: not a URL: %w", err)
	}
	if _, ok := u.User.Password(); ok {
		return errors.New("redis.url: holds a password, which would be readable by everyone who can read the registry spec; " +
			"remove it from the URL and put it in a file named by redis.password_file")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("redis.url: scheme %q: use redis:// or rediss:// (TLS)", u.Scheme)
	}
	if _, err := redis.ParseURL(raw); err != nil {
		return fmt.Errorf("redis.url: %w", err)
	}
	if f := spec.GetPasswordFile(); f != "" && !filepath.IsAbs(f) {
		return fmt.Errorf("redis.password_file: %q is not an absolute path", f)
	}
	if f := spec.GetCaFile(); f != "" {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("redis.ca_file: %q is not an absolute path", f)
		}
		if u.Scheme != "rediss" {
			return errors.New("redis.ca_file: set, but redis.url is not rediss://, so TLS is not used; use rediss:// or leave ca_file empty")
		}
	}
	return nil
}

// openRedis returns the registry of spec. It connects lazily: nothing is
// dialled until Fetch or Changed.
//
// Each Fetch, and each subscription of the watch, uses a client of its
// own, closed when it is done. A long-lived client would remember a
// server that was down: go-redis then fails new connections at once for
// up to a second after the server is back, and the Fetch a reconnect
// nudges for would fail. A dial every sync costs nothing next to that.
func openRedis(spec *sluicev1.RedisRegistry, log zerolog.Logger) (Registry, error) {
	if err := checkRedis(spec); err != nil {
		return nil, err
	}
	quietRedis.Do(func() { redis.SetLogger(discard{}) })
	opts, err := redis.ParseURL(spec.GetUrl())
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	prefix := spec.GetPrefix()
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	r := &redisRegistry{
		location:     redactURL(spec.GetUrl()),
		prefix:       prefix,
		pattern:      fmt.Sprintf("__keyspace@%d__:%s*", opts.DB, escapeGlob(prefix)),
		passwordFile: spec.GetPasswordFile(),
		caFile:       spec.GetCaFile(),
		tls:          opts.TLSConfig,
	}
	// Options given in the URL's query (dial_timeout=...) win.
	if opts.DialTimeout == 0 {
		opts.DialTimeout = redisTimeout
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = redisTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = redisTimeout
	}
	if opts.MaxRetries == 0 {
		// One retry: the configurator tries again at the next sync anyway,
		// and an unreachable server should be reported, not waited for.
		opts.MaxRetries = 1
	}
	opts.ContextTimeoutEnabled = true // a Fetch's ctx deadline bounds its commands
	opts.PoolSize = 1                 // a client runs one command at a time
	opts.Dialer = r.dial
	if r.passwordFile != "" {
		// Read at each connect, so a rotated password is used without a
		// restart.
		user := opts.Username
		opts.CredentialsProviderContext = func(context.Context) (string, string, error) {
			pw, err := readPasswordFile(r.passwordFile)
			return user, pw, err
		}
	}
	r.opts = *opts
	r.changeWatch = newChangeWatch(log.With().Str("location", r.location).Logger(), r.watch)
	return r, nil
}

// newClient returns a client of the registry's server; the caller closes it.
func (r *redisRegistry) newClient() *redis.Client {
	opts := r.opts // NewClient fills in defaults: each client its own copy
	// A plain Redis has no maintenance notifications; asking for them only
	// adds a handshake to every connection.
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&opts)
}

func (r *redisRegistry) Kind() string     { return "redis" }
func (r *redisRegistry) Location() string { return r.location }

// Close stops the watch, closing its connection. It is safe to call twice.
func (r *redisRegistry) Close() error {
	r.stop()
	return nil
}

// dial connects to the server, with TLS for rediss://. The CA file is read
// at each connect, like the password file, so that replacing either needs
// no restart and a missing one is an error of the Fetch that needed it.
func (r *redisRegistry) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: redisTimeout}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil || r.tls == nil {
		return conn, err
	}
	cfg := r.tls.Clone()
	if r.caFile != "" {
		if cfg.RootCAs, err = readCAFile(r.caFile); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// readPasswordFile returns the password in file, without surrounding
// white space (a file written by echo ends in a newline).
func readPasswordFile(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read redis.password_file: %w", err)
	}
	pw := strings.TrimSpace(string(data))
	if pw == "" {
		return "", fmt.Errorf("redis.password_file %s is empty", file)
	}
	return pw, nil
}

// readCAFile returns the certificates of the PEM bundle in file.
func readCAFile(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read redis.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("redis.ca_file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// redactURL returns raw without a password in its user info (checkRedis
// refuses one, but a location must never show it).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if name := u.User.Username(); name != "" {
		u.User = url.User(name)
	} else {
		u.User = nil
	}
	return u.String()
}

// escapeGlob escapes the characters that are special in Redis glob
// patterns, so that a prefix matches only itself.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\^`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// quietRedis silences go-redis's own log lines (a process-wide setting;
// by default it prints "failed to dial" to stderr on every retry): the
// failures they describe reach the operator as Fetch errors already, logged
// by the configurator once per attempt and shown by sluice get registries.
var quietRedis sync.Once

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
