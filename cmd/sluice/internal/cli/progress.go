package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Exit codes of `sluice rollout status`, one per outcome.
const (
	ExitSucceeded       = 0 // also: still progressing, without --watch
	ExitUnreadable      = 1 // the status could not be read, or the phase is unknown
	ExitPartiallyFailed = 2
	ExitRolledBack      = 3
	ExitAborted         = 4
)

// rolloutExitCode maps a rollout's phase to the exit code of `rollout status`.
func rolloutExitCode(p sluicev1.RolloutPhase) int {
	switch p {
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING:
		return ExitSucceeded
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED:
		return ExitPartiallyFailed
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK:
		return ExitRolledBack
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED:
		return ExitAborted
	}
	return ExitUnreadable
}

// terminal reports whether a rollout in phase p has ended.
func terminal(p sluicev1.RolloutPhase) bool {
	return p != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && p != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING &&
		p != sluicev1.RolloutPhase_ROLLOUT_PHASE_UNSPECIFIED
}

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

// countsLine lists how many of the rollout's nodes are in each place.
func countsLine(c *sluicev1.RolloutCounts) string {
	line := fmt.Sprintf("pending %d, in progress %d, provisioned %d, failed %d, skipped %d",
		c.GetPending(), c.GetInProgress(), c.GetProvisioned(), c.GetFailed(), c.GetSkipped())
	if c.GetTimedOut()+c.GetReverting()+c.GetReverted() > 0 {
		line += fmt.Sprintf(", timed out %d, reverting %d, reverted %d", c.GetTimedOut(), c.GetReverting(), c.GetReverted())
	}
	return line
}

// strategyLine describes the strategy's fields that are set.
func strategyLine(st *sluicev1.Strategy) string {
	mp := st.GetMaxParallel()
	if mp == "" {
		mp = "1"
	}
	parts := []string{"max parallel " + mp}
	if st.GetFirstWave() > 0 {
		g := st.GetWaveGrowth()
		if g == 0 {
			g = 2
		}
		parts = append(parts, fmt.Sprintf("waves from %d growing ×%g", st.GetFirstWave(), g))
	}
	if d := st.GetFailureDomain(); d != "" {
		parts = append(parts, "one "+d+" at a time")
	}
	if b := st.GetBakeTime(); b != nil {
		parts = append(parts, "bake "+b.AsDuration().String())
	}
	budget := st.GetFailureBudget()
	if budget == "" {
		budget = "0"
	}
	parts = append(parts, "failure budget "+budget)
	for _, d := range []struct {
		name string
		v    interface{ AsDuration() time.Duration }
		set  bool
	}{{"apply deadline", st.GetApplyDeadline(), st.GetApplyDeadline() != nil},
		{"pickup deadline", st.GetPickupDeadline(), st.GetPickupDeadline() != nil},
		{"progress deadline", st.GetProgressDeadline(), st.GetProgressDeadline() != nil}} {
		if d.set {
			parts = append(parts, d.name+" "+d.v.AsDuration().String())
		}
	}
	if st.GetRetryInvalid() {
		parts = append(parts, "retrying invalid fingerprints")
	}
	return strings.Join(parts, ", ")
}

// stageLine says which wave or failure domain is in progress, if any.
func stageLine(r *sluicev1.Rollout, now time.Time) string {
	var parts []string
	if r.GetWave() > 0 {
		parts = append(parts, fmt.Sprintf("wave %d", r.GetWave()))
	}
	if d := r.GetDomain(); d != "" {
		if v, ok := strings.CutPrefix(d, "0"); ok {
			parts = append(parts, r.GetStrategy().GetFailureDomain()+" "+v)
		} else {
			parts = append(parts, "nodes without "+r.GetStrategy().GetFailureDomain())
		}
	}
	if b := r.GetBakeUntil(); b != nil && b.AsTime().After(now) {
		parts = append(parts, "baking for "+b.AsTime().Sub(now).Round(time.Second).String())
	}
	return strings.Join(parts, ", ")
}

