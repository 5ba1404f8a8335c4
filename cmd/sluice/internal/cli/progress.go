package cli

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// barWidth is the number of cells in the progress bar.
const barWidth = 30

// progressBar draws done of total as "[#######.....] 35/100".
func progressBar(done, total uint32, width int) string {
	filled := 0
	if total > 0 {
		filled = int(min(uint64(done), uint64(total)) * uint64(width) / uint64(total))
	}
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
}

// countsLine lists how many of the rollout's nodes are in each place, in
// the words of contract.TallyOf: the forward categories, which add up to
// the total (stopped in flight and not started once the rollout stopped),
// then the revert's, and what does not add up, if anything.
func countsLine(r *sluicev1.Rollout) string {
	t := contract.TallyOf(r)
	var parts []string
	for _, c := range t.Nodes {
		if (c.Key == contract.CountStopped || c.Key == contract.CountNotStarted) && t.N(contract.CountStopped)+t.N(contract.CountNotStarted) == 0 {
			continue // a rollout that has not stopped has neither
		}
		p := fmt.Sprintf("%s %d", c.Words, c.N)
		for _, of := range c.Of {
			switch {
			case of.N == 0:
			case of.Key == contract.CountIncompatible:
				p += fmt.Sprintf(" (%d: their agent cannot read the config)", of.N)
			default:
				p += fmt.Sprintf(" (%d %s)", of.N, of.Words)
			}
		}
		parts = append(parts, p)
	}
	for _, c := range t.Revert {
		if c.Key != contract.CountRevertFailed || c.N > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.Words, c.N))
		}
	}
	if t.Off != "" {
		parts = append(parts, t.Off)
	}
	return strings.Join(parts, ", ")
}

// operationsLine counts the node operations the rollout started, by
// contract.TallyOf: in progress, completed, failed, cancelled at their
// deadline and stopped in flight add up to those attempted.
func operationsLine(r *sluicev1.Rollout) string {
	t := contract.TallyOf(r)
	parts := make([]string, 0, len(t.Operations))
	for _, c := range t.Operations {
		parts = append(parts, fmt.Sprintf("%d %s", c.N, c.Words))
	}
	return fmt.Sprintf("operations %d attempted: %s", t.Attempted, strings.Join(parts, ", "))
}

// strategyLine describes the strategy: the fields set, and the defaults
// that always apply (max parallel, failure budget, the growth of waves)
// marked "(default)".
func strategyLine(st *sluicev1.Strategy) string {
	orDefault := func(v, def string) string {
		if v == "" {
			return def + " (default)"
		}
		return v
	}
	parts := []string{"max parallel " + orDefault(st.GetMaxParallel(), "1")}
	if st.GetFirstWave() > 0 {
		growth := fmt.Sprintf("×%g", st.GetWaveGrowth())
		if st.GetWaveGrowth() == 0 {
			growth = fmt.Sprintf("×%g (default)", contract.DefaultWaveGrowth)
		}
		parts = append(parts, fmt.Sprintf("waves from %d growing %s", st.GetFirstWave(), growth))
	}
	if d := st.GetFailureDomain(); d != "" {
		parts = append(parts, contract.DomainsAtATime(d, int(st.GetMaxUnprovenDomains())))
	}
	if b := st.GetBakeTime(); b != nil {
		parts = append(parts, "bake "+b.AsDuration().String())
	}
	if k := st.GetBakeChecks(); k > 0 {
		every := contract.DefaultBakeCheckInterval
		if i := st.GetBakeCheckInterval(); i != nil {
			every = i.AsDuration()
		}
		parts = append(parts, fmt.Sprintf("%d passed check re-runs (every %s) on every node", k, every))
	}
	parts = append(parts, "failure budget "+orDefault(st.GetFailureBudget(), "0"))
	for _, d := range []struct {
		name string
		v    *durationpb.Duration
	}{{"apply deadline", st.GetApplyDeadline()}, {"pickup deadline", st.GetPickupDeadline()}, {"progress deadline", st.GetProgressDeadline()}} {
		if d.v != nil {
			parts = append(parts, d.name+" "+d.v.AsDuration().String())
		}
	}
	if st.GetRetryInvalid() {
		parts = append(parts, "retrying invalid fingerprints")
	}
	if st.GetSkipIncompatible() {
		parts = append(parts, "skipping nodes whose agent cannot read the config")
	}
	if ws := st.GetWindows(); len(ws) > 0 {
		parts = append(parts, "waves start within "+strings.Join(ws, " or "))
	}
	for _, g := range st.GetGates() {
		if rg, err := contract.ResolveGate(g); err == nil {
			parts = append(parts, "gate "+rg.Describe())
		} else {
			parts = append(parts, "gate "+contract.FormatGate(g))
		}
	}
	return strings.Join(parts, ", ")
}

