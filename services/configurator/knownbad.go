package configurator

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// maxRefusedListed bounds the nodes a refusal names (it says how many more).
const maxRefusedListed = 10

// refuseKnownBad refuses, before anything is stored, a revision whose
// rollout the coordinator would refuse: a present node would get a
// fingerprint recorded invalid (change.KnownBad). The answer names each such
// node, its fingerprint and why it is known bad. Strategy retryInvalid skips
// the check (the coordinator then forgets those fingerprints on purpose).
// The coordinator checks again before touching any node: this check is for
// the operator, who should hear "no" now rather than read it in a rollout
// record.
func (s *Service) refuseKnownBad(ctx context.Context, rev *sluicev1.Revision, st *sluicev1.Strategy) error {
	if st.GetRetryInvalid() {
		return nil
	}
	bad, err := s.st.invalid.List(ctx, ">")
	if err != nil {
		return unavailable(fmt.Errorf("read the invalid fingerprints: %w", err))
	}
	known := change.Known(bad)
	if len(known) == 0 {
		return nil
	}
	nodes, err := s.st.fleet.List(ctx)
	if err != nil {
		return unavailable(fmt.Errorf("read the nodes: %w", err))
	}
	hits := change.KnownBad(rev, nodes, known)
	if len(hits) == 0 {
		return nil
	}
	listed := make([]string, 0, maxRefusedListed)
	for _, h := range hits[:min(len(hits), maxRefusedListed)] {
		listed = append(listed, h.Describe(120))
	}
	return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf(
		"refused: revision %s would give %d node(s) a config recorded invalid: %s; nothing was stored. "+
			"Fix the intents, or apply with --retry-invalid to roll it out again on purpose (sluice get fingerprints shows why each failed)",
		render.Short(rev.GetId()), len(hits), andMore(listed, len(hits)))}
}
