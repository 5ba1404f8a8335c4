package store

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Every stored value written where another type is kept is refused: each
// realistic value (storedSeeds) under every other type's key, and the
// minimal values of another type a hand edit or a broken tool leaves. The
// chaos suite's garbage-value fault found seven pairs that passed (a status
// at a presence key read as a presence with no labels; a fence at the lease
// key as a lease; a rollout record at revisions/head as a head ...).
func TestDecode_AValueOfAnotherTypeIsRefusedAtEveryKey(t *testing.T) {
	seeds := storedSeeds(t)
	minimal := []proto.Message{
		&sluicev1.NodeStatus{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: "ab"},
		&sluicev1.NodePresence{Node: "node-01", Labels: map[string]string{"zone": "a"}},
		&sluicev1.Fence{Epoch: 5, Holder: "x"},
		&sluicev1.RolloutRef{Rollout: "3-abc", Revision: "abc"},
		&sluicev1.Rollout{Id: "3-abc", Revision: "abc"},
		&sluicev1.Head{Revision: "abc", Generation: 3},
		&sluicev1.PauseRequest{Generation: 3, Paused: true},
	}
	values := minimal
	for _, s := range seeds {
		values = append(values, s.v)
	}
	for _, target := range seeds {
		if target.bucket == contract.StreamEvents {
			continue // not a bucket: no rule
		}
		for _, v := range values {
			if proto.MessageName(v) == proto.MessageName(target.v) {
				continue
			}
			b, err := Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := Decode(target.bucket, target.key, b, target.newT()); !errors.Is(err, ErrUndecodable) {
				t.Errorf("a %s written to %s/%s reads as a %s (err %v): %s", proto.MessageName(v), target.bucket, target.key,
					proto.MessageName(target.v), err, b)
			}
		}
	}
}

// A value written by a newer version, with a field this one does not know,
// still reads; one whose unknown field is another stored type's does not.
func TestDecode_UnknownFieldsOfANewerVersionAreDropped(t *testing.T) {
	newer := []byte(`{"node":"node-01","phase":"NODE_PHASE_PROVISIONED","lastUpdate":"2026-01-01T00:00:00Z","someFutureField":{"x":1}}`)
	st := &sluicev1.NodeStatus{}
	if err := Decode(contract.BucketStatus, "node-01", newer, st); err != nil || st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("a newer version's status: %v, %v", st, err)
	}
	foreign := []byte(`{"node":"node-01","phase":"NODE_PHASE_PROVISIONED","labels":{"zone":"a"}}`)
	err := Decode(contract.BucketStatus, "node-01", foreign, &sluicev1.NodeStatus{})
	if !errors.Is(err, ErrUndecodable) || !strings.Contains(err.Error(), `"labels" (a field of NodePresence)`) {
		t.Fatalf("a status carrying a presence's labels: %v; want it refused naming the field", err)
	}
}
