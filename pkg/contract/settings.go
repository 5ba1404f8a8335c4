package contract

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Settings are the durability and lease settings every bucket and stream is
// created with. They live here so that two services never disagree about them.
type Settings struct {
	// Replicas per bucket and stream: 1 for a single server, 3 across failure domains in production.
	Replicas int
	// Memory stores everything in memory (benchmarks only): nothing survives a restart.
	Memory bool
	// NodeLease is how long a node's presence lives without a heartbeat;
	// its agent beats every third of it (HeartbeatInterval).
	NodeLease time.Duration
	// InstanceLease is how long a service instance's presence (and the
	// pause acknowledgement it carries) lives without a renewal.
	InstanceLease time.Duration
	// LeaderLease is how long a leader keeps its lease without renewing it.
	LeaderLease time.Duration
	// EventsMaxAge is how long the events stream keeps events.
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the events stream: beyond it the oldest events
	// are dropped first; -1 keeps everything EventsMaxAge allows. JetStream
	// reserves the limit in every server's storage that holds a replica.
	EventsMaxBytes int64
}

// Limits of Settings (see Validate).
const (
	// MaxReplicas is JetStream's limit on replicas per stream.
	MaxReplicas = 5
	// MinLease is the shortest node or instance lease: a bucket's TTL
	// cannot be shorter than the server's one-second marker TTL minimum.
	MinLease = time.Second
	// MinLeaderLease is the shortest leader lease: the same minimum, for
	// the leases bucket.
	MinLeaderLease = MinLease
	// MinEventsMaxBytes is the smallest byte limit of the events stream.
	MinEventsMaxBytes = 1 << 20
	// DefaultEventsMaxBytes is the events stream's default byte limit: 1 GiB.
	DefaultEventsMaxBytes = 1 << 30
	// DefaultLeaderLease is 2 s, renewed every 500 ms: a leader killed
	// outright is replaced within about 2.5 s, and a leader whose process
	// stalls for 1 s (or whose renewal is answered 1 s late) keeps its
	// lease (docs/architecture.md, "The leader lease").
	DefaultLeaderLease = 2 * time.Second
	// DefaultNodeLease is three minutes, a heartbeat a minute: 16.7 presence
	// writes/s per 1,000 nodes, 1,667/s at 100,000 (docs/architecture.md,
	// "Heartbeats"). A node that dies is noticed (and skipped by a rollout)
	// within it.
	DefaultNodeLease = 3 * time.Minute
	// DefaultInstanceLease is short: service instances are few, and a pause
	// waits for every live instance's acknowledgement, so a dead instance
	// must drop out of "live" quickly.
	DefaultInstanceLease = 15 * time.Second
)

// DefaultSettings are the settings of a single-server installation.
func DefaultSettings() Settings {
	return Settings{
		Replicas:       1,
		NodeLease:      DefaultNodeLease,
		InstanceLease:  DefaultInstanceLease,
		LeaderLease:    DefaultLeaderLease,
		EventsMaxAge:   7 * 24 * time.Hour,
		EventsMaxBytes: DefaultEventsMaxBytes,
	}
}

// Validate reports settings no bucket can be made with, naming the flag
// that sets each (--replicas, --leader-lease, --node-lease).
func (s Settings) Validate() error {
	var errs []error
	if s.Replicas < 1 || s.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("--replicas %d: want 1 to %d (1 for a single server, 3 for a cluster across failure domains)", s.Replicas, MaxReplicas))
	}
	if s.LeaderLease < MinLeaderLease {
		errs = append(errs, fmt.Errorf("--leader-lease %s: want at least %s", s.LeaderLease, MinLeaderLease))
	}
	if s.NodeLease < MinLease {
		errs = append(errs, fmt.Errorf("--node-lease %s: want at least %s", s.NodeLease, MinLease))
	}
	if s.InstanceLease < MinLease {
		errs = append(errs, fmt.Errorf("instance lease %s: want at least %s", s.InstanceLease, MinLease))
	}
	if s.EventsMaxBytes != -1 && s.EventsMaxBytes < MinEventsMaxBytes {
		errs = append(errs, fmt.Errorf("events stream max bytes %d: want at least %d (1 MiB), or -1 for no limit", s.EventsMaxBytes, MinEventsMaxBytes))
	}
	return errors.Join(errs...)
}

// HeartbeatInterval is how often an agent renews its presence: a third of the lease.
func (s Settings) HeartbeatInterval() time.Duration { return s.NodeLease / 3 }

// InstanceInterval is how often a service instance renews its presence: a
// third of the instance lease.
func (s Settings) InstanceInterval() time.Duration { return s.InstanceLease / 3 }

// RenewInterval is how often a leader renews its lease: a quarter of the
// lease, so that a renewal held up by a whole second (a stalled process, a
// slow answer) still lands with half a second to spare at the default.
func (s Settings) RenewInterval() time.Duration { return s.LeaderLease / 4 }

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
	nodes.LimitMarkerTTL = max(s.NodeLease, MinLease)
	rollouts := kv(BucketRollouts, "rollouts, active and last-applied; written by the rollout-coordinator")
	leases := kv(BucketLeases, "leader leases by component")
	leases.TTL = s.LeaderLease
	leases.LimitMarkerTTL = max(s.LeaderLease, MinLease)
	control := kv(BucketControl, "operator requests (abort, forgive, pause); written by operators, acted on by the rollout-coordinator and every instance")
	control.RePublish = &jetstream.RePublish{
		Source:      "$KV." + BucketControl + "." + KeyPause,
		Destination: SubjectPause,
	}
	instances := kv(BucketInstances, "service instance presence and pause acknowledgements; written by each instance")
	instances.TTL = s.InstanceLease
	instances.LimitMarkerTTL = max(s.InstanceLease, MinLease)
	registries := kv(BucketRegistries, "registry sync status by registry; written by the configurator")
	return []jetstream.KeyValueConfig{intents, revisions, nodeconfigs, fingerprints, status, nodes, rollouts, leases, control, instances, registries}
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
		MaxBytes:    s.eventsMaxBytes(),
		Discard:     jetstream.DiscardOld,
	}
}

// eventsMaxBytes is EventsMaxBytes as JetStream takes it: -1 for no limit
// (also for settings made without DefaultSettings, which leave it 0).
func (s Settings) eventsMaxBytes() int64 {
	if s.EventsMaxBytes <= 0 {
		return -1
	}
	return s.EventsMaxBytes
}
