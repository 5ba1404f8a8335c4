package cli

import (
	"fmt"
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
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING:
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
	return p != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && p != sluicev1.RolloutPhase_ROLLOUT_PHASE_UNSPECIFIED
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
	return fmt.Sprintf("pending %d, in progress %d, provisioned %d, failed %d, skipped %d",
		c.GetPending(), c.GetInProgress(), c.GetProvisioned(), c.GetFailed(), c.GetSkipped())
}

// maxFailureLines bounds the failures listed; the rest are counted.
const maxFailureLines = 10

// failureLines lists the nodes that failed, with why.
func failureLines(r *sluicev1.Rollout) []string {
	fs := r.GetFailures()
	if len(fs) == 0 {
		return nil
	}
	lines := []string{"failures:"}
	for i, f := range fs {
		if i == maxFailureLines {
			lines = append(lines, fmt.Sprintf("  … and %d more (sluice get nodes)", len(fs)-i))
			break
		}
		why := f.GetMessage()
		if f.GetFailedCheck() != "" {
			why = f.GetFailedCheck() + ": " + why
		}
		lines = append(lines, fmt.Sprintf("  %s: %s (%s)", f.GetNode(), oneLine(why, 100), nodePhase(f.GetPhase())))
	}
	return lines
}

// rolloutLines is the full status block of r; its last line is the outcome.
func rolloutLines(r *sluicev1.Rollout, now time.Time) []string {
	rev := short(r.GetRevision())
	if r.GetPreviousRevision() != "" {
		rev += " (from " + short(r.GetPreviousRevision()) + ")"
	}
	maxParallel := r.GetStrategy().GetMaxParallel()
	if maxParallel == "" {
		maxParallel = "1"
	}
	lines := []string{
		fmt.Sprintf("rollout   %s (generation %d)", r.GetId(), r.GetGeneration()),
		fmt.Sprintf("revision  %s", rev),
		fmt.Sprintf("strategy  max parallel %s", maxParallel),
		fmt.Sprintf("phase     %s, started %s ago, ran %s", rolloutPhase(r.GetPhase()), age(now, r.GetStartedAt()), rolloutDuration(r, now)),
		progressBar(r.GetCounts().GetProvisioned(), r.GetCounts().GetTotal(), barWidth) + " provisioned",
		countsLine(r.GetCounts()),
	}
	lines = append(lines, failureLines(r)...)
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
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED:
		what = "succeeded"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED:
		what = "partially failed (within the failure budget)"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK:
		what = "was rolled back"
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED:
		what = "was aborted"
	default:
		what = "is in an unknown phase"
	}
	line := fmt.Sprintf("rollout %s %s", r.GetId(), what)
	if r.GetReason() != "" {
		line += ": " + oneLine(r.GetReason(), 200)
	}
	return line
}
