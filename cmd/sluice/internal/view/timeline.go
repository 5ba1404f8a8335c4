package view

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Timeline is a rollout's plan against what happened: the waves its
// strategy plans for its nodes, the stages it ran, and an estimate of when
// it ends against the ideal time. It is derived from the stored record
// alone (docs/dashboard.md, "Plan against actual"): the record keeps no
// per-node durations, so the pace is the time the rollout ran under a
// leader, less its bakes, per round of started nodes finished.
//
// Waves count started nodes, as the coordinator does (its wave boundaries
// compare the nodes it started, counts.attempted, with the plan's
// cumulative ends): a node that already ran the config the revision gives
// it is provisioned when the rollout begins and never started. So a wave
// plans min(end, Changes) - min(previous end, Changes) nodes, and a wave
// past Changes is not needed.
type Timeline struct {
	Rollout     string `json:"rollout"`
	MaxParallel int    `json:"maxParallel"`
	Bake        string `json:"bake,omitempty"`
	DomainKey   string `json:"domainKey,omitempty"`
	// Total is the rollout's nodes; Changes those it starts an operation
	// on (started, or still to start): the others already ran their config
	// when it began, or were skipped without a start.
	Total   int            `json:"total"`
	Changes int            `json:"changes"`
	Plan    []PlannedStage `json:"plan"`
	// Elapsed is the time the rollout has run under a leader (leaderTime),
	// else since it started.
	Elapsed string `json:"elapsed"`
	// Rounds is how many batches of at most maxParallel started nodes the
	// plan needs; one round is one node operation's time when nothing waits.
	Rounds int `json:"rounds"`
	// Round is the pace measured so far: the elapsed time, less the bakes,
	// per round of started nodes finished; "" before any finished.
	Round string `json:"round,omitempty"`
	// Ideal is the rounds at the best pace one stage showed, plus the
	// plan's bakes: the time the rollout would take if nothing ever waited.
	Ideal string `json:"ideal,omitempty"`
	// Expected is the elapsed time plus the remaining rounds at the pace
	// so far and the remaining bakes; ETA is when that ends. Ratio is
	// Expected over Ideal. Unset once the rollout ended (Elapsed says how
	// long it took) or before the pace is known.
	Expected string    `json:"expected,omitempty"`
	ETA      time.Time `json:"eta,omitzero"`
	Ratio    float64   `json:"ratio,omitempty"`
	Error    string    `json:"error,omitempty"` // the strategy does not resolve
}

// The states of a planned wave and of a stage (PlannedStage.State,
// Stage.State).
const (
	StageDone      = "done"      // every node of it has an outcome and the rollout went past it (or ended)
	StageRunning   = "running"   // nodes of it are started and not all have an outcome, or it waits to end
	StageBaking    = "baking"    // every started node of it has an outcome; the rollout bakes before going on
	StagePlanned   = "planned"   // not started yet
	StageUnneeded  = "unneeded"  // no node left to change in it: the nodes it would start already ran their config
	StageUnreached = "unreached" // the rollout ended before it started
)

// PlannedStage is one wave as the strategy plans it, and what became of it.
type PlannedStage struct {
	Wave    int     `json:"wave"`              // from 1; 0 without waves
	Nodes   int     `json:"nodes"`             // planned: the nodes it starts
	Started int     `json:"started"`           // nodes the rollout's stages of this wave started
	Done    int     `json:"done"`              // of those, with an outcome
	Took    string  `json:"took,omitempty"`    // its stages' time, start to end, less the bakes after them
	State   string  `json:"state"`             // one of the Stage* states
	Domains int     `json:"domains,omitempty"` // failure-domain stages it ran in
	Stages  []Stage `json:"stages,omitempty"`  // the stages it ran, in order
}

// Stage is one stage the rollout ran (a wave, or a failure domain of
// one): a stage that ended as its record says, one still open from the
// rollout's counts against those it started with (the record fills a
// stage's results in only when it ends).
type Stage struct {
	Domain      string `json:"domain,omitempty"`
	Started     int    `json:"started"`
	Provisioned int    `json:"provisioned"`
	Failed      int    `json:"failed"` // failed or timed out
	TimedOut    int    `json:"timedOut,omitempty"`
	Skipped     int    `json:"skipped,omitempty"`
	Took        string `json:"took,omitempty"` // ended: start to end, less the bake after it
	State       string `json:"state"`          // StageDone, StageRunning or StageBaking
}

