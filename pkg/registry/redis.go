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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/intent"
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

// Fetch reads every key under the prefix. Any failure to list or read is
// an error: a partial listing is never answered.
func (r *redisRegistry) Fetch(ctx context.Context) (Snapshot, error) {
	c := r.newClient()
	defer c.Close()
	keys, err := r.scan(ctx, c)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list keys %s* at %s: %w", r.prefix, r.location, err)
	}
	entries, err := r.read(ctx, c, keys)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read keys %s* at %s: %w", r.prefix, r.location, err)
	}
	snap := Snapshot{Documents: make([]Document, 0, len(entries))}
	d := newDigest()
	for _, e := range entries { // in key order
		if e.tooLarge > 0 {
			d.add(e.key, "too-large", strconv.FormatInt(e.tooLarge, 10))
			snap.Documents = append(snap.Documents, Document{Origin: e.key,
				Err: fmt.Errorf("key %s holds %d bytes, over the limit of %d bytes (1 MiB) for one intent; it was not read", e.key, e.tooLarge, MaxKeyBytes)})
			continue
		}
		d.add(e.key, e.typ, e.value)
		if e.typ != "string" {
			snap.Documents = append(snap.Documents, Document{Origin: e.key,
				Err: fmt.Errorf("key %s holds a %s, not a string: set it to one intent as a YAML or JSON document", e.key, e.typ)})
			continue
		}
		snap.Documents = append(snap.Documents, r.document(e.key, e.value))
	}
	snap.Version = d.String()
	return snap, nil
}

// scan lists the keys under the prefix, sorted, each once (SCAN may
// return a key twice).
func (r *redisRegistry) scan(ctx context.Context, c *redis.Client) ([]string, error) {
	match := escapeGlob(r.prefix) + "*"
	var keys []string
	var cursor uint64
	for {
		batch, next, err := c.Scan(ctx, cursor, match, redisScanCount).Result()
		if err != nil {
			return nil, err
		}
		keys = append(keys, batch...)
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// MaxKeyBytes bounds the value of one Redis registry key (one intent):
// a longer value is not read, and its document is an error naming the key
// and its size. docs/registries.md documents it.
const MaxKeyBytes = 1 << 20

// entry is one key as read: its type and, for a string, its value — or,
// for a string over MaxKeyBytes, its size (value not read).
type entry struct {
	key, typ, value string
	tooLarge        int64
}

// read reads keys, in their order. One pipeline asks every key's TYPE and
// STRLEN; then only the strings within MaxKeyBytes are read, by MGETs of at
// most redisMGetBatch keys and redisMGetBytes. A key gone since SCAN is
// left out; a key that is not a string is an entry of its type; a string
// over MaxKeyBytes is an entry of its size, never read.
func (r *redisRegistry) read(ctx context.Context, c *redis.Client, keys []string) ([]entry, error) {
	out := make([]entry, 0, len(keys))
	for batch := range slices.Chunk(keys, redisMGetBatch) {
		types, sizes, err := r.describe(ctx, c, batch)
		if err != nil {
			return nil, err
		}
		var small []string
		var bytes int64
		for i, key := range batch {
			switch {
			case types[i] == "none": // deleted since SCAN
			case types[i] != "string":
				out = append(out, entry{key: key, typ: types[i]})
			case sizes[i] > MaxKeyBytes:
				out = append(out, entry{key: key, typ: "string", tooLarge: sizes[i]})
			default:
				if len(small) > 0 && bytes+sizes[i] > redisMGetBytes {
					if out, err = mget(ctx, c, small, out); err != nil {
						return nil, err
					}
					small, bytes = nil, 0
				}
				small, bytes = append(small, key), bytes+sizes[i]
			}
		}
		if out, err = mget(ctx, c, small, out); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// describe returns the TYPE and STRLEN of each key, in one round trip
// (STRLEN is 0 for a key that is not a string).
func (r *redisRegistry) describe(ctx context.Context, c *redis.Client, keys []string) (types []string, sizes []int64, err error) {
	typeCmds := make([]*redis.StatusCmd, len(keys))
	lenCmds := make([]*redis.IntCmd, len(keys))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			typeCmds[i], lenCmds[i] = p.Type(ctx, k), p.StrLen(ctx, k)
		}
		return nil
	})
	if err != nil && !isWrongType(err) {
		return nil, nil, fmt.Errorf("type and strlen: %w", err)
	}
	types, sizes = make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		if err := typeCmds[i].Err(); err != nil {
			return nil, nil, fmt.Errorf("type %s: %w", k, err)
		}
		if err := lenCmds[i].Err(); err != nil && !isWrongType(err) {
			return nil, nil, fmt.Errorf("strlen %s: %w", k, err)
		}
		types[i], sizes[i] = typeCmds[i].Val(), lenCmds[i].Val()
	}
	return types, sizes, nil
}

// isWrongType says whether err is Redis's answer to a command on a key of
// another type (STRLEN of a hash).
func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

// mget reads the string keys batch with one MGET and appends their entries
// to out; a key deleted (or no longer a string) since describe is left out,
// for the next sync to see.
func mget(ctx context.Context, c *redis.Client, batch []string, out []entry) ([]entry, error) {
	if len(batch) == 0 {
		return out, nil
	}
	vals, err := c.MGet(ctx, batch...).Result()
	if err != nil {
		return nil, fmt.Errorf("mget: %w", err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out = append(out, entry{key: batch[i], typ: "string", value: s})
		}
	}
	return out, nil
}

