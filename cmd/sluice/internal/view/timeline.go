package view

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Timeline is a rollout's plan against what happened: the waves its
// strategy plans for its nodes, the stages it ran, and an estimate of when
// it ends against the ideal time. It is derived from the stored record
// alone (docs/dashboard.md, "The rollout"): the record keeps no per-node
// durations, so the pace is the stages' (or, without stages, the whole
// rollout's) nodes finished per unit of time under a leader.
type Timeline struct {
	Rollout     string         `json:"rollout"`
	MaxParallel int            `json:"maxParallel"`
	Bake        string         `json:"bake,omitempty"`
	DomainKey   string         `json:"domainKey,omitempty"`
	Plan        []PlannedStage `json:"plan"`
	// Elapsed is the time the rollout has run under a leader (leaderTime),
	// else since it started.
	Elapsed string `json:"elapsed"`
	// Rounds is how many batches of maxParallel nodes the plan needs; one
	// round is one node operation's time when nothing waits.
	Rounds int `json:"rounds"`
	// Round is the pace measured so far: the elapsed time, less the bakes,
	// per round of nodes finished; "" before any node finished.
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

// PlannedStage is one wave as the strategy plans it, and what became of it.
type PlannedStage struct {
	Wave    int    `json:"wave"`              // from 1; 0 without waves
	Nodes   int    `json:"nodes"`             // planned
	Started int    `json:"started"`           // nodes the rollout's stages of this wave started
	Done    int    `json:"done"`              // of those, with an outcome
	Took    string `json:"took,omitempty"`    // its stages' time, start to end
	State   string `json:"state"`             // "done", "running" or "planned"
	Domains int    `json:"domains,omitempty"` // failure-domain stages it ran in
}

// RolloutTimeline computes r's Timeline at now.
func RolloutTimeline(r *sluicev1.Rollout, now time.Time) Timeline {
	c := r.GetCounts()
	total := int(c.GetTotal())
	t := Timeline{Rollout: r.GetId()}
	p, err := contract.ResolveStrategy(r.GetStrategy(), total)
	if err != nil {
		t.Error = err.Error()
		return t
	}
	t.MaxParallel, t.DomainKey = max(p.MaxParallel, 1), p.DomainKey
	if p.Bake > 0 {
		t.Bake = p.Bake.String()
	}
	// Planned waves: sizes from the cumulative ends; one "wave 0" without.
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
		t.Plan = append(t.Plan, PlannedStage{Wave: w, Nodes: end - prev, State: "planned"})
		t.Rounds += ceilDiv(end-prev, t.MaxParallel)
		prev = end
	}
	// Actual: the stages the record lists, folded into their waves.
	var best time.Duration            // the fastest round one ended stage showed
	open := make([]bool, len(t.Plan)) // a stage of the wave has not ended
	for _, st := range r.GetStages() {
		i := 0
		if p.Waves != nil {
			i = min(max(int(st.GetWave())-1, 0), len(t.Plan)-1)
		}
		ps := &t.Plan[i]
		ps.Started += int(st.GetNodes())
		done := int(st.GetProvisioned() + st.GetFailed() + st.GetSkipped())
		if st.GetDomain() != "" {
			ps.Domains++
		}
		if st.GetEndedAt() != nil {
			d := st.GetEndedAt().AsTime().Sub(st.GetStartedAt().AsTime())
			ps.Done += max(done, int(st.GetNodes()))
			ps.Took = addDuration(ps.Took, d)
			if rounds := ceilDiv(int(st.GetNodes()), t.MaxParallel); rounds > 0 && d > 0 && (best == 0 || d/time.Duration(rounds) < best) {
				best = d / time.Duration(rounds)
			}
		} else {
			ps.Done += done
			open[i] = true
		}
	}
	finished := int(c.GetProvisioned() + c.GetFailed() + c.GetSkipped())
	if len(r.GetStages()) == 0 && len(t.Plan) == 1 {
		t.Plan[0].Started = finished + int(c.GetInProgress())
		t.Plan[0].Done = finished
	}
	running := contract.Active(r.GetPhase())
	for i := range t.Plan {
		ps := &t.Plan[i]
		switch {
		case !running && ps.Started > 0, ps.Nodes > 0 && ps.Done >= ps.Nodes && !open[i]:
			ps.State = "done"
		case ps.Started > 0:
			ps.State = "running"
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
	// Bakes: one after each wave but the last.
	bakes := 0
	if p.Bake > 0 && len(t.Plan) > 1 {
		bakes = len(t.Plan) - 1
	}
	bakesDone := 0
	for _, ps := range t.Plan[:max(len(t.Plan)-1, 0)] {
		if ps.State == "done" && p.Bake > 0 {
			bakesDone++
		}
	}
	roundsDone := float64(finished) / float64(t.MaxParallel)
	working := elapsed - time.Duration(bakesDone)*p.Bake
	if bakesDone > 0 && r.GetBakeUntil() != nil && r.GetBakeUntil().AsTime().After(now) {
		working += r.GetBakeUntil().AsTime().Sub(now) // the bake still running is not over yet
	} else if bakesDone > 0 && r.GetBakeLeft() != nil {
		working += r.GetBakeLeft().AsDuration() // nor one a pause holds
	}
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
	expected := elapsed + remaining + time.Duration(bakes-bakesDone)*p.Bake
	t.Expected = pretty(expected)
	t.ETA = now.Add(expected - elapsed).UTC().Round(time.Millisecond)
	if ideal > 0 {
		t.Ratio = float64(int(float64(expected)/float64(ideal)*100)) / 100
	}
	return t
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
