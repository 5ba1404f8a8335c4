// Package buckets creates, checks and binds sluice's JetStream buckets and
// its events stream, with retries: the plumbing beside pkg/store. What the
// buckets are — their names, who manages each, their settings — is
// pkg/contract's; this package opens them. Each component opens its buckets
// once, with Open (a service, the CLI) or Prepare (on a JetStream context
// it has); Ensure creates everything for installers, tests and sluice dev.
// The manager of the control bucket (and Ensure) also gives the store its
// identity, control/store.id, if it has none.
//
// The leases bucket's TTL is the leader lease in force, and a leader renews
// by it: its manager sets it to its --leader-lease only while no lease is
// held (keptTTL), and says so when it keeps it; Set.LeaderLease and
// LeaderLease report it.
package buckets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/codec"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// OpenOption changes how Open and Prepare behave.
type OpenOption func(*openConfig)

type openConfig struct {
	log                  zerolog.Logger
	minBackoff, maxDelay time.Duration
}

// WithLog logs every wait for a bucket another component creates.
func WithLog(log zerolog.Logger) OpenOption { return func(c *openConfig) { c.log = log } }

// WithBackoff sets the first and the longest wait between tries while a
// bucket is missing (default 250ms doubling up to 5s, jittered).
func WithBackoff(first, longest time.Duration) OpenOption {
	return func(c *openConfig) { c.minBackoff, c.maxDelay = first, longest }
}

// Open makes a JetStream context on nc and prepares the buckets for
// component (see Prepare): what a service does first.
func Open(ctx context.Context, nc *nats.Conn, s contract.Settings, component string, opts ...OpenOption) (jetstream.JetStream, *Set, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	b, err := Prepare(ctx, js, s, component, opts...)
	if err != nil {
		return nil, nil, err
	}
	return js, b, nil
}

// Prepare binds, don't manage: it creates the buckets and the stream that
// component manages when they are missing and updates them when their
// settings differ from s, never lowering replicas (a MismatchError instead);
// then it binds every other bucket component uses and verifies it (replicas,
// storage), waiting with backoff, and a log
// line each try, while a bucket is missing or its manager has not yet
// enabled atomic publish on it. It
// returns the handles of the buckets component uses (an agent gets
// NodeConfigs, Status, Nodes and Control; every other component gets all)
// and the node and leader leases in force. An agent and the CLI manage
// nothing. The leases bucket's TTL is changed only while no lease is held
// in it (see keptTTL).
func Prepare(ctx context.Context, js jetstream.JetStream, s contract.Settings, component string, opts ...OpenOption) (*Set, error) {
	if !contract.ValidComponent(component) {
		return nil, fmt.Errorf("buckets: unknown component %q", component)
	}
	c := newOpenConfig(opts)
	used := contract.Uses(component)
	// Manage first, then wait for the others: two managers starting together
	// each create theirs before waiting for the other's.
	for _, w := range wants(s) {
		if contract.Manager(w.name) == component {
			if err := c.manage(ctx, js, w, component); err != nil {
				return nil, err
			}
		}
	}
	if contract.Manager(contract.BucketControl) == component {
		if err := c.stampStoreID(ctx, js); err != nil {
			return nil, err
		}
	}
	b := &Set{}
	for _, w := range wants(s) {
		if !slices.Contains(used, w.name) {
			continue
		}
		cfg, err := c.waitFor(ctx, js, w, component)
		if err != nil {
			return nil, err
		}
		if err := w.verify(cfg, component); err != nil {
			return nil, err
		}
		if w.kv == nil {
			continue
		}
		switch w.name {
		case contract.BucketNodes:
			b.NodeLease = cfg.MaxAge
		case contract.BucketLeases:
			b.LeaderLease = cfg.MaxAge
		}
		kv, err := c.bind(ctx, js, w)
		if err != nil {
			return nil, err
		}
		*b.field(w.name) = kv
	}
	return b, nil
}

