package contract

import sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"

// The rollout phase rules, defined once: the coordinator, the configurator,
// the CLI and the tests all ask here.

// Terminal reports whether a rollout in phase p has ended. A terminal rollout
// record is never written again.
func Terminal(p sluicev1.RolloutPhase) bool {
	switch p {
	case sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED,
		sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED:
		return true
	}
	return false
}

// InForce reports whether a rollout that ended in phase p left its revision
// in force, so that it becomes rollouts/last-applied: Succeeded and
// PartiallyFailed (failures within the budget) do; RolledBack and Aborted do not.
func InForce(p sluicev1.RolloutPhase) bool {
	return p == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || p == sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED
}

// Active reports whether a rollout in phase p is still running (progressing or reverting).
func Active(p sluicev1.RolloutPhase) bool {
	return p == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING || p == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
}

// What a new head does while another rollout runs (Strategy.while_active).
const (
	WhileActiveQueue     = "queue"     // it starts when the running rollout ends (the default)
	WhileActiveSupersede = "supersede" // the running one starts no more nodes and ends Aborted once its in-flight nodes settled
)

// Supersedes reports whether a head with strategy s stops a running rollout
// rather than waiting for it to end.
func Supersedes(s *sluicev1.Strategy) bool { return s.GetWhileActive() == WhileActiveSupersede }
