package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// paired makes node-01 and node-02 one redundancy group in healthy(), and
// r1 respect it: node-02 is given its target once node-01 reported
// Provisioned.
func paired(o *Observation) {
	o.Pairs = map[string]string{"node-01": "pair-1", "node-02": "pair-1"}
	o.StatusWrites = append([]*sluicev1.NodeStatus{{Node: "node-01", Rollout: "r1", Fingerprint: "fp-a1", AppliedFingerprint: "fp-a1",
		Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, LastUpdate: timestamppb.New(at(0.9))}}, o.StatusWrites...)
	w := &o.ConfigWrites[1]
	w.At, w.Desired.WrittenAt = at(0.95), timestamppb.New(at(0.95))
}

// staged gives r2 waves and a bake: a member provisioned stays unproven
// until the bake after its stage.
func staged(o *Observation) {
	r := rollout(o, "r2")
	r.Strategy.FirstWave, r.Strategy.BakeTime = 1, durationpb.New(200*time.Millisecond)
}

// shortBake gives r2 waves and a bake shorter than bakeSlack, with node-01
// provisioned 20 ms after it was given its target (4.5 s), as on virtual
// time where the apply takes its 11–22 ms and the bake starts in the same
// instant as the report.
func shortBake(o *Observation) {
	r := rollout(o, "r2")
	r.Strategy.FirstWave, r.Strategy.BakeTime = 1, durationpb.New(60*time.Millisecond)
	for _, s := range o.StatusWrites {
		if s.GetNode() == "node-01" && s.GetRollout() == "r2" && s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
			s.LastUpdate = timestamppb.New(at(4.52))
		}
	}
}

// skipped records node-01 skipped in r1 at the coordinator's decision time.
func skipped(o *Observation, t float64) {
	o.Events = append(o.Events, &sluicev1.Event{Type: "NodeSkipped", Rollout: "r1", Node: "node-01", Time: timestamppb.New(at(t))})
}

