package view

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

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
