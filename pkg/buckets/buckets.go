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
//
// Files: buckets.go (the entry points, their options and Set), want.go
// (each bucket's wanted stream config, and what a binder verifies),
// manage.go (what a manager does: create, update, keep the lease TTL, stamp
// the store identity) and bind.go (waiting for and binding the buckets
// another component manages).
package buckets

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
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