// Ensure creates or updates every bucket and the events stream as their
// managers would (never lowering replicas): for installers, tests and
// `sluice dev`, which create everything before starting services.
func Ensure(ctx context.Context, js jetstream.JetStream, s contract.Settings, opts ...OpenOption) error {
	c := newOpenConfig(opts)
	for _, w := range wants(s) {
		if err := c.manage(ctx, js, w, "installer"); err != nil {
			return err
		}
	}
	return c.stampStoreID(ctx, js)
}

// stampStoreID gives the store its identity, control/store.id (a StoreID
// with a random id), unless it has one: Create, so the first manager to
// write it wins and every later start keeps it. A store lost and started
// afresh is given a new one by the first manager that starts on it; agents
// that kept running tell by it that the leader epochs and nodeconfigs
// revisions they remember were another store's (docs/agent.md).
func (c openConfig) stampStoreID(ctx context.Context, js jetstream.JetStream) error {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("store identity (%s/%s): random id: %w", contract.BucketControl, contract.KeyStoreID, err)
	}
	v, err := codec.Marshal(&sluicev1.StoreID{Id: hex.EncodeToString(raw[:]), CreatedAt: timestamppb.Now()})
	if err != nil {
		return fmt.Errorf("store identity (%s/%s): %w", contract.BucketControl, contract.KeyStoreID, err)
	}
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var kv jetstream.KeyValue
		kv, err = js.KeyValue(cctx, contract.BucketControl)
		if err == nil {
			_, err = kv.Create(cctx, contract.KeyStoreID, v)
		}
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return fmt.Errorf("write the store identity %s/%s: %w", contract.BucketControl, contract.KeyStoreID, err)
		}
		delay := retry.Next()
		c.log.Info().Str("bucket", contract.BucketControl).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for JetStream to write the store identity %s/%s", contract.BucketControl, contract.KeyStoreID)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return fmt.Errorf("write the store identity %s/%s: %w", contract.BucketControl, contract.KeyStoreID, err)
		}
	}
}

// want is one bucket or stream and the stream config it should have.
type want struct {
	name string                    // bucket or stream name
	kv   *jetstream.KeyValueConfig // nil for a plain stream
	sc   jetstream.StreamConfig    // the fields sluice manages (see apply)
}

func (w want) kind() string {
	if w.kv != nil {
		return "bucket"
	}
	return "stream"
}

func (w want) stream() string {
	if w.kv != nil {
		return contract.StreamOfBucket(w.name)
	}
	return w.name
}

// wants lists every bucket and then the events stream with its wanted config.
func wants(s contract.Settings) []want {
	var out []want
	for _, cfg := range s.BucketConfigs() {
		out = append(out, want{name: cfg.Bucket, kv: &cfg, sc: kvStreamConfig(cfg)})
	}
	return append(out, want{name: contract.StreamEvents, sc: s.EventsStreamConfig()})
}

// kvStreamConfig is the part of a KV bucket's stream config sluice manages,
// computed as nats.go's CreateKeyValue does, plus atomic publish.
func kvStreamConfig(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	return jetstream.StreamConfig{
		Description:            cfg.Description,
		MaxMsgsPerSubject:      int64(max(cfg.History, 1)),
		MaxAge:                 cfg.TTL,
		Duplicates:             dup,
		Storage:                cfg.Storage,
		Replicas:               max(cfg.Replicas, 1),
		RePublish:              cfg.RePublish,
		AllowMsgTTL:            cfg.LimitMarkerTTL != 0,
		SubjectDeleteMarkerTTL: cfg.LimitMarkerTTL,
		AllowAtomicPublish:     contract.AllowsAtomicPublish(cfg.Bucket),
	}
}

// apply returns cur with the fields sluice manages taken from w.
func (w want) apply(cur jetstream.StreamConfig) jetstream.StreamConfig {
	next := cur
	next.Description = w.sc.Description
	next.MaxAge = w.sc.MaxAge
	next.Replicas = w.sc.Replicas
	if w.kv != nil {
		next.MaxMsgsPerSubject = w.sc.MaxMsgsPerSubject
		next.Duplicates = w.sc.Duplicates
		next.RePublish = w.sc.RePublish
		next.AllowMsgTTL = w.sc.AllowMsgTTL || cur.AllowMsgTTL // the server cannot turn it off
		next.SubjectDeleteMarkerTTL = w.sc.SubjectDeleteMarkerTTL
		next.AllowAtomicPublish = w.sc.AllowAtomicPublish
	} else {
		next.Subjects = w.sc.Subjects
		next.Discard = w.sc.Discard
		next.MaxBytes = w.sc.MaxBytes
		// A byte limit an operator raised on purpose (nats stream edit
		// --max-bytes) is kept: lowering it would drop the oldest events.
		// A stream without a limit (-1, as created before there was one)
		// gets the limit.
		if cur.MaxBytes > 0 && (w.sc.MaxBytes <= 0 || cur.MaxBytes > w.sc.MaxBytes) {
			next.MaxBytes = cur.MaxBytes
		}
	}
	return next
}

