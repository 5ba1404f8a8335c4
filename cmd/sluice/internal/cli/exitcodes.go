package cli

import (
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Exit codes, one table for every command (docs/operations.md, "Exit
// codes"): 0 and 1 as usual, 2 for a usage error, for `sluice rollout
// status` one per outcome, and `sluice diff`'s as kubectl diff's. Partially failed was 2 until 2026-11, the code of
// a usage error too.
const (
	ExitSucceeded       = 0 // also: still progressing, without --watch
	ExitUnreadable      = 1 // the status could not be read, or the phase is unknown; any other failure
	ExitUsage           = 2 // a bad flag, argument or subcommand: nothing was done
	ExitRolledBack      = 3
	ExitAborted         = 4
	ExitPartiallyFailed = 5
	// ExitDiffers ends `sluice diff` when apply would store a new revision,
	// as kubectl diff's 1 says there are differences.
	ExitDiffers = 1
	// ExitDiffFailed ends `sluice diff` when apply would be refused or the
	// diff could not be made: any failure of diff, so that its 1 means
	// differences only (kubectl diff: above 1).
	ExitDiffFailed = 6
	// ExitRecoverReview ends `sluice recover --from-nodes` when it wrote the
	// intents it could rebuild but something needs the operator first: a
	// conflict, a selector to edit, a node that did not answer.
	ExitRecoverReview = 7
	// exitInterrupted ends --watch on Ctrl-C, as a shell reports SIGINT.
	exitInterrupted = 130
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

// exitFor ends the command with the exit code of phase.
func exitFor(p sluicev1.RolloutPhase) error {
	if code := rolloutExitCode(p); code != 0 {
		return silentExit(code)
	}
	return nil
}