func TestCheck_Pairs_TwoMembersNeverUnprovenTogether(t *testing.T) {
	runCases(t, "Pairs", "node-02", []checkCase{
		{name: "node-02 given its target after node-01 provisioned", given: paired},
		{name: "no groups: both at once is no violation", given: func(*Observation) {}},
		{name: "both members given the target at once", given: func(o *Observation) {
			paired(o)
			w := &o.ConfigWrites[1]
			w.At, w.Desired.WrittenAt = at(0.5), timestamppb.New(at(0.5))
		}, want: true},
		{name: "node-02 given it while node-01 was in flight", given: func(o *Observation) {
			paired(o)
			o.StatusWrites[0].LastUpdate = timestamppb.New(at(1.2))
		}, want: true},
		{name: "node-01 failed first: it no longer holds its group", given: func(o *Observation) {
			paired(o)
			o.StatusWrites = o.StatusWrites[1:]
			o.Events = append(o.Events, &sluicev1.Event{Type: "NodeFailed", Rollout: "r1", Node: "node-01", Time: timestamppb.New(at(0.7))})
		}},
		{name: "node-01 left 30 ms after it was given its target, node-02 given it just after the skip (seed 52)", given: func(o *Observation) {
			paired(o)
			o.StatusWrites = o.StatusWrites[1:]
			skipped(o, 0.53)
			w := &o.ConfigWrites[1]
			w.At, w.Desired.WrittenAt = at(0.54), timestamppb.New(at(0.54))
		}},
		{name: "node-01 skipped before its own write landed", given: func(o *Observation) {
			paired(o)
			o.StatusWrites = o.StatusWrites[1:]
			skipped(o, 0.3)
			w := &o.ConfigWrites[1]
			w.At, w.Desired.WrittenAt = at(0.54), timestamppb.New(at(0.54))
		}},
		{name: "node-02 given it before node-01's skip was decided", given: func(o *Observation) {
			paired(o)
			o.StatusWrites = o.StatusWrites[1:]
			skipped(o, 0.6)
			w := &o.ConfigWrites[1]
			w.At, w.Desired.WrittenAt = at(0.54), timestamppb.New(at(0.54))
		}, want: true},
		{name: "a skip that ended node-01's first operation does not end its next one", given: func(o *Observation) {
			paired(o)
			o.StatusWrites = o.StatusWrites[1:]
			skipped(o, 0.53)
			o.ConfigWrites[0].Desired.Operation = "r1/node-01/apply"
			again := proto.Clone(o.ConfigWrites[0].Desired).(*sluicev1.DesiredConfig)
			again.Operation, again.WrittenAt = "r1/node-01/apply-2", timestamppb.New(at(0.8))
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-01.desired", Revision: 7, At: at(0.8), Desired: again})
		}, want: true},
		{name: "with a bake between stages, node-02 given it before node-01's bake", given: func(o *Observation) {
			paired(o)
			staged(o)
		}, want: true},
		{name: "with a bake between stages, node-02 given it after node-01's bake", given: func(o *Observation) {
			paired(o)
			staged(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutBaking", Rollout: "r2", Time: timestamppb.New(at(5.25))})
		}},
		{name: "a new term continues the bake (its RolloutBaking lost with the term before): node-02 given it after it (seed 81)", given: func(o *Observation) {
			paired(o)
			staged(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutResumed", Rollout: "r2", Time: timestamppb.New(at(5.25)),
				Reason: "leadership term 2 resumes the rollout in phase Progressing: …; the bake continues: 200ms of 200ms left"})
		}},
		{name: "a new term continues the bake: node-02 given it before its time left passed", given: func(o *Observation) {
			paired(o)
			staged(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutResumed", Rollout: "r2", Time: timestamppb.New(at(5.25)),
				Reason: "leadership term 2 resumes the rollout in phase Progressing: …; the bake continues: 10s of 200ms left"})
		}, want: true},
		{name: "a bake shorter than bakeSlack: node-02 given it after node-01's bake (seeds 246, 384, 882)", given: func(o *Observation) {
			paired(o)
			shortBake(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutBaking", Rollout: "r2", Time: timestamppb.New(at(4.52))})
		}},
		{name: "a bake shorter than bakeSlack: node-02 given it while node-01 was in flight", given: func(o *Observation) {
			paired(o)
			shortBake(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutBaking", Rollout: "r2", Time: timestamppb.New(at(4.52))})
			w := &o.ConfigWrites[4] // node-02's r2 target
			w.At, w.Desired.WrittenAt = at(4.51), timestamppb.New(at(4.51))
		}, want: true},
		{name: "a bake shorter than bakeSlack: node-02 given it before node-01's bake began", given: func(o *Observation) {
			paired(o)
			shortBake(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutBaking", Rollout: "r2", Time: timestamppb.New(at(5.6))})
		}, want: true},
		{name: "node-01 never ended, where events may be lost: not judged", given: func(o *Observation) {
			paired(o)
			o.StatusWrites[0].LastUpdate = timestamppb.New(at(1.2))
			o.StatusWrites[0].Fingerprint = "fp-other"
			x := o.Expect["r1"]
			x.EventsMayBeLost = true
			o.Expect["r1"] = x
		}},
		{name: "both configured with the config in force after the rollout ended (stragglers)", given: func(o *Observation) {
			paired(o)
			for i, n := range []string{"node-01", "node-02"} {
				o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: n + ".desired", Revision: uint64(7 + i), At: at(9),
					Desired: &sluicev1.DesiredConfig{Node: n, Rollout: "r1", Fingerprint: "fp-a" + n[len(n)-1:], Operation: "configure/x", LeaderEpoch: 9, WrittenAt: timestamppb.New(at(9))}})
			}
		}},
		{name: "a revert is never held", given: func(o *Observation) {
			paired(o)
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-02.desired", Revision: 7, At: at(4.6),
				Desired: &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r2", Fingerprint: "fp-a2", Revert: true, LeaderEpoch: 9, WrittenAt: timestamppb.New(at(4.6))}})
		}},
	})
}

func frozen(from, to float64) func(o *Observation) {
	return func(o *Observation) {
		o.Freezes = append(o.Freezes, FreezeObs{Key: contract.FreezeKey("chaos-2"), From: at(from), To: at(to)})
	}
}

func TestCheck_Freeze_NoWaveStartsWhileFrozen(t *testing.T) {
	withStage := func(o *Observation) {
		rollout(o, "r2").Stages = []*sluicev1.StageResult{{Wave: 1, StartedAt: timestamppb.New(at(4.5))}}
	}
	runCases(t, "Freeze", "", []checkCase{
		{name: "a freeze that ended before r2 started", given: frozen(2.5, 4.4)},
		{name: "r2's first write within a freeze", given: frozen(4, 5), want: true},
		{name: "r2's first write just after a freeze began: decided before it", given: frozen(4.47, 5)},
		{name: "r2's first stage started within a freeze", given: func(o *Observation) { withStage(o); frozen(4.2, 6)(o) }, want: true},
		{name: "r2's second stage started within a freeze", given: func(o *Observation) {
			withStage(o)
			r := rollout(o, "r2")
			r.Stages = append(r.Stages, &sluicev1.StageResult{Wave: 2, StartedAt: timestamppb.New(at(5.5))})
			frozen(5, 6)(o)
		}, want: true},
		{name: "a freeze the harness wrote garbage over is not judged", given: func(o *Observation) {
			frozen(4, 5)(o)
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketControl, Key: contract.FreezeKey("chaos-2"), At: at(4.1)})
		}},
	})
}

