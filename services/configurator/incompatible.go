package configurator

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// refuseIncompatible refuses, before anything is stored, a revision whose
// rollout under strategy st the coordinator would refuse for version skew:
// a present node would be written a config its agent cannot read
// (contract.CannotRead, the rule the coordinator asks before writing any
// node). The answer names each such node, its agent's version and features
// and the features it lacks. Strategy skipIncompatible skips the check (the
// coordinator then skips those nodes). A node whose agent says it runs its
// target already is left out: the coordinator writes it nothing. The
// coordinator checks again before touching any node: this check is for the
// operator, who should hear "no" now rather than read it in a rollout
// record. It lists the presences only when the strategy asks for a feature
// at all: a plain apply costs nothing more.
func (s *Service) refuseIncompatible(ctx context.Context, rev *sluicev1.Revision, st *sluicev1.Strategy) error {
	if st.GetSkipIncompatible() {
		return nil
	}
	plan, err := contract.ResolveStrategy(st, 1)
	if err != nil {
		return nil // validated already; the coordinator judges what it resolves to
	}
	bake := plan.BakeChecksOf()
	if contract.FeaturesOf(&sluicev1.DesiredConfig{BakeChecks: bake}) == nil {
		return nil
	}
	nodes, err := s.st.fleet.List(ctx)
	if err != nil {
		return unavailable(fmt.Errorf("read the nodes: %w", err))
	}
	hits := incompatibleNodes(rev, bake, nodes)
	if len(hits) == 0 {
		return nil
	}
	return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf(
		"refused: revision %s would be rolled out to %d node(s) whose agent cannot read its config: %s; nothing was stored. "+
			"Upgrade their agents (docs/deploy.md, \"Version skew and upgrades\"), or apply with --skip-incompatible to skip them",
		render.Short(rev.GetId()), len(hits), andMore(hits[:min(len(hits), maxRefusedListed)], len(hits)))}
}

// incompatibleNodes describes, sorted by node (List's order), each present
// node of nodes whose agent cannot read its config of rev asking for bake:
// "node-02: its agent v0.4.0 does not read config feature(s) bakeChecks, …".
// A presence that does not decode is left out (the coordinator judges it).
func incompatibleNodes(rev *sluicev1.Revision, bake *sluicev1.BakeChecks, nodes []store.Entry[*sluicev1.NodePresence]) []string {
	var out []string
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		p := n.Value
		cfg := render.NodeConfig(rev, p.GetLabels())
		fp := render.Fingerprint(cfg)
		if p.GetInForceFingerprint() == fp {
			continue // it runs its target: nothing is written to it
		}
		missing := contract.CannotRead(p.GetConfigFeatures(), &sluicev1.DesiredConfig{BakeChecks: bake, Config: cfg})
		if missing == nil {
			continue
		}
		out = append(out, n.Key+": "+contract.DescribeCannotRead(p.GetAgentVersion(), p.GetConfigFeatures(), missing, render.Short(fp)))
	}
	return out
}
