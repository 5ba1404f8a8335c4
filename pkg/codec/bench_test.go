package codec

import (
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The values of one node's change as the bench writes them (make bench):
// its status, its desired config and an event.
func hotValues() map[string]proto.Message {
	now := timestamppb.New(time.Date(2026, 11, 27, 10, 30, 0, 123456789, time.UTC))
	fp := "7fff35b2e19e7fff35b2e19e7fff35b2e19e7fff35b2e19e7fff35b2e19e1234"
	return map[string]proto.Message{
		"NodeStatus": &sluicev1.NodeStatus{Node: "node-012345", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "3-abcdef012345",
			Rollout: "3-abcdef012345", Fingerprint: fp, ApplyStartedAt: now, LastUpdate: now, Message: "applied", AppliedFingerprint: fp,
			Operation: "3-abcdef012345/node-012345/apply"},
		"DesiredConfig": &sluicev1.DesiredConfig{Node: "node-012345", Revision: "3-abcdef012345", Rollout: "3-abcdef012345", Fingerprint: fp,
			WrittenAt: now, LeaderEpoch: 3, Operation: "3-abcdef012345/node-012345/apply", Deadline: durationpb.New(10 * time.Minute),
			Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{
				{Name: "net-zone-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
					Vlan: 100, Vni: 10100, Mtu: 9000, Vrf: "tenant", AnycastGateways: []string{"10.0.0.1/24"},
					NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": "zone-a"}},
				}}},
				{Name: "tenant", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}},
			}}},
		"Event": &sluicev1.Event{Kind: "node", Id: "node-012345", Node: "node-012345", Type: "NodeProvisioned", Time: now,
			Rollout: "3-abcdef012345", Revision: "3-abcdef012345", Fingerprint: fp, Reason: "applied fingerprint 7fff35b2e19e from revision 3-abcdef012345 (rollout 3-abcdef012345) in 100ms"},
	}
}

func BenchmarkMarshal(b *testing.B) {
	for name, m := range hotValues() {
		b.Run(name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/protojson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protojson.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	for name, m := range hotValues() {
		raw, err := Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := Unmarshal(raw, m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/protojson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := protojson.Unmarshal(raw, m.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