// manage creates the bucket or stream when missing and updates the fields
// sluice manages when they differ, refusing to lower replicas or to change
// the storage type. It returns the TTL it kept instead of the one wanted
// (see keptTTL), zero when it kept none.
func (w want) manage(ctx context.Context, js jetstream.JetStream, component string) (kept time.Duration, err error) {
	cur, err := streamConfig(ctx, js, w.stream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := w.create(ctx, js); err != nil {
			return 0, err
		}
		// On a cluster a stream just created (by us, or by another manager
		// starting at the same time: then create saw "already exists") can
		// be "not found" for a moment where the assignment is not applied
		// yet: ask again, within formingWait.
		for n, until := 0, time.Now().Add(formingWait); ; n++ {
			cur, err = streamConfig(ctx, js, w.stream())
			if !errors.Is(err, jetstream.ErrStreamNotFound) || time.Now().After(until) || backoff.Sleep(ctx, formingRetry.Delay(n), nil) != nil {
				break
			}
		}
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
		}
	} else if err != nil {
		return 0, fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
	}
	if cur.Replicas > w.sc.Replicas {
		return 0, &MismatchError{
			Kind: w.kind(), Name: w.name, Setting: "replicas", Component: component, Manager: contract.Manager(w.name),
			Found: fmt.Sprint(cur.Replicas), Want: fmt.Sprint(w.sc.Replicas),
			Fix: fmt.Sprintf("replicas are never lowered on start; start %s with --replicas %d (env SLUICE_REPLICAS), "+
				"or scale down on purpose with `nats stream edit %s --replicas %d` and start again",
				component, cur.Replicas, w.stream(), w.sc.Replicas),
		}
	}
	if cur.Storage != w.sc.Storage {
		return 0, &MismatchError{
			Kind: w.kind(), Name: w.name, Setting: "storage", Component: component, Manager: contract.Manager(w.name),
			Found: cur.Storage.String(), Want: w.sc.Storage.String(),
			Fix: "JetStream cannot change a stream's storage type; start with the storage it has, " +
				"or back up and delete the " + w.kind() + " to recreate it",
		}
	}
	next := w.apply(cur)
	if cur.MaxAge != next.MaxAge {
		held, err := w.keptTTL(ctx, js)
		if err != nil {
			return 0, err
		}
		if held {
			kept = cur.MaxAge
			next.MaxAge, next.Duplicates, next.SubjectDeleteMarkerTTL = cur.MaxAge, cur.Duplicates, cur.SubjectDeleteMarkerTTL
		}
	}
	if reflect.DeepEqual(next, cur) {
		return kept, nil
	}
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return kept, fmt.Errorf("update %s %s (replicas %d → %d): %w%s%s", w.kind(), w.name, cur.Replicas, next.Replicas, err,
			replicasHint(err, w.sc.Replicas), storageHint(err, next))
	}
	return kept, nil
}

// keptTTL reports whether w's TTL must be kept as it is: the leases
// bucket's while its coordinator key holds a lease (a put, not a delete or
// expiry marker). The leader renews by the TTL it found when it took the
// lease; a shorter one set under it would expire its lease between two
// renewals, and a standby would take over while it still ran (issue 38).
// So a coordinator (or an installer) starting beside a leader keeps the
// TTL, and the leader lease in force, until no coordinator leads.
func (w want) keptTTL(ctx context.Context, js jetstream.JetStream) (bool, error) {
	if w.name != contract.BucketLeases {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(cctx, w.name)
	if err == nil {
		_, err = kv.Get(cctx, contract.LeaseCoordinator)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = nats.ErrTimeout
		}
		return false, fmt.Errorf("bucket %s: read the lease %s to tell whether its TTL may change: %w", w.name, contract.LeaseCoordinator, err)
	}
	return true, nil
}

