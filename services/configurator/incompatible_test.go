package configurator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// An apply whose rollout needs a config feature some present agents lack
// (here bake checks, and an agent of the baseline release) is refused at
// request time, dry run included, naming the node, its agent's version and
// features and the feature, with nothing stored — by the rule the
// coordinator asks (contract.CannotRead). With skipIncompatible, or without
// the feature, it is accepted. On the code before, the apply was accepted
// and its rollout then ended ABORTED.
func TestApply_NeedsAFeatureAPresentAgentLacks_RefusedAtRequestTime(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for _, p := range []*sluicev1.NodePresence{
		{Node: "node-01", AgentVersion: "v0.6.0", ConfigFeatures: contract.ConfigFeatures, HeartbeatAt: timestamppb.Now()},
		{Node: "node-02", AgentVersion: "v0.4.0", HeartbeatAt: timestamppb.Now()}, // the baseline release: no features stated
	} {
		if _, err := nodes.Create(context.Background(), p.GetNode(), p); err != nil {
			t.Fatal(err)
		}
	}
	start(t, env)
	ins := examples(t)[:1]
	baked := func(skip bool) *sluicev1.Strategy {
		return &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, BakeTime: durationpb.New(time.Minute), BakeChecks: 2, SkipIncompatible: skip}
	}

	for _, dry := range []bool{true, false} {
		_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: baked(false), DryRun: dry})
		var ae *apiclient.Error
		if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid {
			t.Fatalf("dry run %v: apply needing bake checks beside a baseline agent: %v, want error code %s", dry, err, contract.ErrCodeInvalid)
		}
		for _, want := range []string{"node-02: its agent v0.4.0 does not read config feature(s) " + contract.FeatureBakeChecks,
			"it reads none: an agent of the baseline release", "nothing was stored", "--skip-incompatible"} {
			if !strings.Contains(ae.Description, want) {
				t.Errorf("dry run %v: refusal %q does not say %q", dry, ae.Description, want)
			}
		}
		if strings.Contains(ae.Description, "node-01") {
			t.Errorf("dry run %v: refusal %q names node-01, whose agent reads every feature", dry, ae.Description)
		}
	}
	if snap := takeSnapshot(t, env); len(snap.intents) != 0 || len(snap.revisions) != 0 {
		t.Fatalf("refused applies stored intents %v, revisions %v; want nothing", snap.intents, snap.revisions)
	}

	if resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: baked(true), DryRun: true}); !resp.GetChanged() {
		t.Fatalf("dry run with skipIncompatible: %v, want it accepted", resp)
	}
	if resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "1"}}); resp.GetRevision() == "" {
		t.Fatalf("apply without the feature cut no revision: %v", resp)
	}
}
