package view

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// -o json prints 64-bit integers as numbers, at any depth, and keeps
// protojson's field order and its forms of enums and timestamps.
func TestJSONOf_SixtyFourBitIntegersAreNumbers(t *testing.T) {
	r := &sluicev1.Rollout{Id: "3-abc", Generation: 3, LeaderEpoch: 7, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		StartedAt: timestamppb.New(time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)), Counts: &sluicev1.RolloutCounts{Total: 2, Provisioned: 2},
		Pause: &sluicev1.PauseRequest{Paused: true, Generation: 4}}
	b, err := JSON(r)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`"generation":3`, `"leaderEpoch":7`, `"pause":{"paused":true,"generation":4}`,
		`"phase":"ROLLOUT_PHASE_SUCCEEDED"`, `"startedAt":"2026-`, `"counts":{"total":2,"provisioned":2}`} {
		if !strings.Contains(got, want) {
			t.Errorf("json %s\nwant it to hold %s", got, want)
		}
	}
	if strings.Index(got, `"id"`) > strings.Index(got, `"generation"`) {
		t.Errorf("json %s: want protojson's field order (id before generation)", got)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if g, ok := back["generation"].(float64); !ok || g != 3 {
		t.Errorf("generation decodes as %T %v; want the number 3", back["generation"], back["generation"])
	}
}

// Each of sluice's enums is followed by its word as the tables show it, a
// field <name>Name right after it; an unset enum has none (protojson leaves
// the field out).
func TestJSONOf_EnumsCarryTheTablesWord(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"rollout phase", &sluicev1.Rollout{Id: "1-a", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED},
			`"phase":"ROLLOUT_PHASE_PARTIALLY_FAILED","phaseName":"PartiallyFailed"`},
		{"node phase", &sluicev1.NodeStatus{Node: "n", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Revision: "r"},
			`"phase":"NODE_PHASE_INVALID","phaseName":"Invalid","revision":"r"`},
		{"registry state", &sluicev1.RegistryStatus{State: sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE},
			`"state":"REGISTRY_STATE_UNREACHABLE","stateName":"Unreachable"`},
		{"unset", &sluicev1.Rollout{Id: "1-a"}, `{"id":"1-a"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := JSON(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tt.want) {
				t.Errorf("json %s\nwant it to hold %s", b, tt.want)
			}
		})
	}
}
