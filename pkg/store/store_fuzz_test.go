package store

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// stored is one value the services keep in a bucket and read back through
// a Store (store.New(bucket, newT)), with the key it is stored under: every
// value is checked against its key's rule (pkg/contract/wellformed), so a
// value decoded under a key that holds another type would be refused before
// the decoder's round trip is ever tried.
type stored struct {
	bucket, key string
	v           proto.Message
}

// newT returns an empty value of s's type, as the reading Store's newT does.
func (s stored) newT() proto.Message { return s.v.ProtoReflect().New().Interface() }

func (s stored) String() string {
	return fmt.Sprintf("%s %s/%s", s.v.ProtoReflect().Descriptor().FullName(), s.bucket, s.key)
}

// FuzzStoredValue decodes arbitrary bytes as every stored value type under
// a key that holds it, the way Get, List and Watch do. Decoding never
// panics; a value that does not decode or is not well-formed for its key is
// ErrUndecodable naming bucket and key, with the entry's key and revision
// kept (its owner overwrites it with compare-and-set); a value that decodes
// encodes again and decodes to an equal message.
func FuzzStoredValue(f *testing.F) {
	seeds := storedSeeds(f)
	for _, s := range seeds {
		b, err := Marshal(s.v)
		if err != nil {
			f.Fatalf("seed %s: %v", s, err)
		}
		f.Add(b)
	}
	for _, garbage := range []string{"", "{not json", "{}", "null", "[]", `{"intents": 5}`, `{"createdAt": "yesterday"}`,
		`{"node": "n1", "phase": "NODE_PHASE_PROVISIONED"}`, // a NodeStatus: a value of another type, for the others
		`{"holder":"x","epoch":"5"}`,                        // a fence: likewise
	} {
		f.Add([]byte(garbage))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range seeds {
			s := &Store[proto.Message]{kv: bucketOnly{name: typ.bucket}, newT: typ.newT}
			e, err := s.decode(entry{key: typ.key, value: data, revision: 7})
			if e.Key != typ.key || e.Revision != 7 {
				t.Fatalf("%s: entry lost its key or revision: %+v", typ, e)
			}
			if err != nil {
				if !errors.Is(err, ErrUndecodable) || !strings.Contains(err.Error(), typ.bucket+"/"+typ.key) {
					t.Fatalf("%s: error %q is not ErrUndecodable naming %s/%s", typ, err, typ.bucket, typ.key)
				}
				if e.Value != nil {
					t.Fatalf("%s: undecodable value came back as %v", typ, e.Value)
				}
				continue
			}
			b, err := Marshal(e.Value)
			if err != nil {
				t.Fatalf("%s: %q decoded to %v, which does not encode: %v", typ, data, e.Value, err)
			}
			again, err := s.decode(entry{key: typ.key, value: b, revision: 8})
			if err != nil {
				t.Fatalf("%s: re-encoded %q does not decode: %v", typ, b, err)
			}
			if !proto.Equal(e.Value, again.Value) {
				t.Fatalf("%s: round trip changed the value:\n  %v\n  %v", typ, e.Value, again.Value)
			}
		}
	})
}

