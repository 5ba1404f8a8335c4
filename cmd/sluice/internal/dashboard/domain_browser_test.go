package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestBrowser_FailureDomainStage_NamedByItsValue: the record keeps a
// failure-domain stage by its sort key ("0zone-a"); in real Chromium the
// rollout panel names the stage in progress as `sluice rollout status`
// does ("zone zone-b"), and the plan against actual names each stage it
// ran by its value ("zone zone-a"), never the sort key.
func TestBrowser_FailureDomainStage_NamedByItsValue(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	now := time.Now()
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	r := &sluicev1.Rollout{Id: contract.RolloutID(2, headRevB), Revision: headRevB, Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy:  &sluicev1.Strategy{MaxParallel: "1", FailureDomain: "zone"},
		StartedAt: at(-time.Minute), Domain: "0zone-b", Domains: []string{"0zone-b"},
		Counts: &sluicev1.RolloutCounts{Total: 4, Provisioned: 2, InProgress: 1, Pending: 1, Attempted: 3},
		Stages: []*sluicev1.StageResult{
			{Domain: "0zone-a", StartedAt: at(-time.Minute), EndedAt: at(-30 * time.Second), Nodes: 2, Provisioned: 2},
			{Domain: "0zone-b", StartedAt: at(-30 * time.Second), StartedBefore: 2, CountsAtStart: &sluicev1.RolloutCounts{Total: 4, Provisioned: 2, Pending: 2, Attempted: 2}},
		}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(context.Background(), r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	tab := rebindingBrowser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(s.url+"/")); err != nil {
		t.Fatal(err)
	}
	const read = `[document.getElementById('rollout-meta').textContent, document.getElementById('timeline').textContent]`
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := jsIn(t, tab, read)
		meta, timeline := got[0], got[1]
		if strings.Contains(meta, "zone zone-b") && strings.Contains(timeline, "zone zone-a: 2 started, 2 provisioned") &&
			strings.Contains(timeline, "zone zone-b: 1 started") {
			if strings.Contains(meta+timeline, "0zone") {
				t.Fatalf("a sort key shown: meta %q, timeline %q", meta, timeline)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout meta %q, timeline %q: want the stages named zone zone-a and zone zone-b", meta, timeline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