func TestCheck_Window_NoWaveStartsOutsideTheWindows(t *testing.T) {
	windows := func(ws ...string) func(o *Observation) {
		return func(o *Observation) { rollout(o, "r2").Strategy.Windows = ws }
	}
	runCases(t, "Window", "", []checkCase{
		{name: "r2 started within its window", given: windows("* 13:00-14:00", "* 11:00-13:00 UTC")},
		{name: "r2 started outside its windows", given: windows("* 13:00-14:00", "Sat 11:00-13:00"), want: true},
	})
}

// TestCheck_Window_AWindowThatClosesMidRollout: r2's windows as the harness
// draws a closing one (windows.go): open until 12:01, closed for a minute,
// open again from 12:02. Its first stage starts at 12:00:04.5, inside.
func TestCheck_Window_AWindowThatClosesMidRollout(t *testing.T) {
	stages := func(second float64) func(o *Observation) {
		return func(o *Observation) {
			r := rollout(o, "r2")
			r.Strategy.Windows = closingWindows(t0.Add(time.Minute))
			r.Stages = []*sluicev1.StageResult{{Wave: 1, StartedAt: timestamppb.New(at(4.5))}}
			if second > 0 {
				r.Stages = append(r.Stages, &sluicev1.StageResult{Wave: 2, StartedAt: timestamppb.New(at(second))})
			}
		}
	}
	runCases(t, "Window", "", []checkCase{
		{name: "one stage, in flight when the window closed", given: stages(0)},
		{name: "the next stage started just before the window closed", given: stages(59.99)},
		{name: "the next stage started as the window closed", given: stages(60), want: true},
		{name: "the next stage started while no window was open", given: stages(90), want: true},
		{name: "the next stage started when the next window opened", given: stages(120)},
		{name: "the next stage started within the next window", given: stages(125.5)},
	})
}

func TestClosingWindows_OpenUntilTheBoundaryClosedAMinute(t *testing.T) {
	tests := []struct {
		name      string
		now       time.Time
		ahead     time.Duration
		wantClose time.Time
	}{
		{name: "early in a minute", now: time.Date(2000, 1, 1, 0, 0, 4, 500e6, time.UTC), ahead: 500 * time.Millisecond,
			wantClose: time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)},
		{name: "too late in a minute for the lead: the next boundary", now: time.Date(2000, 1, 1, 0, 0, 59, 500e6, time.UTC), ahead: 600 * time.Millisecond,
			wantClose: time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)},
		{name: "across midnight", now: time.Date(2000, 1, 1, 23, 59, 10, 0, time.UTC), ahead: time.Second,
			wantClose: time.Date(2000, 1, 2, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := closeBoundary(tt.now, tt.ahead)
			if !c.Equal(tt.wantClose) {
				t.Fatalf("closeBoundary = %s, want %s", c, tt.wantClose)
			}
			var ws []contract.Window
			for _, text := range closingWindows(c) {
				w, err := contract.ParseWindow(text)
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, w)
			}
			for _, p := range []struct {
				at   time.Time
				open bool
			}{
				{tt.now, true}, {tt.now.Add(tt.ahead), true}, {c.Add(-time.Nanosecond), true},
				{c, false}, {c.Add(59 * time.Second), false}, {c.Add(time.Minute), true}, {c.Add(time.Hour), true},
			} {
				if open, _ := contract.WindowsOpen(ws, p.at); open != p.open {
					t.Errorf("windows %v open at %s: %v, want %v", closingWindows(c), p.at.Format("15:04:05.000"), open, p.open)
				}
			}
		})
	}
}