// Every seed is well-formed under its key: otherwise the fuzz target's
// round trip would never run for its type (and the seeds would not be what
// the services write).
func TestStoredSeeds_AreWellFormedUnderTheirKeys(t *testing.T) {
	for _, s := range storedSeeds(t) {
		b, err := Marshal(s.v)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		st := &Store[proto.Message]{kv: bucketOnly{name: s.bucket}, newT: s.newT}
		if _, err := st.decode(entry{key: s.key, value: b, revision: 1}); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// storedSeeds are realistic values of every stored type (the readers:
// grep store.New; pkg/contract's bucket comments), each under the key it is
// stored at, built from the repository's examples as the services would
// write them, and the events stream's Event, which the CLI decodes the same
// way.
func storedSeeds(tb testing.TB) []stored {
	ins, err := intent.ParseFiles("../../examples")
	if err != nil {
		tb.Fatal(err)
	}
	render.Sort(ins)
	at := timestamppb.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	rev := &sluicev1.Revision{Id: render.RevisionID(ins), Intents: ins, CreatedAt: at}
	labels := map[string]string{"zone": "zone-a", "rack": "r1"}
	cfg := render.NodeConfig(rev, labels)
	fp := render.Fingerprint(cfg)
	rolloutID := contract.RolloutID(3, rev.GetId())
	strategy := &sluicev1.Strategy{MaxParallel: "10%", FirstWave: 1, WaveGrowth: 2.5, BakeTime: durationpb.New(time.Minute),
		FailureDomain: "zone", FailureBudget: "1", ApplyDeadline: durationpb.New(5 * time.Minute), WhileActive: contract.WhileActiveSupersede}
	ack := &sluicev1.PauseAck{Generation: 2, Paused: true, At: at, WaitingFor: "2 nodes", Seen: 2}
	pause := &sluicev1.PauseRequest{Paused: true, Generation: 2, Reason: "maintenance", By: "ops@host", At: at, Joiners: "last-good", Rollout: rolloutID}
	outcome := &sluicev1.NodeOutcome{Node: "node-02", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Fingerprint: fp,
		FailedCheck: "ping", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, Output: "100% packet loss\n"}
	return []stored{
		{contract.BucketIntents, intent.Key(ins[0]), &sluicev1.StoredIntent{Intent: ins[0], Source: contract.SourceAPI, UpdatedAt: at, Origin: "tenant-a.yaml"}},
		{contract.BucketRevisions, rev.GetId(), rev},
		{contract.BucketRevisions, contract.KeyHead, &sluicev1.Head{Revision: rev.GetId(), Generation: 3, Strategy: strategy, UpdatedAt: at, Reason: "applied 7 intents", RequestId: "req-1"}},
		{contract.BucketRevisions, contract.KeyPending, &sluicev1.ApplyJournal{Intents: ins[:2], Strategy: strategy, Source: contract.SourceAPI, HasPrior: true, RequestId: "req-1",
			Prior: []*sluicev1.PriorIntent{{Key: intent.Key(ins[0]), KvRevision: 4, Value: &sluicev1.StoredIntent{Intent: ins[0]}}, {Key: intent.Key(ins[1])}}}},
		{contract.BucketNodeConfigs, contract.DesiredKey("node-01"), &sluicev1.DesiredConfig{Node: "node-01", Revision: rev.GetId(), Rollout: rolloutID, Fingerprint: fp, Config: cfg, WrittenAt: at,
			LeaderEpoch: 12, Operation: "op-1", Deadline: durationpb.New(90 * time.Second)}},
		{contract.BucketNodeConfigs, contract.KeyFence, &sluicev1.Fence{Epoch: 12, Holder: "coordinator-a", At: at}},
		{contract.BucketFingerprints, fp, &sluicev1.InvalidFingerprint{Fingerprint: fp, Revision: rev.GetId(), Rollout: rolloutID, Node: "node-02", Check: "ping",
			Output: "timeout", Time: at, Cause: "check", LeaderEpoch: 12, Forgiven: &sluicev1.Forgiveness{By: "ops@host", Reason: "fixed", At: at}}},
		{contract.BucketStatus, "node-01", &sluicev1.NodeStatus{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: rev.GetId(), Rollout: rolloutID,
			Fingerprint: fp, ApplyStartedAt: at, LastUpdate: at, Message: "applied", AppliedFingerprint: fp,
			LastInvalid: &sluicev1.InvalidReport{Fingerprint: fp, Check: "ping", At: at, Revert: true}, Operation: "op-1", Progress: "3/7", NodeLabels: labels}},
		{contract.BucketNodes, "node-01", &sluicev1.NodePresence{Node: "node-01", Labels: labels, AgentVersion: "v1.2.3", StartedAt: at, HeartbeatAt: at, Pause: ack}},
		{contract.BucketRollouts, rolloutID, &sluicev1.Rollout{Id: rolloutID, Revision: rev.GetId(), Generation: 3, Strategy: strategy, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED,
			Reason: "1 node failed", StartedAt: at, UpdatedAt: at, FinishedAt: at, LeaderEpoch: 12, Wave: 2, Domain: "zone-a",
			Counts:   &sluicev1.RolloutCounts{Total: 5, Provisioned: 4, Failed: 1, Attempted: 5},
			Failures: []*sluicev1.NodeOutcome{outcome}, LeaderTime: durationpb.New(time.Hour), Reverted: []string{"node-03"},
			AbortedBy: &sluicev1.AbortRequest{Rollout: rolloutID, Reason: "stop", By: "ops@host", At: at}, Pause: pause, PauseAck: ack,
			Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at, EndedAt: at, Nodes: 1, Provisioned: 1}}}},
		{contract.BucketRollouts, contract.KeyActive, &sluicev1.RolloutRef{Rollout: rolloutID, Revision: rev.GetId(), Generation: 3, At: at, LeaderEpoch: 12}},
		{contract.BucketLeases, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "coordinator-a", Session: "s1", AcquiredAt: at, RenewedAt: at, Epoch: 12}},
		{contract.BucketControl, contract.AbortKey(rolloutID), &sluicev1.AbortRequest{Rollout: rolloutID, NoRevert: true, Reason: "stop", By: "ops@host", At: at}},
		{contract.BucketControl, contract.ForgiveKey(fp), &sluicev1.ForgiveRequest{Fingerprint: fp, Reason: "fixed", By: "ops@host", At: at, RecordedAt: at}},
		{contract.BucketControl, contract.RolloutPauseKey(rolloutID), pause},
		{contract.BucketControl, contract.KeyReapConfirm, &sluicev1.ReapConfirm{Nodes: []string{"node-04"}, By: "ops@host", At: at, Reason: "decommissioned"}},
		{contract.BucketControl, contract.RegistryKey("gitops"), &sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: "/srv/intents"}},
			SyncInterval: durationpb.New(30 * time.Second), HoldShare: 0.25, By: "ops@host", At: at}},
		{contract.BucketControl, contract.RegistryKey("redis"), &sluicev1.RegistrySpec{Name: "redis", Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: "rediss://r:6380/0", Prefix: "x:"}},
			HoldShare: math.Inf(1)}},
		{contract.BucketControl, contract.RegistryConfirmKey("gitops"), &sluicev1.RegistryConfirm{Digest: "abc", By: "ops@host", At: at, Reason: "yes"}},
		{contract.BucketInstances, contract.InstanceKey("configurator", "c-1"), &sluicev1.Instance{Component: "configurator", Instance: "c-1", Host: "h", Version: "v1", StartedAt: at, HeartbeatAt: at, Role: "leader", Pause: ack}},
		{contract.BucketRegistries, "gitops", &sluicev1.RegistryStatus{Name: "gitops", Kind: "directory", Location: "/srv/intents", State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
			LastSync: at, Attempts: 2, Intents: 7, Version: "d1", Invalid: []*sluicev1.FieldError{{Intent: "layer2network/a", Field: "spec.vlan", Rule: "5000 is outside 1-4094"}},
			Conflicts: []*sluicev1.RegistryConflict{{Intent: "routingtable/t", Owner: "api"}},
			Held:      &sluicev1.HeldDeletion{Intents: []string{"routingtable/t"}, Digest: "abc", Reason: "half", Since: at}, UpdatedAt: at}},
		{contract.StreamEvents, "7", &sluicev1.Event{Kind: contract.KindRollout, Id: rolloutID, Type: "RolloutStarted", Reason: "head moved", Time: at, Rollout: rolloutID}},
	}
}

// bucketOnly is the part of a KeyValue decode uses: its name, for errors.
type bucketOnly struct {
	jetstream.KeyValue
	name string
}

func (b bucketOnly) Bucket() string { return b.name }

// entry is a stored value as a watcher or a Get delivers it.
type entry struct {
	key      string
	value    []byte
	revision uint64
}

func (e entry) Bucket() string                  { return "" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.revision }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