// create creates the bucket or stream; another instance of the manager
// creating it first is fine.
func (w want) create(ctx context.Context, js jetstream.JetStream) error {
	// A cluster that is still forming (servers started together, as by
	// compose or `sluice dev --nats-cluster 3`) refuses an R3 placement
	// until enough peers have joined: wait for them, within formingWait.
	forming := time.Now().Add(formingWait)
	for n := 0; ; n++ {
		err := w.createOnce(ctx, js)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoSuitablePeers || time.Now().After(forming) {
			return err
		}
		if backoff.Sleep(ctx, formingRetry.Delay(n), nil) != nil {
			return err
		}
	}
}

// formingWait bounds the wait for a forming cluster's peers.
const formingWait = 30 * time.Second

// formingRetry: 50 ms to 1 s: peers join and assignments apply within a second or two, all within formingWait.
var formingRetry = backoff.Policy{Base: 50 * time.Millisecond, Cap: time.Second}

// errCodeNoSuitablePeers: "no suitable peers for placement".
const errCodeNoSuitablePeers jetstream.ErrorCode = 10005

func (w want) createOnce(ctx context.Context, js jetstream.JetStream) error {
	var err error
	if w.kv != nil {
		// CreateKeyValue cannot set AllowAtomicPublish; manage's update
		// right after sets it before any batch can be written.
		_, err = js.CreateKeyValue(ctx, *w.kv)
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil
		}
	} else {
		_, err = js.CreateStream(ctx, w.sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("create %s %s with %d replicas: %w%s%s", w.kind(), w.name, w.sc.Replicas, err,
			replicasHint(err, w.sc.Replicas), storageHint(err, w.sc))
	}
	return nil
}

// errCodeReplicasNotSupported: "replicas > 1 not supported in non-clustered mode".
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// replicasHint explains the server's refusal of replicas on a single server.
func replicasHint(err error, replicas int) string {
	var apiErr *jetstream.APIError
	if replicas > 1 && errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported {
		return fmt.Sprintf(": the NATS server is not clustered; use --replicas 1 with a single server, or a cluster of at least %d servers", replicas)
	}
	return ""
}

// Errors of a server that cannot reserve a stream's byte limit.
const (
	errCodeStorageExceeded jetstream.ErrorCode = 10047 // "insufficient storage resources available"
	errCodeMemoryExceeded  jetstream.ErrorCode = 10028 // "insufficient memory resources available"
)

// storageHint explains the server's refusal to reserve a stream's byte
// limit: JetStream reserves MaxBytes on every server holding a replica.
func storageHint(err error, sc jetstream.StreamConfig) string {
	var apiErr *jetstream.APIError
	if sc.MaxBytes <= 0 || !errors.As(err, &apiErr) || (apiErr.ErrorCode != errCodeStorageExceeded && apiErr.ErrorCode != errCodeMemoryExceeded) {
		return ""
	}
	return fmt.Sprintf(": JetStream reserves the stream's byte limit (%d MiB) in the storage of every server that holds a replica; "+
		"give the NATS servers more JetStream storage (jetstream.max_file_store, or a larger volume)", sc.MaxBytes>>20)
}

// verify checks what a binding component relies on: at least the replicas
// and the durability of storage it was started with. (The nodes TTL is not
// checked: an agent takes it as it finds it, Buckets.NodeLease.) (Atomic publish, where the
// coordinator fences writes, is waited for: see waitFor.)
func (w want) verify(cur jetstream.StreamConfig, component string) error {
	mismatch := func(setting, found, want, fix string) error {
		return &MismatchError{Kind: w.kind(), Name: w.name, Setting: setting, Found: found, Want: want,
			Component: component, Manager: contract.Manager(w.name), Fix: fix}
	}
	mgr := contract.Manager(w.name)
	if cur.Replicas < w.sc.Replicas {
		return mismatch("replicas", fmt.Sprint(cur.Replicas), fmt.Sprintf("at least %d", w.sc.Replicas),
			fmt.Sprintf("start %s with --replicas %d so that it scales the %s up, or start %s with --replicas %d",
				mgr, w.sc.Replicas, w.kind(), component, cur.Replicas))
	}
	if w.sc.Storage == jetstream.FileStorage && cur.Storage != jetstream.FileStorage {
		return mismatch("storage", cur.Storage.String(), w.sc.Storage.String(),
			"the "+w.kind()+" keeps nothing across a server restart; recreate it with file storage")
	}
	return nil
}