// gated gives r2 a metric gate that got only missing data; r2 rolled back,
// blocked by it when it gave up.
func gated(o *Observation) {
	const url = "http://127.0.0.1:1/c2/errors"
	r := rollout(o, "r2")
	r.Strategy.Gates = []*sluicev1.Gate{{Name: "errors", Prometheus: url, Query: "q"}}
	r.Counts.Attempted = 2
	r.BlockedBy = &sluicev1.GateResult{Gate: "errors", Verdict: contract.GateFailed, Message: "errors: gave up after waiting 1s for data (errors: 1 of 3 samples over 1m0s)"}
	o.GateAnswers = map[string][]GateAnswer{url: {{At: at(5), What: "1 samples, worst 0.001"}, {At: at(5.5), What: "HTTP 500"}}}
	x := o.Expect["r2"]
	x.Blocking, x.MustBlock = []string{"errors"}, true
	o.Expect["r2"] = x
}

func TestCheck_Gates_NoPassOnMissingData(t *testing.T) {
	runCases(t, "Gates", "", []checkCase{
		{name: "a gate without data blocks the rollout", given: gated},
		{name: "a gate without data passed (event)", given: func(o *Observation) {
			gated(o)
			o.Events = append(o.Events, &sluicev1.Event{Type: "GatePassed", Rollout: "r2", Gate: "errors", Reason: "errors: 0 <= 0.01"})
		}, want: true},
		{name: "a gate without data passed (record)", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").Gates = []*sluicev1.GateResult{{Gate: "errors", Verdict: contract.GatePassed}}
		}, want: true},
		{name: "a rollout whose gate never got data succeeded", given: func(o *Observation) {
			gated(o)
			r := rollout(o, "r2")
			r.Phase, r.BlockedBy = sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, nil
		}, want: true},
		{name: "a gate that got data passed", given: func(o *Observation) {
			gated(o)
			o.GateAnswers["http://127.0.0.1:1/c2/errors"] = append(o.GateAnswers["http://127.0.0.1:1/c2/errors"], GateAnswer{Data: true, What: "5 samples, worst 0.001"})
			o.Events = append(o.Events, &sluicev1.Event{Type: "GatePassed", Rollout: "r2", Gate: "errors"})
		}},
		{name: "rolled back without naming the failing gate", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").BlockedBy = nil
		}, want: true},
		{name: "rolled back by failing nodes beyond the budget, no gate named", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").BlockedBy = nil
			x := o.Expect["r2"]
			x.MustBlock = false
			o.Expect["r2"] = x
		}},
		{name: "blocked on a value the stub never gave", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").BlockedBy.Message = "errors: 0.05 > 0.01 over 1m0s"
		}, want: true},
		{name: "blocked on a value the stub gave", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").BlockedBy.Message = "errors: 0.05 > 0.01 over 1m0s"
			o.GateAnswers["http://127.0.0.1:1/c2/errors"] = []GateAnswer{{Data: true, What: "5 samples, worst 0.05"}}
		}},
		{name: "blocked by a gate the strategy does not have", given: func(o *Observation) {
			gated(o)
			rollout(o, "r2").BlockedBy.Gate = "latency"
		}, want: true},
	})
}

// Rewind: a status read while a git registry's branch was rewound that
// names the older commit in force is flagged; one that held it is not.
// And a mark inside the rewind is an I7 violation, though the settle
// period had run out (no absence was recorded: a rewind is no answer).
func TestCheck_Rewind_ASyncedRewoundBranch(t *testing.T) {
	at := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	key := regKey(2)
	for _, tc := range []struct {
		name   string
		rewind RewindObs
		marked bool
		want   []string
	}{
		{"held", RewindObs{Span: Span{From: at, To: at.Add(5 * time.Second)}, Target: strings.Repeat("a", 40), Held: at.Add(time.Second)}, false, nil},
		{"synced", RewindObs{Span: Span{From: at, To: at.Add(10 * time.Second)}, Target: strings.Repeat("a", 40), Synced: at.Add(time.Second)}, false, []string{"Rewind"}},
		{"marked inside it", RewindObs{Span: Span{From: at, To: at.Add(10 * time.Second)}, Target: strings.Repeat("a", 40), Synced: at.Add(time.Second)}, true, []string{"I7", "Rewind"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Observation{Registry: &RegistryObs{Name: registryName, Settle: registrySettle, Intents: []string{regKey(0), regKey(1), key},
				Absent: map[string][]Span{}, Rewinds: []RewindObs{tc.rewind}}}
			if tc.marked {
				o.Events = append(o.Events, &sluicev1.Event{Type: "IntentMarkedForDeletion", Id: key, Time: timestamppb.New(at.Add(8 * time.Second))})
			}
			var got []string
			add := func(inv, _, _, _ string, _ ...any) { got = append(got, inv) }
			checkPartialAnswers(o, add)
			checkRewinds(o, add)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want %v", got, tc.want)
			}
		})
	}
}