// document parses the value of key, which must be the one intent the key
// names.
func (r *redisRegistry) document(key, value string) Document {
	ins, parseErr := intent.Parse(key, []byte(value))
	want := strings.TrimPrefix(key, r.prefix)
	var keyErr error
	switch {
	case len(ins) == 0 && parseErr == nil:
		keyErr = fmt.Errorf("key %s holds no intent: set it to the intent %s as a YAML or JSON document", key, want)
	case len(ins) > 1:
		keyErr = fmt.Errorf("key %s holds %d intents: a key holds exactly one, under %s<kind>.<name>", key, len(ins), r.prefix)
		ins = nil
	case len(ins) == 1 && intent.Key(ins[0]) != want:
		keyErr = fmt.Errorf("key %s holds the intent %s, whose key is %s%s: move it there", key, intent.ID(ins[0]), r.prefix, intent.Key(ins[0]))
		ins = nil
	}
	return Document{Origin: key, Intents: ins, Err: errors.Join(parseErr, keyErr)}
}

// watch follows the keyspace notifications of the prefix's keys until ctx
// is done, subscribing again with a growing wait after each failure.
func (r *redisRegistry) watch(ctx context.Context) {
	retry := backoff.New(redisRetry)
	for reconnect := false; ; reconnect = true {
		subscribed, err := r.follow(ctx, reconnect)
		if ctx.Err() != nil {
			return
		}
		if subscribed {
			retry.Reset()
		}
		r.setNote(fmt.Sprintf("change notifications are not received (%v): changes are seen at the next sync interval", err))
		if !sleep(ctx, retry.Next()) {
			return
		}
	}
}

// follow subscribes to the keyspace notifications and nudges for each
// until the connection fails or ctx is done. subscribed reports whether
// the subscription was made. After a reconnect it nudges at once: what
// changed while it was away was announced to no one.
func (r *redisRegistry) follow(ctx context.Context, reconnect bool) (subscribed bool, err error) {
	c := r.newClient()
	defer c.Close()
	ps := c.PSubscribe(ctx) // no pattern yet: no I/O
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the connection ends it.
	defer context.AfterFunc(ctx, func() { _ = ps.Close() })()

	if err := ps.PSubscribe(ctx, r.pattern); err != nil {
		return false, fmt.Errorf("psubscribe %s: %w", r.pattern, err)
	}
	if _, err := ps.ReceiveTimeout(ctx, redisTimeout); err != nil { // the confirmation
		return false, fmt.Errorf("psubscribe %s: %w", r.pattern, err)
	}
	r.recheck(ctx, c)
	checked := time.Now()
	if reconnect {
		r.nudge()
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, redisIdlePing)
		switch {
		case err == nil:
			pinged = false
			if _, ok := msg.(*redis.Message); ok {
				// A notification while the note says they are missing:
				// the setting changed. Read it before the sync the nudge
				// asks for, so that the status that sync writes has it.
				if r.Note() != "" && time.Since(checked) >= redisNoteRecheck {
					r.recheck(ctx, c)
					checked = time.Now()
				}
				r.nudge()
			}
		case isTimeout(err) && !pinged:
			// Silence: check the connection, and whether the server's
			// setting changed meanwhile.
			if err := ps.Ping(ctx); err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
			pinged = true
			r.recheck(ctx, c)
			checked = time.Now()
		case isTimeout(err):
			return true, fmt.Errorf("no answer to ping within %s", redisIdlePing)
		default:
			return true, fmt.Errorf("receive: %w", err)
		}
	}
}

// recheck reads the server's notify-keyspace-events again and sets the
// note, nudging when the note changed: the sync that follows writes it
// into the registry's status at once, not at the next sync interval, and
// when notifications have just come back it catches up what changed while
// they were missing, which was announced to no one.
func (r *redisRegistry) recheck(ctx context.Context, c *redis.Client) {
	was := r.Note()
	note := r.keyspaceNote(ctx, c)
	r.setNote(note)
	if note != was {
		r.nudge()
	}
}

// keyspaceNote reads the server's notify-keyspace-events and says what an
// operator should know about it ("" when the notifications Changed needs
// are on).
func (r *redisRegistry) keyspaceNote(ctx context.Context, c *redis.Client) string {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	vals, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return fmt.Sprintf("cannot tell whether keyspace notifications are on (CONFIG GET notify-keyspace-events: %v): "+
			"if they are off, changes are seen at the next sync interval", err)
	}
	flags, ok := vals["notify-keyspace-events"]
	if !ok {
		return "cannot tell whether keyspace notifications are on (CONFIG GET notify-keyspace-events answered nothing): " +
			"if they are off, changes are seen at the next sync interval"
	}
	return notifyFlagsNote(flags)
}

// notifyFlagsNote says what notify-keyspace-events flags miss for Changed:
// keyspace notifications (K) of string writes ($) and of generic commands
// such as DEL and RENAME (g). A (all classes) covers both classes.
func notifyFlagsNote(flags string) string {
	if !strings.Contains(flags, "K") {
		return fmt.Sprintf("keyspace notifications are off on the server (notify-keyspace-events=%q): "+
			"changes are seen at the next sync interval; set notify-keyspace-events to KA to see them at once", flags)
	}
	if strings.Contains(flags, "A") {
		return ""
	}
	var missing []string
	if !strings.Contains(flags, "$") {
		missing = append(missing, "$ (SET)")
	}
	if !strings.Contains(flags, "g") {
		missing = append(missing, "g (DEL, RENAME)")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("keyspace notifications on the server leave out %s (notify-keyspace-events=%q): "+
		"those changes are seen at the next sync interval; add the missing classes, or set KA, to see them at once",
		strings.Join(missing, " and "), flags)
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// quietRedis silences go-redis's own log lines (a process-wide setting;
// by default it prints "failed to dial" to stderr on every retry): the
// failures they describe reach the operator as Fetch errors already, logged
// by the configurator once per attempt and shown by sluice get registries.
var quietRedis sync.Once

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