// retry: minBackoff to maxDelay (250 ms to 5 s by default): JetStream starting or electing leaders answers within seconds.
func (c openConfig) retry() *backoff.Backoff {
	return backoff.New(backoff.Policy{Base: c.minBackoff, Cap: c.maxDelay})
}

func newOpenConfig(opts []OpenOption) openConfig {
	c := openConfig{log: zerolog.Nop(), minBackoff: 250 * time.Millisecond, maxDelay: 5 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// manage manages w, retrying while JetStream is not ready (a cluster
// electing its leaders after a restart), and logs a TTL it kept.
func (c openConfig) manage(ctx context.Context, js jetstream.JetStream, w want, component string) error {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		kept, err := w.manage(ctx, js, component)
		if err == nil && kept != 0 {
			c.log.Info().Str("bucket", w.name).Dur("ttl", kept).Dur("wanted", w.sc.MaxAge).
				Str("reason", "a coordinator holds the lease").
				Msgf("keeping the leader lease %s, the TTL of %s: a coordinator holds the lease and renews by it; "+
					"--leader-lease %s is not used until a %s starts while no coordinator leads",
					kept, w.name, w.sc.MaxAge, contract.Manager(w.name))
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		delay := retry.Next()
		c.log.Info().Str(w.kind(), w.name).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for JetStream to manage %s %s", w.kind(), w.name)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
		}
	}
}

// waitFor returns the stream config of w, waiting with backoff while it is
// missing (its manager has not created it yet) or JetStream is not ready.
func (c openConfig) waitFor(ctx context.Context, js jetstream.JetStream, w want, component string) (jetstream.StreamConfig, error) {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cfg, err := streamConfig(ctx, js, w.stream())
		// Between creating a bucket and enabling atomic publish on it
		// (CreateKeyValue cannot), its manager leaves a moment in which the
		// bucket exists without it: wait for the update, as for the bucket.
		// A manager of an older version never makes it: the log says so.
		upgrading := err == nil && w.sc.AllowAtomicPublish && !cfg.AllowAtomicPublish
		if err == nil && !upgrading {
			return cfg, nil
		}
		if upgrading {
			if err := w.verify(cfg, component); err != nil {
				return cfg, err // a mismatch no waiting mends
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !transient(err) {
			return cfg, fmt.Errorf("bind %s %s: %w", w.kind(), w.name, err)
		}
		delay := retry.Next()
		ev := c.log.Info().Str(w.kind(), w.name).Str("manager", contract.Manager(w.name)).Int("attempt", attempt).Dur("retry_in", delay)
		switch {
		case upgrading:
			ev.Msgf("waiting for bucket %s to allow atomic publish, enabled by %s (start a %s of this version)",
				w.name, contract.Manager(w.name), contract.Manager(w.name))
		case errors.Is(err, jetstream.ErrStreamNotFound):
			ev.Msgf("waiting for %s %s, created by %s", w.kind(), w.name, contract.Manager(w.name))
		default:
			ev.Err(err).Msgf("waiting for %s %s: JetStream not ready", w.kind(), w.name)
		}
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return cfg, fmt.Errorf("waiting for %s %s, created by %s: %w", w.kind(), w.name, contract.Manager(w.name), err)
		}
	}
}

// bind opens the KV handle of w, retrying with backoff while JetStream
// does not answer in time (a server of the cluster just stopped, leaders
// being elected): a component starting then waits, it does not fail (chaos
// seed 186: an agent stopped by itself at "open bucket sluice-control:
// context deadline exceeded").
func (c openConfig) bind(ctx context.Context, js jetstream.JetStream, w want) (jetstream.KeyValue, error) {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(cctx, w.name)
		cancel()
		if err == nil {
			return kv, nil
		}
		if ctx.Err() != nil || !transient(err) {
			return nil, fmt.Errorf("open bucket %s: %w", w.name, err)
		}
		delay := retry.Next()
		c.log.Info().Str("bucket", w.name).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for bucket %s: JetStream not answering", w.name)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", w.name, err)
		}
	}
}

