package configurator

import (
	"context"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A registry sync (syncRegistry, run by a registry's syncer in
// syncer.go) takes s.mu, reads the stored intents once, has planSync
// (plan.go, pure) decide the change from the answer, and commits that plan
// through the apply journal as an apply does (commit.go).

// syncRegistry merges snap, registry spec's answer, into the stored
// intents and moves the head when the effective set changed. confirm is the
// operator's confirmation of a held or pending deletion, if any; st the
// deletions pending before this answer and the time. The plan says what it
// did; an error means nothing was committed (or the journal completes it).
func (s *Service) syncRegistry(ctx context.Context, spec *sluicev1.RegistrySpec, snap registry.Snapshot, confirm *sluicev1.RegistryConfirm,
	st settling) (syncPlan, error) {
	if err := s.mu.Lock(ctx); err != nil {
		return syncPlan{}, err
	}
	defer s.mu.Unlock()
	if err := s.rollForward(ctx); err != nil {
		return syncPlan{}, err
	}
	if err := s.refuseLost(ctx, "the sync of registry "+spec.GetName()); err != nil {
		return syncPlan{}, err
	}
	in, err := s.readStored(ctx)
	if err != nil {
		return syncPlan{}, err
	}
	plan := planSync(spec, snap, in.live, in.unreadable, confirm, st)
	plan.stored = in.live
	if plan.journal == nil {
		return plan, nil
	}
	plan.journal.Strategy = in.head.Value.GetStrategy()
	after := in.landed(plan.journal)
	plan.stored = after.live
	set := change.Effective(after.live)
	if err := s.checkFits(plan.journal, plan.journal.GetIntents(), set, render.RevisionID(set)); err != nil {
		return plan, err
	}
	name := spec.GetName()
	_, err = s.commit(ctx, plan.journal, func(_, _ []string) string { return plan.reason(name) }, &in)
	return plan, err
}
