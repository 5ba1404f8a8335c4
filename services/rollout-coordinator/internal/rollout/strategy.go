package rollout

import (
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Strategy defaults, documented in docs/rollouts.md (defined in contract).
const (
	DefaultWaveGrowth       = contract.DefaultWaveGrowth
	DefaultApplyDeadline    = contract.DefaultApplyDeadline
	DefaultPickupDeadline   = contract.DefaultPickupDeadline
	DefaultProgressDeadline = contract.DefaultProgressDeadline
)

// plan is a strategy resolved against the number of nodes in the rollout.
type plan = contract.Plan

// resolve turns st into a plan for total nodes (contract.ResolveStrategy).
func resolve(st *sluicev1.Strategy, total int) (plan, error) {
	return contract.ResolveStrategy(st, total)
}

// maxParallel resolves only the strategy's maxParallel.
func maxParallel(st *sluicev1.Strategy, total int) (int, error) {
	return contract.ResolveMaxParallel(st, total)
}

// fallbackPlan is what a rollout whose stored strategy does not resolve
// follows: one node at a time rather than not at all.
func fallbackPlan() plan {
	return plan{MaxParallel: 1, ApplyDeadline: DefaultApplyDeadline, PickupDeadline: DefaultPickupDeadline, Progress: DefaultProgressDeadline}
}