// transient errors pass once the cluster has elected its leaders.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503)
}

// LeaderLease reads the leader lease in force: the leases bucket's TTL,
// which its manager (the rollout-coordinator, --leader-lease) sets while no
// lease is held.
func LeaderLease(ctx context.Context, kv jetstream.KeyValue) (time.Duration, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the leader lease (bucket %s): %w", contract.BucketLeases, err)
	}
	return st.TTL(), nil
}

// NodeLease reads the node lease in force: the nodes bucket's TTL, which its
// manager (the rollout-coordinator, --node-lease) sets.
func NodeLease(ctx context.Context, js jetstream.JetStream) (time.Duration, error) {
	cfg, err := streamConfig(ctx, js, contract.StreamOfBucket(contract.BucketNodes))
	if err != nil {
		return 0, fmt.Errorf("read the node lease (bucket %s): %w", contract.BucketNodes, err)
	}
	return cfg.MaxAge, nil
}

// streamConfig reads a stream's config with a per-call timeout, so that a
// cluster still electing a leader is retried rather than waited on forever.
func streamConfig(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamConfig, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(cctx, name)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return jetstream.StreamConfig{}, fmt.Errorf("stream %s: %w", name, nats.ErrTimeout)
		}
		return jetstream.StreamConfig{}, err
	}
	return st.CachedInfo().Config, nil
}

// Set holds a handle of every sluice bucket. A component that does not
// use a bucket (see Open) has nil there.
type Set struct {
	Intents, Revisions, NodeConfigs, Fingerprints, Status, Nodes, Rollouts, Leases, Control, Instances, Registries jetstream.KeyValue
	// NodeLease is the nodes bucket's TTL as Prepare found it: the node
	// lease in force, set by the bucket's manager (the rollout-coordinator's
	// --node-lease). Agents time their heartbeats by it. Zero when the nodes
	// bucket was not bound through Prepare.
	NodeLease time.Duration
	// LeaderLease is the leases bucket's TTL as Prepare found it: the
	// leader lease in force, which a leader renews by. Its manager sets it
	// to its --leader-lease only while no coordinator holds a lease (see
	// Prepare). Zero when the leases bucket was not bound through Prepare.
	LeaderLease time.Duration
}

// GetNodeLease is b.NodeLease, zero for a nil b.
func (b *Set) GetNodeLease() time.Duration {
	if b == nil {
		return 0
	}
	return b.NodeLease
}

// BindAll binds every sluice bucket without verifying its settings; they
// must exist (see Ensure). Services use Open, which verifies.
func BindAll(ctx context.Context, js jetstream.KeyValueManager) (*Set, error) {
	b := &Set{}
	for _, name := range contract.AllBuckets() {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", name, err)
		}
		*b.field(name) = kv
	}
	return b, nil
}

// field returns where b keeps the handle of bucket name.
func (b *Set) field(name string) *jetstream.KeyValue {
	switch name {
	case contract.BucketIntents:
		return &b.Intents
	case contract.BucketRevisions:
		return &b.Revisions
	case contract.BucketNodeConfigs:
		return &b.NodeConfigs
	case contract.BucketFingerprints:
		return &b.Fingerprints
	case contract.BucketStatus:
		return &b.Status
	case contract.BucketNodes:
		return &b.Nodes
	case contract.BucketRollouts:
		return &b.Rollouts
	case contract.BucketLeases:
		return &b.Leases
	case contract.BucketControl:
		return &b.Control
	case contract.BucketInstances:
		return &b.Instances
	case contract.BucketRegistries:
		return &b.Registries
	}
	panic("contract: unknown bucket " + name)
}