// maxNodeRows bounds the nodes listed; the rest are counted.
const maxNodeRows = 10

// Widths the node table cuts its cells to.
const (
	outputWidth  = 60
	messageWidth = 140
)

// nodeLines is a table of the nodes that did not simply succeed: the
// record's failures (invalid, timed out, refused, a failed revert), then the
// nodes that left. The failing check's output follows the message, cut short.
func nodeLines(r *sluicev1.Rollout) []string {
	outcomes := append(slices.Clip(r.GetFailures()), r.GetSkipped()...)
	if len(outcomes) == 0 {
		return nil
	}
	rows := [][]string{{"NODE", "RESULT", "CHECK", "MESSAGE"}}
	for i, o := range outcomes {
		if i == maxNodeRows {
			break
		}
		res := o.GetResult()
		if i >= len(r.GetFailures()) && res == sluicev1.NodeResult_NODE_RESULT_UNSPECIFIED {
			res = sluicev1.NodeResult_NODE_RESULT_SKIPPED
		}
		msg := strings.Join(strings.Fields(o.GetMessage()), " ")
		if res == sluicev1.NodeResult_NODE_RESULT_SKIPPED && msg == "" {
			msg = "left during the rollout (not a failure)"
		}
		if out := o.GetOutput(); strings.TrimSpace(out) != "" {
			msg = strings.TrimPrefix(msg+" | output: "+oneLine(out, outputWidth), " ")
		}
		rows = append(rows, []string{o.GetNode(), nodeResult(res), orNone(o.GetFailedCheck()), oneLine(msg, messageWidth)})
	}
	var b strings.Builder
	_ = writeTable(&b, rows) // a strings.Builder does not fail
	lines := []string{"nodes that did not simply succeed:"}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		lines = append(lines, "  "+strings.TrimRight(l, " "))
	}
	if n := len(outcomes) - maxNodeRows; n > 0 {
		lines = append(lines, fmt.Sprintf("  … and %d more (sluice get nodes; sluice events --kind node)", n))
	}
	return lines
}

func nodeResult(r sluicev1.NodeResult) string {
	if r == sluicev1.NodeResult_NODE_RESULT_UNSPECIFIED {
		return "failed"
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(r.String(), "NODE_RESULT_")), "_", " ")
}

// rolloutLines is the full status block of r; its last line is the outcome.
func rolloutLines(r *sluicev1.Rollout, now time.Time) []string {
	rev := short(r.GetRevision())
	if r.GetPreviousRevision() != "" {
		rev += " (from " + short(r.GetPreviousRevision()) + ")"
	}
	lines := []string{
		fmt.Sprintf("rollout   %s (generation %d)", r.GetId(), r.GetGeneration()),
		fmt.Sprintf("revision  %s", rev),
		fmt.Sprintf("strategy  %s", strategyLine(r.GetStrategy())),
		fmt.Sprintf("phase     %s, started %s ago, ran %s", rolloutPhase(r.GetPhase()), age(now, r.GetStartedAt()), rolloutDuration(r, now)),
		progressBar(r.GetCounts().GetProvisioned(), r.GetCounts().GetTotal(), barWidth) + " provisioned",
		countsLine(r.GetCounts()),
	}
	if st := stageLine(r, now); st != "" && !terminal(r.GetPhase()) {
		lines = append(lines, "stage     "+st)
	}
	lines = append(lines, nodeLines(r)...)
	return append(lines, outcomeLine(r))
}

// progressLine is one line per change, for output that is not a terminal.
func progressLine(r *sluicev1.Rollout, now time.Time) string {
	return fmt.Sprintf("%s %s %s %s %s", now.Format(time.TimeOnly), r.GetId(), rolloutPhase(r.GetPhase()),
		progressBar(r.GetCounts().GetProvisioned(), r.GetCounts().GetTotal(), 20), countsLine(r.GetCounts()))
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
	if r.GetReason() != "" {
		line += ": " + oneLine(r.GetReason(), 200)
	}
	return line
}