// RolloutTimeline computes r's Timeline at now.
func RolloutTimeline(r *sluicev1.Rollout, now time.Time) Timeline {
	c, n := r.GetCounts(), contract.TallyOf(r)
	total := int(n.Total)
	t := Timeline{Rollout: r.GetId(), Total: total}
	p, err := contract.ResolveStrategy(r.GetStrategy(), total)
	if err != nil {
		t.Error = err.Error()
		return t
	}
	t.MaxParallel, t.DomainKey = max(p.MaxParallel, 1), p.DomainKey
	if p.Bake > 0 {
		t.Bake = p.Bake.String()
	}
	running := contract.Active(r.GetPhase())
	// A stage boundary's bake starts with no node in flight; a node in
	// flight (a redundancy group's early bake, pairs) means it still runs.
	// A bake a pause holds (bakeLeft, bakeUntil unset) is still the bake.
	baking := running && p.Bake > 0 && (r.GetBakeUntil() != nil || r.GetBakeLeft() != nil) && n.N(contract.CountInProgress) == 0
	t.Changes = int(n.Attempted + n.N(contract.CountPending) + n.N(contract.CountNotStarted))
	// Planned waves: sizes from the cumulative ends, over the nodes it
	// starts; one "wave 0" without waves.
	ends := p.Waves
	if ends == nil {
		ends = []int{total}
	}
	prev := 0
	for i, end := range ends {
		w := 0
		if p.Waves != nil {
			w = i + 1
		}
		nodes := min(end, t.Changes) - min(prev, t.Changes)
		if p.Waves == nil {
			nodes = t.Changes
		}
		t.Plan = append(t.Plan, PlannedStage{Wave: w, Nodes: nodes})
		t.Rounds += ceilDiv(nodes, t.MaxParallel)
		prev = end
	}
	// Actual: the stages the record lists, folded into their waves.
	var best time.Duration            // the fastest round one ended stage showed
	open := make([]bool, len(t.Plan)) // a stage of the wave has not ended
	stages := r.GetStages()
	for k, st := range stages {
		i := 0
		if p.Waves != nil {
			i = min(max(int(st.GetWave())-1, 0), len(t.Plan)-1)
		}
		ps := &t.Plan[i]
		s := stageOf(st, c)
		if st.GetDomain() != "" {
			ps.Domains++
		}
		if st.GetEndedAt() != nil {
			d := st.GetEndedAt().AsTime().Sub(st.GetStartedAt().AsTime())
			if k+1 < len(stages) && !st.GetEndedAt().AsTime().Before(stages[k+1].GetStartedAt().AsTime()) {
				// Ended when the next stage began: the bake before it is in.
				d = max(d-p.Bake, 0)
			}
			s.State, s.Took = StageDone, pretty(d)
			ps.Done += max(s.Provisioned+s.Failed+s.Skipped, s.Started)
			ps.Took = addDuration(ps.Took, d)
			if rounds := ceilDiv(s.Started, t.MaxParallel); rounds > 0 && d > 0 && (best == 0 || d/time.Duration(rounds) < best) {
				best = d / time.Duration(rounds)
			}
		} else {
			s.State = StageRunning
			switch {
			case !running:
				s.State = StageDone // a stopped rollout's stage not closed
			case baking && k == len(stages)-1:
				s.State = StageBaking
			}
			ps.Done += min(s.Provisioned+s.Failed+s.Skipped, s.Started)
			open[i] = running
		}
		ps.Started += s.Started
		ps.Stages = append(ps.Stages, s)
	}
	// Started nodes with an outcome: the operations that completed, failed
	// or were cancelled at their deadline; those in progress and those
	// stopped in flight (no outcome of their own) have none.
	finished := int(n.Op(contract.CountCompleted) + n.Op(contract.CountFailed) + n.Op(contract.CountCancelled))
	if len(stages) == 0 {
		// No stage recorded (no waves, or a record from a coordinator that
		// kept none): the waves started their nodes in order, so the
		// started and finished nodes fill the plan from its first wave.
		started, done := int(n.Attempted), finished
		for i := range t.Plan {
			ps := &t.Plan[i]
			ps.Started = min(ps.Nodes, started)
			ps.Done = min(ps.Started, done)
			if i == len(t.Plan)-1 {
				ps.Started, ps.Done = started, done // what the plan did not foresee is the last wave's
			}
			started, done = started-ps.Started, done-ps.Done
		}
	}
	for i := range t.Plan {
		ps := &t.Plan[i]
		last := len(ps.Stages) > 0 && ps.Stages[len(ps.Stages)-1].State == StageBaking
		switch {
		case ps.Started == 0 && ps.Nodes == 0:
			ps.State = StageUnneeded
		case !running && ps.Started > 0:
			ps.State = StageDone
		case !running:
			ps.State = StageUnreached
		case last && ps.Done >= ps.Nodes:
			ps.State = StageBaking
		case ps.Done >= ps.Nodes && !open[i]:
			ps.State = StageDone
		case ps.Started > 0:
			ps.State = StageRunning
		default:
			ps.State = StagePlanned
		}
	}
	elapsed := r.GetLeaderTime().AsDuration()
	if elapsed <= 0 && r.GetStartedAt() != nil {
		end := now
		if r.GetFinishedAt() != nil {
			end = r.GetFinishedAt().AsTime()
		}
		elapsed = end.Sub(r.GetStartedAt().AsTime())
	}
	t.Elapsed = pretty(elapsed)
	// Bakes: one before each stage but the first (a wave's, or a failure
	// domain's), so at least one between each two waves that start nodes.
	bakes, begun := 0, 0
	var bakeLeft time.Duration // of the bake running now
	if p.Bake > 0 {
		for _, ps := range t.Plan {
			if ps.Nodes > 0 {
				bakes++
			}
		}
		bakes = max(bakes-1, 0)
		begun = max(len(stages)-1, 0)
		if baking {
			begun++
			if r.GetBakeUntil() != nil {
				bakeLeft = max(r.GetBakeUntil().AsTime().Sub(now), 0)
			} else {
				bakeLeft = r.GetBakeLeft().AsDuration() // stands still while a pause holds it
			}
		}
		bakes = max(bakes, begun)
	}
	roundsDone := float64(finished) / float64(t.MaxParallel)
	working := elapsed - time.Duration(begun)*p.Bake + bakeLeft
	if finished == 0 || working <= 0 {
		return t
	}
	pace := time.Duration(float64(working) / roundsDone)
	t.Round = pretty(pace)
	if best == 0 || best > pace {
		best = pace
	}
	ideal := time.Duration(t.Rounds)*best + time.Duration(bakes)*p.Bake
	t.Ideal = pretty(ideal)
	if !running {
		return t
	}
	remaining := time.Duration((float64(t.Rounds) - roundsDone) * float64(pace))
	if remaining < 0 {
		remaining = 0
	}
	expected := elapsed + remaining + time.Duration(bakes-begun)*p.Bake + bakeLeft
	t.Expected = pretty(expected)
	t.ETA = now.Add(expected - elapsed).UTC().Round(time.Millisecond)
	if ideal > 0 {
		t.Ratio = float64(int(float64(expected)/float64(ideal)*100)) / 100
	}
	return t
}

