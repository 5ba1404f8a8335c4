package configurator_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// smallTables are n routing tables with ids from firstID, without selectors:
// 10,000 of them are a request well under the max payload.
func smallTables(prefix string, firstID, n int) []*sluicev1.Intent {
	out := make([]*sluicev1.Intent, n)
	for i := range out {
		out[i] = &sluicev1.Intent{Name: fmt.Sprintf("%s-%05d", prefix, i),
			Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: uint32(firstID + i)}}}
	}
	return out
}

// One apply carries at most intent.MaxIntentsPerApply intents. 10,000 valid
// ones in a request that fits the max payload used to be stored (5.4 s of
// writes); now they are refused before validation, naming the count and the
// limit, and nothing is stored.
func TestApply_10000Intents_IsRefusedNamingTheCountAndTheLimit(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	before, headBefore := takeSnapshot(t, env), getHead(t, env).Revision

	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: smallTables("t", 1000, 10_000)})

	refused(t, env, err, before, headBefore, "10,000 intents in one apply, over the limit of 5,000", "batches of at most 5,000", "nothing was stored")
	if intent.MaxIntentsPerApply != 5000 {
		t.Errorf("MaxIntentsPerApply = %d: docs/intents.md says 5,000", intent.MaxIntentsPerApply)
	}
	// A batch within the limit lands at once.
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: smallTables("t", 1000, 100)})
	if !resp.GetChanged() || len(resp.GetCreated()) != 100 {
		t.Errorf("next apply = %v, want 100 created", resp)
	}
}