// stageLine says which wave or failure domain is in progress, if any.
func stageLine(r *sluicev1.Rollout, now time.Time) string {
	var parts []string
	if r.GetWave() > 0 {
		parts = append(parts, fmt.Sprintf("wave %d", r.GetWave()))
	}
	if ds := r.GetDomains(); len(ds) > 1 {
		parts = append(parts, domainsStage(r, ds))
	} else if d := r.GetDomain(); d != "" {
		parts = append(parts, domainStage(r, d))
	}
	if held := bakeHeld(r); held != "" {
		parts = append(parts, held)
	} else if b := r.GetBakeUntil(); b != nil && b.AsTime().After(now) {
		// Never "baking for 0s": under half a second left still rounds to 1s.
		parts = append(parts, "baking for "+bakeLeft(b.AsTime().Sub(now)).String())
		if want := r.GetStrategy().GetBakeChecks(); want > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d checks passed on every node", r.GetBakeChecksPassed(), want))
		}
	} else if want := r.GetStrategy().GetBakeChecks(); b != nil && want > 0 && r.GetBakeChecksPassed() < want {
		// The bake's time is over; its nodes' re-runs are not.
		parts = append(parts, fmt.Sprintf("baking: %d of %d checks passed on every node", r.GetBakeChecksPassed(), want))
	}
	if w := r.GetWaiting(); w != "" {
		if u := r.GetWaitingUntil(); u != nil && u.AsTime().After(now) {
			// A window opens or a freeze ends then; a gate gives up.
			word := "opens in "
			if strings.HasPrefix(w, contract.GateWaitPrefix) {
				word = "fails in "
			}
			w += " (" + word + strings.TrimSuffix(max(u.AsTime().Sub(now).Round(time.Minute), time.Minute).String(), "0s") + ")"
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, ", ")
}

// bakeHeld says how much of the bake is left while a pause holds it (its
// countdown stands still), "" when none does.
func bakeHeld(r *sluicev1.Rollout) string {
	left := r.GetBakeLeft()
	if left == nil {
		return ""
	}
	s := fmt.Sprintf("bake held by the pause: %s of %s left", bakeLeft(left.AsDuration()), r.GetStrategy().GetBakeTime().AsDuration())
	if want := r.GetStrategy().GetBakeChecks(); want > 0 {
		s += fmt.Sprintf(", %d of %d checks passed on every node", r.GetBakeChecksPassed(), want)
	}
	return s
}

// bakeLeft is a bake's time still to run, to the second: never "0s" while
// some is left.
func bakeLeft(d time.Duration) time.Duration { return max(d.Round(time.Second), time.Second) }

// rolloutLines is the full status block of r with its live nodes (nil when
// they were not read); its last line is the outcome.
func rolloutLines(r *sluicev1.Rollout, live []liveNode, now time.Time) []string {
	return rolloutBlock(r, live, now, terminalWidths)
}

