package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// unansweredWatches is a rollouts bucket whose watches are never made:
// Watch waits until its context ends, as nats.go's does when the
// consumer-create request went out as the server stopped (seed 1344).
// Everything else is the real bucket's.
type unansweredWatches struct{ jetstream.KeyValue }

func (unansweredWatches) Watch(ctx context.Context, _ string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The watch only speeds waitPhase up: a watch whose creation is never
// answered must not keep it from reading the record (seed 1344: the driver
// sat in Watch until the seed's deadline, its rollout long Succeeded).
func TestWaitPhase_WatchNeverMade_ReadsTheRecord(t *testing.T) {
	const id = "3-33b97297ad6f"
	tests := []struct {
		name  string
		first sluicev1.RolloutPhase
		later time.Duration // then Succeeded; 0: first stays
	}{
		{name: "ended before the wait", first: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED},
		{name: "ends during the wait", first: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, later: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			bucket := env.Buckets.Rollouts
			env.Buckets.Rollouts = unansweredWatches{bucket}
			s := &system{t: t, env: env}
			put := func(phase sluicev1.RolloutPhase) error {
				b, err := store.Marshal(&sluicev1.Rollout{Id: id, Phase: phase})
				if err == nil {
					_, err = bucket.Put(context.Background(), id, b)
				}
				return err
			}
			if err := put(tt.first); err != nil {
				t.Fatal(err)
			}
			wrote := make(chan error, 1)
			go func() {
				if tt.later == 0 {
					wrote <- nil
					return
				}
				time.Sleep(tt.later)
				wrote <- put(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
			}()
			// Without the fix waitPhase returns only when ctx ends, with
			// the harness's error; with it, within a few polls.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			ok, err := s.waitPhase(ctx, id, 30*time.Second, ended)
			if !ok || err != nil {
				t.Errorf("waitPhase = %v, %v after %s; want true, nil", ok, err, time.Since(start).Round(time.Millisecond))
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The garbage-value fault over revisions/head, then a configurator
// restarted before it repaired the head: it reconciles the stored intents
// into a new generation of the same revision, with the default strategy,
// and the coordinator rolls that out as a rollout of its own. Seed 154:
// rollout 2-99b256084261 was never started (no coordinator had read
// generation 2), 10-99b256084261 ran to ROLLED_BACK (budget 0), and the
// driver waited for 2-… until its deadline. The driver follows the
// change to the rewritten head's rollout, which is judged by the strategy
// it runs; a head of another revision moves nothing.
func TestDriver_FollowsTheHeadWrittenAgainAtAHigherGeneration(t *testing.T) {
	const rev = "99b256084261fb5df79fd05b004e0fbf461ef2566ea5d71c3721a4a0530c2f49"
	const other = "0e48ce6126d24fc27174cb444546cca53981df3478f957275c8d4d92bb3976c6"
	applied2, rewritten := contract.RolloutID(2, rev), contract.RolloutID(10, rev)
	rolledBack, partial := sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED
	failed := []*sluicev1.NodeOutcome{{Node: "node-10", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "apply", Message: "no carrier"}}
	tests := []struct {
		name     string
		head     *sluicev1.Head
		records  []*sluicev1.Rollout // in the rollouts bucket before the wait
		wantID   string              // change 1's rollout after the wait
		wantKeys []string            // the expectations' rollouts, sorted
	}{
		{
			name:     "the change's generation was never rolled out",
			head:     &sluicev1.Head{Revision: rev, Generation: 10, StrategyLost: true, Reason: "reconciled: the stored intents differ from head revision none (added routingtable/fleet-wide …)"},
			records:  []*sluicev1.Rollout{{Id: rewritten, Revision: rev, Phase: rolledBack, Failures: failed}},
			wantID:   rewritten,
			wantKeys: []string{rewritten, applied2},
		},
		{
			name: "rolled out again after the change's rollout ended",
			head: &sluicev1.Head{Revision: rev, Generation: 10, StrategyLost: true, Reason: "reconciled: the stored intents differ from head revision none (added routingtable/fleet-wide …)"},
			records: []*sluicev1.Rollout{{Id: applied2, Revision: rev, Phase: partial, Failures: failed},
				{Id: rewritten, Revision: rev, Phase: rolledBack, Failures: failed}},
			wantID:   rewritten,
			wantKeys: []string{rewritten, applied2},
		},
		{
			// Seeds 152 and 188: a registry's files dropped and back, the
			// head cut again at the change's revision after a head of another.
			name:     "the same revision cut again by a registry sync",
			head:     &sluicev1.Head{Revision: rev, Generation: 10, Reason: "registry gitops: 4 intents back"},
			records:  []*sluicev1.Rollout{{Id: applied2, Revision: rev, Phase: partial, Failures: failed}},
			wantID:   applied2,
			wantKeys: []string{applied2},
		},
		{
			name:     "a head of another revision",
			head:     &sluicev1.Head{Revision: other, Generation: 10, Reason: "an apply"},
			records:  []*sluicev1.Rollout{{Id: applied2, Revision: rev, Phase: partial, Failures: failed}},
			wantID:   applied2,
			wantKeys: []string{applied2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			put := func(kv jetstream.KeyValue, key string, m proto.Message) {
				b, err := store.Marshal(m)
				if err == nil {
					_, err = kv.Put(ctx, key, b)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			put(env.Buckets.Revisions, contract.KeyHead, tt.head)
			for _, r := range tt.records {
				put(env.Buckets.Rollouts, r.GetId(), r)
			}
			change1 := &sluicev1.Strategy{MaxParallel: "4", FailureBudget: "2"}
			sc := Scenario{Changes: []Change{
				{TableID: 100, Strategy: &sluicev1.Strategy{MaxParallel: "10"}},
				{TableID: 247, Strategy: change1, Behaviour: map[string]Behaviour{"node-10": FailApply}},
			}}
			s := &system{t: t, env: env, sc: sc, log: newSchedule()}
			d := &driver{sys: s}
			for range sc.Changes {
				d.changes = append(d.changes, &applied{done: make(chan struct{})})
			}
			a := d.changes[1]
			a.revision = rev
			a.add(changeRollout{id: applied2, gen: 2, strategy: proto.Clone(change1).(*sluicev1.Strategy)})
			close(a.done)

			// Without following, the driver waits for 2-… until its
			// deadline (a minute) in the first case: ctx ends first.
			if err := d.waitEnded(ctx, 1, "of the last change", time.Minute); err != nil {
				t.Fatalf("waitEnded: %v\n%s", err, strings.Join(s.log.lines, "\n"))
			}
			if got := a.id(); got != tt.wantID {
				t.Errorf("change 1's rollout = %s; want %s", got, tt.wantID)
			}
			x := d.expectations(false)
			if got := sortedKeys(x); !slices.Equal(got, tt.wantKeys) {
				t.Fatalf("expectations for %v; want %v", got, tt.wantKeys)
			}
			// The change's own rollout keeps the change's strategy: node-10
			// within the budget of 2.
			if got := x[applied2].Phases; !slices.Equal(got, []sluicev1.RolloutPhase{partial}) {
				t.Errorf("%s may end %v; want %v (budget 2)", applied2, got, partial)
			}
			if tt.wantID != rewritten {
				return
			}
			// The rewritten head's runs the defaults: budget 0, so node-10
			// rolls it back; and it is still judged (Outcome).
			if got := x[rewritten].Phases; !slices.Equal(got, []sluicev1.RolloutPhase{rolledBack}) {
				t.Errorf("%s may end %v; want %v (the default budget 0)", rewritten, got, rolledBack)
			}
			for phase, want := range map[sluicev1.RolloutPhase]bool{rolledBack: false, partial: true} {
				o := &Observation{Expect: x, Rollouts: []*sluicev1.Rollout{{Id: rewritten, Revision: rev, Phase: phase, Failures: failed}}}
				var vs []string
				checkExpectations(o, func(inv, rollout, node, format string, args ...any) { vs = append(vs, inv+" "+rollout) })
				if got := slices.Contains(vs, "Outcome "+rewritten); got != want {
					t.Errorf("%s ended %s: Outcome violation %v; want %v (%v)", rewritten, phase, got, want, vs)
				}
			}
		})
	}
}
