package contract

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Settings are the durability and lease settings every bucket and stream is
// created with. They live here so that two services never disagree about them.
type Settings struct {
	// Replicas per bucket and stream: 1 for a single server, 3 across failure domains in production.
	Replicas int
	// Memory stores everything in memory (benchmarks only): nothing survives a restart.
	Memory bool
	// NodeLease is how long a node's presence lives without a heartbeat.
	NodeLease time.Duration
	// LeaderLease is how long a leader keeps its lease without renewing it.
	LeaderLease time.Duration
	// EventsMaxAge is how long the events stream keeps events.
	EventsMaxAge time.Duration
}

// DefaultSettings are the settings of a single-server installation.
func DefaultSettings() Settings {
	return Settings{
		Replicas:     1,
		NodeLease:    15 * time.Second,
		LeaderLease:  10 * time.Second,
		EventsMaxAge: 7 * 24 * time.Hour,
	}
}

// HeartbeatInterval is how often an agent renews its presence: a third of the lease.
func (s Settings) HeartbeatInterval() time.Duration { return s.NodeLease / 3 }

// RenewInterval is how often a leader renews its lease: a third of the lease.
func (s Settings) RenewInterval() time.Duration { return s.LeaderLease / 3 }

func (s Settings) storage() jetstream.StorageType {
	if s.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

func (s Settings) replicas() int {
	if s.Replicas < 1 {
		return 1
	}
	return s.Replicas
}

// BucketConfigs returns the configuration of every sluice bucket.
func (s Settings) BucketConfigs() []jetstream.KeyValueConfig {
	kv := func(name, desc string) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{
			Bucket: name, Description: desc, History: 1,
			Storage: s.storage(), Replicas: s.replicas(),
		}
	}
	intents := kv(BucketIntents, "sluice intents by <kind>.<name>; written by the configurator")
	revisions := kv(BucketRevisions, "sluice revisions by id, and head; written by the configurator")
	nodeconfigs := kv(BucketNodeConfigs, "desired and backup config per node; written by the rollout-coordinator")
	nodeconfigs.RePublish = &jetstream.RePublish{
		Source:      "$KV." + BucketNodeConfigs + ".>",
		Destination: NodeConfigSubjectPrefix + ".>",
	}
	fingerprints := kv(BucketFingerprints, "invalid config fingerprints and why; written by the rollout-coordinator")
	status := kv(BucketStatus, "node status by node; written by that node's agent")
	nodes := kv(BucketNodes, "node presence leases; written by each node's agent")
	nodes.TTL = s.NodeLease
	// Markers make an expired lease visible to watchers as a delete.
	nodes.LimitMarkerTTL = max(s.NodeLease, time.Second) // the server's minimum
	rollouts := kv(BucketRollouts, "rollouts, active and last-applied; written by the rollout-coordinator")
	leases := kv(BucketLeases, "leader leases by component")
	leases.TTL = s.LeaderLease
	leases.LimitMarkerTTL = max(s.LeaderLease, time.Second) // the server's minimum
	return []jetstream.KeyValueConfig{intents, revisions, nodeconfigs, fingerprints, status, nodes, rollouts, leases}
}

// EventsStreamConfig is the configuration of the events stream.
func (s Settings) EventsStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "every sluice state transition with its reason",
		Subjects:    []string{EventsSubjectPrefix + ".>"},
		Storage:     s.storage(),
		Replicas:    s.replicas(),
		MaxAge:      s.EventsMaxAge,
		Discard:     jetstream.DiscardOld,
	}
}

// Ensure creates or updates every bucket and the events stream. It is
// idempotent and every service calls it at start.
func Ensure(ctx context.Context, js jetstream.JetStream, s Settings) error {
	for _, cfg := range s.BucketConfigs() {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, s.EventsStreamConfig()); err != nil {
		return fmt.Errorf("ensure stream %s: %w", StreamEvents, err)
	}
	return nil
}

// Buckets opens every sluice bucket after Ensure.
type Buckets struct {
	Intents, Revisions, NodeConfigs, Fingerprints, Status, Nodes, Rollouts, Leases jetstream.KeyValue
}

// OpenBuckets opens every sluice bucket; they must exist (see Ensure).
func OpenBuckets(ctx context.Context, js jetstream.KeyValueManager) (*Buckets, error) {
	b := &Buckets{}
	for _, x := range []struct {
		name string
		dst  *jetstream.KeyValue
	}{
		{BucketIntents, &b.Intents}, {BucketRevisions, &b.Revisions}, {BucketNodeConfigs, &b.NodeConfigs},
		{BucketFingerprints, &b.Fingerprints}, {BucketStatus, &b.Status}, {BucketNodes, &b.Nodes},
		{BucketRollouts, &b.Rollouts}, {BucketLeases, &b.Leases},
	} {
		kv, err := js.KeyValue(ctx, x.name)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", x.name, err)
		}
		*x.dst = kv
	}
	return b, nil
}

// Open makes a JetStream context on nc, ensures every bucket and the events
// stream with settings s, and opens the buckets: what a service does first.
func Open(ctx context.Context, nc *nats.Conn, s Settings) (jetstream.JetStream, *Buckets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := Ensure(ctx, js, s); err != nil {
		return nil, nil, err
	}
	b, err := OpenBuckets(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	return js, b, nil
}
