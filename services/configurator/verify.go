package configurator

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// verifyFleet runs the fleet verifier (pkg/verify) on the set a revision
// would hold, the present nodes and the strategy, before that revision is
// cut: its errors refuse the request with every finding, and with strict
// (the request's or Config.StrictVerify) its warnings do too. Otherwise the
// findings (warnings only) are returned for the answer to show.
//
// what names what was verified, for the refusal: "the set the apply
// produces", "the undo's strategy" (a nil set: the strategy rules only).
func (s *Service) verifyFleet(ctx context.Context, what string, set []*sluicev1.Intent, st *sluicev1.Strategy, strict bool) ([]*sluicev1.Finding, error) {
	entries, err := s.st.fleet.List(ctx)
	if err != nil {
		return nil, unavailable(fmt.Errorf("read the nodes: %w", err))
	}
	nodes := make([]verify.Node, 0, len(entries))
	for _, e := range entries {
		if e.Err == nil && !contract.IsControlKey(e.Key) {
			nodes = append(nodes, verify.Node{Name: e.Key, Labels: e.Value.GetLabels()})
		}
	}
	fs := verify.Verify(verify.Input{Intents: set, Nodes: nodes, Strategy: st})
	strict = strict || s.cfg.StrictVerify
	if !verify.Refuses(fs, strict) {
		return fs, nil
	}
	found := contract.Plural(verify.Errors(fs), "error")
	if strict && verify.Errors(fs) < len(fs) {
		found = contract.Plural(len(fs), "finding") + " (strict: warnings refuse too)"
	}
	desc := fmt.Sprintf("refused by the fleet verifier: %s in %s, on the %s present; nothing was stored. "+
		"Fix what each finding names (docs/intents.md, \"Fleet rules\")", found, what, contract.Plural(len(nodes), "node"))
	if len(fs) > maxListedErrors {
		desc += fmt.Sprintf(" (the first %d findings are listed)", maxListedErrors)
		fs = fs[:maxListedErrors]
	}
	return nil, &apiError{code: contract.ErrCodeInvalid, desc: desc, findings: fs}
}