// rolloutBlock is rolloutLines with the node table's cells cut to w.
func rolloutBlock(r *sluicev1.Rollout, live []liveNode, now time.Time, w cellWidths) []string {
	t := contract.TallyOf(r)
	rev := short(r.GetRevision())
	if p := r.GetPreviousRevision(); p != "" && p != r.GetRevision() {
		rev += " (from " + short(p) + ")" // not "X (from X)": a rollout of the revision in force (an undo to it, a retry)
	}
	lines := []string{
		fmt.Sprintf("rollout   %s (generation %d)", r.GetId(), r.GetGeneration()),
		fmt.Sprintf("revision  %s", rev),
	}
	if line := contract.SourceLine(r.GetSource()); line != "" {
		lines = append(lines, "source    from "+line)
	}
	lines = append(lines,
		fmt.Sprintf("strategy  %s", strategyLine(r.GetStrategy())),
		fmt.Sprintf("phase     %s, started %s ago, ran %s", rolloutPhase(r.GetPhase()), age(now, r.GetStartedAt()), rolloutDuration(r, now)),
		progressBar(t.N(contract.CountProvisioned), t.Total, barWidth)+" provisioned",
		countsLine(r),
	)
	if t.Attempted > 0 {
		lines = append(lines, operationsLine(r))
	}
	if st := stageLine(r, now); st != "" && !contract.Terminal(r.GetPhase()) {
		lines = append(lines, "stage     "+st)
	}
	if p := pauseLine(r); p != "" {
		lines = append(lines, "paused    "+p)
	}
	if st := stagesLine(r); st != "" {
		lines = append(lines, "stages    "+st)
	}
	lines = append(lines, gateLines(r, now)...)
	lines = append(lines, nodeTable(r, live, now, w)...)
	return append(lines, outcomeLine(r))
}

// gateLines says what each gate last said, and which gate stopped the
// rollout, with its query, value and threshold.
func gateLines(r *sluicev1.Rollout, now time.Time) []string {
	var lines []string
	for _, g := range r.GetGates() {
		what := g.GetVerdict()
		if b := g.GetBefore(); b != "" {
			what += " before " + b
		}
		lines = append(lines, fmt.Sprintf("gate      %s (%s, %s ago)", g.GetMessage(), what, age(now, g.GetAt())))
	}
	if b := r.GetBlockedBy(); b != nil {
		line := "blocked   by gate " + b.GetMessage()
		if q := b.GetQuery(); q != "" && b.GetComparison() != "" {
			line += fmt.Sprintf("; query %s must be %s %s, was %s", q, b.GetComparison(), contract.FormatValue(b.GetThreshold()), contract.FormatValue(b.GetValue()))
		}
		lines = append(lines, line)
	}
	return lines
}

// stagesLine sums up each wave or failure-domain stage started, its nodes
// started by category (contract.StageTallyOf): "wave 1: 2/2 provisioned;
// wave 2: running, 1/3 provisioned so far, 2 in progress".
func stagesLine(r *sluicev1.Rollout) string {
	var parts []string
	for _, st := range r.GetStages() {
		t := contract.StageTallyOf(r, st)
		if st.GetEndedAt() == nil {
			state := "running"
			if contract.Terminal(r.GetPhase()) {
				state = "stopped"
			}
			if t.Total > 0 {
				state += ", " + stageCounts(t, " so far")
			}
			parts = append(parts, stageName(r, st)+": "+state)
			continue
		}
		parts = append(parts, stageName(r, st)+": "+stageCounts(t, ""))
	}
	return strings.Join(parts, "; ")
}

// stageCounts is a stage's nodes started by category, each that counts one:
// "1/4 provisioned, 1 failed (1 timed out), 1 skipped, 1 stopped in flight"
// (so adds up to the 4), then what does not add up. so is said after the
// provisioned.
func stageCounts(t contract.Tally, so string) string {
	line := fmt.Sprintf("%d/%d provisioned%s", t.N(contract.CountProvisioned), t.Total, so)
	for _, c := range t.Rest(contract.CountProvisioned) {
		line += fmt.Sprintf(", %d %s", c.N, c.Words)
		for _, of := range c.Of {
			if of.N > 0 {
				line += fmt.Sprintf(" (%d %s)", of.N, of.Words)
			}
		}
	}
	if t.Off != "" {
		line += "; " + t.Off
	}
	return line
}