// stageOf is st's results: as recorded once it ended; while it runs, the
// rollout's counts c less those it started with (its record holds zeros
// until it ends).
func stageOf(st *sluicev1.StageResult, c *sluicev1.RolloutCounts) Stage {
	s := Stage{Domain: domainOf(st), Started: int(st.GetNodes()), Provisioned: int(st.GetProvisioned()), Failed: int(st.GetFailed()),
		TimedOut: int(st.GetTimedOut()), Skipped: int(st.GetSkipped())}
	at := st.GetCountsAtStart()
	if st.GetEndedAt() != nil || at == nil {
		if s.Started == 0 {
			// A record that kept no count of the stage's started nodes: a
			// node that failed or was provisioned in it was started in it.
			s.Started = s.Provisioned + s.Failed
		}
		return s
	}
	diff := func(now, then uint32) int { return int(now - min(now, then)) }
	s.Started = diff(c.GetAttempted(), at.GetAttempted())
	s.Provisioned = diff(c.GetProvisioned(), at.GetProvisioned())
	s.Failed = diff(c.GetFailed(), at.GetFailed())
	s.TimedOut = diff(c.GetTimedOut(), at.GetTimedOut())
	s.Skipped = diff(c.GetSkipped(), at.GetSkipped())
	return s
}

// domainOf is the failure-domain value of stage st as a reader names it
// (contract.DomainLabel: "zone-a", "(unlabelled)"), "" without one: the
// record keeps the sort key ("0zone-a").
func domainOf(st *sluicev1.StageResult) string {
	if st.GetDomain() == "" {
		return ""
	}
	return contract.DomainLabel(st.GetDomain())
}

// pretty rounds d for reading: to the second from ten seconds up, else to
// the millisecond.
func pretty(d time.Duration) string {
	if d >= 10*time.Second || d <= -10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func ceilDiv(a, b int) int {
	if a <= 0 || b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// addDuration adds d to a duration as Timeline prints it.
func addDuration(s string, d time.Duration) string {
	old, _ := time.ParseDuration(s)
	return pretty(old + d)
}
