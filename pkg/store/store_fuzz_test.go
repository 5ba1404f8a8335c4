package store

import (
	"errors"
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

// storedType is one type of value the services keep in a bucket and read
// back through a Store (store.New(bucket, newT)).
type storedType struct {
	bucket string
	newT   func() proto.Message
}

// storedTypes are every value type a service reads from KV, by the bucket
// that holds it (pkg/contract's bucket comments; grep store.New for the
// readers), and the events stream's Event, which the CLI decodes the same way.
var storedTypes = []storedType{
	{contract.BucketIntents, func() proto.Message { return &sluicev1.StoredIntent{} }},
	{contract.BucketRevisions, func() proto.Message { return &sluicev1.Revision{} }},
	{contract.BucketRevisions, func() proto.Message { return &sluicev1.Head{} }},
	{contract.BucketRevisions, func() proto.Message { return &sluicev1.ApplyJournal{} }},
	{contract.BucketNodeConfigs, func() proto.Message { return &sluicev1.DesiredConfig{} }},
	{contract.BucketNodeConfigs, func() proto.Message { return &sluicev1.Fence{} }},
	{contract.BucketFingerprints, func() proto.Message { return &sluicev1.InvalidFingerprint{} }},
	{contract.BucketStatus, func() proto.Message { return &sluicev1.NodeStatus{} }},
	{contract.BucketNodes, func() proto.Message { return &sluicev1.NodePresence{} }},
	{contract.BucketRollouts, func() proto.Message { return &sluicev1.Rollout{} }},
	{contract.BucketRollouts, func() proto.Message { return &sluicev1.RolloutRef{} }},
	{contract.BucketLeases, func() proto.Message { return &sluicev1.LeaderLease{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.AbortRequest{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.ForgiveRequest{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.PauseRequest{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.ReapConfirm{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.RegistrySpec{} }},
	{contract.BucketControl, func() proto.Message { return &sluicev1.RegistryConfirm{} }},
	{contract.BucketInstances, func() proto.Message { return &sluicev1.Instance{} }},
	{contract.BucketRegistries, func() proto.Message { return &sluicev1.RegistryStatus{} }},
	{contract.StreamEvents, func() proto.Message { return &sluicev1.Event{} }},
}

// FuzzStoredValue decodes arbitrary bytes as every stored value type, the
// way Get, List and Watch do. Decoding never panics; a value that does not
// decode is ErrUndecodable naming bucket and key, with the entry's key and
// revision kept (its owner overwrites it with compare-and-set); a value that
// decodes encodes again and decodes to an equal message.
func FuzzStoredValue(f *testing.F) {
	for _, v := range storedSeeds(f) {
		b, err := Marshal(v)
		if err != nil {
			f.Fatalf("seed %T: %v", v, err)
		}
		f.Add(b)
	}
	for _, garbage := range []string{"", "{not json", "{}", "null", "[]", `{"intents": 5}`, `{"createdAt": "yesterday"}`,
		`{"node": "n1", "phase": "NODE_PHASE_PROVISIONED"}`, // a NodeStatus: a value of another type, for the others
	} {
		f.Add([]byte(garbage))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range storedTypes {
			s := &Store[proto.Message]{kv: bucketOnly{name: typ.bucket}, newT: typ.newT}
			e, err := s.decode(entry{key: "k.1", value: data, revision: 7})
			if e.Key != "k.1" || e.Revision != 7 {
				t.Fatalf("%s: entry lost its key or revision: %+v", typeName(typ), e)
			}
			if err != nil {
				if !errors.Is(err, ErrUndecodable) || !strings.Contains(err.Error(), typ.bucket+"/k.1") {
					t.Fatalf("%s: error %q is not ErrUndecodable naming %s/k.1", typeName(typ), err, typ.bucket)
				}
				if e.Value != nil {
					t.Fatalf("%s: undecodable value came back as %v", typeName(typ), e.Value)
				}
				continue
			}
			b, err := Marshal(e.Value)
			if err != nil {
				t.Fatalf("%s: %q decoded to %v, which does not encode: %v", typeName(typ), data, e.Value, err)
			}
			again, err := s.decode(entry{key: "k.1", value: b, revision: 8})
			if err != nil {
				t.Fatalf("%s: re-encoded %q does not decode: %v", typeName(typ), b, err)
			}
			if !proto.Equal(e.Value, again.Value) {
				t.Fatalf("%s: round trip changed the value:\n  %v\n  %v", typeName(typ), e.Value, again.Value)
			}
		}
	})
}

func typeName(typ storedType) string {
	return string(typ.newT().ProtoReflect().Descriptor().FullName())
}

// storedSeeds are realistic values of every stored type, built from the
// repository's examples as the services would write them.
func storedSeeds(f *testing.F) []proto.Message {
	ins, err := intent.ParseFiles("../../examples")
	if err != nil {
		f.Fatal(err)
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
	pause := &sluicev1.PauseRequest{Paused: true, Generation: 2, Reason: "maintenance", By: "ops@host", At: at, Joiners: "hold", Rollout: rolloutID}
	outcome := &sluicev1.NodeOutcome{Node: "node-02", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Fingerprint: fp,
		FailedCheck: "ping", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, Output: "100% packet loss\n"}
	return []proto.Message{
		&sluicev1.StoredIntent{Intent: ins[0], Source: contract.SourceAPI, UpdatedAt: at, Origin: "tenant-a.yaml"},
		rev,
		&sluicev1.Head{Revision: rev.GetId(), Generation: 3, Strategy: strategy, UpdatedAt: at, Reason: "applied 7 intents", RequestId: "req-1"},
		&sluicev1.ApplyJournal{Intents: ins[:2], Strategy: strategy, Source: contract.SourceAPI, HasPrior: true, RequestId: "req-1",
			Prior: []*sluicev1.PriorIntent{{Key: intent.Key(ins[0]), KvRevision: 4, Value: &sluicev1.StoredIntent{Intent: ins[0]}}, {Key: intent.Key(ins[1])}}},
		&sluicev1.DesiredConfig{Node: "node-01", Revision: rev.GetId(), Rollout: rolloutID, Fingerprint: fp, Config: cfg, WrittenAt: at,
			LeaderEpoch: 12, Operation: "op-1", Deadline: durationpb.New(90 * time.Second)},
		&sluicev1.Fence{Epoch: 12, Holder: "coordinator-a", At: at},
		&sluicev1.InvalidFingerprint{Fingerprint: fp, Revision: rev.GetId(), Rollout: rolloutID, Node: "node-02", Check: "ping",
			Output: "timeout", Time: at, Cause: "check", LeaderEpoch: 12, Forgiven: &sluicev1.Forgiveness{By: "ops@host", Reason: "fixed", At: at}},
		&sluicev1.NodeStatus{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: rev.GetId(), Rollout: rolloutID,
			Fingerprint: fp, ApplyStartedAt: at, LastUpdate: at, Message: "applied", AppliedFingerprint: fp,
			LastInvalid: &sluicev1.InvalidReport{Fingerprint: fp, Check: "ping", At: at, Revert: true}, Operation: "op-1", Progress: "3/7"},
		&sluicev1.NodePresence{Node: "node-01", Labels: labels, AgentVersion: "v1.2.3", StartedAt: at, HeartbeatAt: at, Pause: ack},
		&sluicev1.Rollout{Id: rolloutID, Revision: rev.GetId(), Generation: 3, Strategy: strategy, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED,
			Reason: "1 node failed", StartedAt: at, UpdatedAt: at, FinishedAt: at, LeaderEpoch: 12, Wave: 2, Domain: "zone-a",
			Counts:   &sluicev1.RolloutCounts{Total: 5, Provisioned: 4, Failed: 1, Attempted: 5},
			Failures: []*sluicev1.NodeOutcome{outcome}, LeaderTime: durationpb.New(time.Hour), Reverted: []string{"node-03"},
			AbortedBy: &sluicev1.AbortRequest{Rollout: rolloutID, Reason: "stop", By: "ops@host", At: at}, Pause: pause, PauseAck: ack,
			Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at, EndedAt: at, Nodes: 1, Provisioned: 1}}},
		&sluicev1.RolloutRef{Rollout: rolloutID, Revision: rev.GetId(), Generation: 3, At: at, LeaderEpoch: 12},
		&sluicev1.LeaderLease{Holder: "coordinator-a", Session: "s1", AcquiredAt: at, RenewedAt: at, Epoch: 12},
		&sluicev1.AbortRequest{Rollout: rolloutID, NoRevert: true, Reason: "stop", By: "ops@host", At: at},
		&sluicev1.ForgiveRequest{Fingerprint: fp, Reason: "fixed", By: "ops@host", At: at, RecordedAt: at},
		pause,
		&sluicev1.ReapConfirm{Nodes: []string{"node-04"}, By: "ops@host", At: at, Reason: "decommissioned"},
		&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: "/srv/intents"}},
			SyncInterval: durationpb.New(30 * time.Second), HoldShare: 0.25, By: "ops@host", At: at},
		&sluicev1.RegistrySpec{Name: "redis", Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: "rediss://r:6380/0", Prefix: "x:"}},
			HoldShare: math.Inf(1)},
		&sluicev1.RegistryConfirm{Digest: "abc", By: "ops@host", At: at, Reason: "yes"},
		&sluicev1.Instance{Component: "configurator", Instance: "c-1", Host: "h", Version: "v1", StartedAt: at, HeartbeatAt: at, Role: "leader", Pause: ack},
		&sluicev1.RegistryStatus{Name: "gitops", Kind: "directory", Location: "/srv/intents", State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
			LastSync: at, Attempts: 2, Intents: 7, Version: "d1", Invalid: []*sluicev1.FieldError{{Intent: "layer2network/a", Field: "spec.vlan", Rule: "5000 is outside 1-4094"}},
			Conflicts: []*sluicev1.RegistryConflict{{Intent: "routingtable/t", Owner: "api"}},
			Held:      &sluicev1.HeldDeletion{Intents: []string{"routingtable/t"}, Digest: "abc", Reason: "half", Since: at}, UpdatedAt: at},
		&sluicev1.Event{Kind: contract.KindRollout, Id: rolloutID, Type: "RolloutStarted", Reason: "head moved", Time: at, Rollout: rolloutID},
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