// pauseLine says whether a running rollout is held by 'sluice rollout
// pause', and whether the coordinator has acknowledged it.
func pauseLine(r *sluicev1.Rollout) string {
	req := r.GetPause()
	if !req.GetPaused() || contract.Terminal(r.GetPhase()) {
		return ""
	}
	if contract.PauseReached(r.GetPauseAck(), req.GetGeneration()) {
		return "held: no node operation in flight, none starts until 'sluice rollout resume' (" + contract.DescribePause(req) + ")"
	}
	return "pausing: no node operation starts; waiting for " + orNone(r.GetPauseAck().GetWaitingFor()) + " (" + contract.DescribePause(req) + ")"
}

// progress is where r is in one line: id, phase, bar and counts. Output
// that is not a terminal gets it, after the time, each time it changes.
func progress(r *sluicev1.Rollout) string {
	phase := rolloutPhase(r.GetPhase())
	if pauseLine(r) != "" {
		phase += " (paused)"
	}
	t := contract.TallyOf(r)
	return fmt.Sprintf("%s %s %s %s", r.GetId(), phase, progressBar(t.N(contract.CountProvisioned), t.Total, 20), countsLine(r))
}

// outcomeLine states where the rollout is, or how it ended, and why.
func outcomeLine(r *sluicev1.Rollout) string {
	var what string
	switch r.GetPhase() {
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING:
		what = "is progressing"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING:
		what = "is reverting the nodes it touched"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED:
		what = "succeeded"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED:
		what = "partially failed (within the failure budget)"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK:
		what = "rolled back"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED:
		what = "aborted"
	default:
		what = "is in an unknown phase"
	}
	line := fmt.Sprintf("rollout %s %s", r.GetId(), what)
	if reason := outcomeReason(r); reason != "" {
		line += ": " + strings.Join(strings.Fields(reason), " ") // never cut: the decisive part is often last
	}
	return line
}

// outcomeReason is the record's reason or, for an ended rollout that has
// none, its first failure.
func outcomeReason(r *sluicev1.Rollout) string {
	if r.GetReason() != "" || !contract.Terminal(r.GetPhase()) || len(r.GetFailures()) == 0 {
		return r.GetReason()
	}
	f := r.GetFailures()[0]
	what := nodeResult(f.GetResult())
	if r := f.GetResult(); r == sluicev1.NodeResult_NODE_RESULT_INVALID || r == sluicev1.NodeResult_NODE_RESULT_UNSPECIFIED {
		what = "failed check " + orNone(f.GetFailedCheck())
	}
	return fmt.Sprintf("%s %s: %s", f.GetNode(), what, f.GetMessage())
}

// domainsStage names a failure-domain stage of several values, with the
// strategy's limit: "zone a, zone b (2 of at most 3 zone values unproven)".
func domainsStage(r *sluicev1.Rollout, ds []string) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = domainStage(r, d)
	}
	key := r.GetStrategy().GetFailureDomain()
	return fmt.Sprintf("%s (%d of at most %d %s values unproven)", strings.Join(names, ", "), len(ds),
		max(1, r.GetStrategy().GetMaxUnprovenDomains()), key)
}

// domainStage names the failure-domain stage of sort key d ("zone b",
// "nodes without zone").
func domainStage(r *sluicev1.Rollout, d string) string {
	key := r.GetStrategy().GetFailureDomain()
	if d == contract.DomainSortKey(key, nil) {
		return "nodes without " + key
	}
	return key + " " + contract.DomainLabel(d)
}
