package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A node that left (no presence) is listed with the labels its last status
// carried (NodeStatus.node_labels), as the dashboard's fleet map groups it;
// before, its LABELS were "-" (sluice issue 42). A present node shows its
// presence's labels, whatever its status carries.
func TestGetNodes_DepartedNode_ShowsItsStatusLabels(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	now := timestamppb.Now()
	if _, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Create(t.Context(), "node-01",
		&sluicev1.NodePresence{Node: "node-01", Labels: map[string]string{"zone": "zone-a", "rack": "rack-a1"}, StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	seed{statuses: []*sluicev1.NodeStatus{
		{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, LastUpdate: now, NodeLabels: map[string]string{"zone": "old"}},
		{Node: "node-02", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, LastUpdate: now, NodeLabels: map[string]string{"zone": "zone-b", "rack": "rack-b9"}},
		{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, LastUpdate: now},
	}}.write(t, env)

	for _, args := range [][]string{{"get", "nodes"}, {"get", "nodes", "-o", "wide"}} {
		code, stdout, stderr := sluice(t, env.URL, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", args, code, stderr)
		}
		want := map[string]string{"node-01": "yes rack=rack-a1,zone=zone-a", "node-02": "no rack=rack-b9,zone=zone-b", "node-03": "no -"}
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
			f := strings.Fields(line)
			if w, ok := want[f[0]]; ok {
				if got := f[1] + " " + f[2]; got != w {
					t.Errorf("%s: %s PRESENT LABELS %q, want %q", args, f[0], got, w)
				}
				delete(want, f[0])
			}
		}
		if len(want) > 0 {
			t.Errorf("%s: not listed: %v\n%s", args, want, stdout)
		}
	}
}
