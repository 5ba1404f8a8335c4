package rollout

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Failure-domain stages (strategy.failureDomain, maxUnprovenDomains): a
// stage takes up to plan.Domains values of the failure-domain label, and
// the next value outside it waits for a new stage: every node of the stage
// has an outcome and, when the strategy bakes, the bake has passed. So no
// more than plan.Domains values ever hold unproven nodes (desired config
// written, not yet provisioned and baked). One value (the default) is a
// value at a time. A value joins the stage in progress when its first node
// starts, while the stage has room; a wave boundary starts a new stage too,
// and after its bake nothing is unproven, so the new stage counts only the
// values it starts.
//
// The stage's values are the record's domains (domain is the first); a new
// term starts a new stage at its first start (placeAll clears domainSet),
// as it always did. The set is small (at most plan.Domains), so looking in
// it is cheap.

// domainBoundary reports whether starting n needs a new failure-domain
// stage: none is in progress, or n's value is not one of the stage's and
// the stage has no room for another.
func (s *State) domainBoundary(n *node) bool {
	if s.plan.DomainKey == "" {
		return false
	}
	ds := s.rollout.GetDomains()
	return !s.domainSet || len(ds) == 0 || (!slices.Contains(ds, n.domain) && len(ds) >= max(1, s.plan.Domains))
}

// enterDomain puts n's value in the stage in progress as n starts; fresh:
// n starts a new stage (after a boundary), which begins with its value.
// A value new to the stage is an event (DomainStarted).
func (s *State) enterDomain(n *node, fresh bool) {
	if s.plan.DomainKey == "" {
		return
	}
	r := s.rollout
	was := slices.Contains(r.GetDomains(), n.domain)
	if fresh || !s.domainSet {
		r.Domains = nil
	} else if was {
		return
	}
	s.domainSet = true
	r.Domains = append(r.Domains, n.domain)
	r.Domain = r.Domains[0]
	s.changed()
	if was {
		return // still in progress from the stage before (a wave boundary)
	}
	what := fmt.Sprintf("%s %s", s.plan.DomainKey, contract.DomainLabel(n.domain))
	if lim := max(1, s.plan.Domains); lim > 1 {
		what += fmt.Sprintf(" (%d of up to %d %s values in progress: %s)", len(r.Domains), lim, s.plan.DomainKey, s.domainLabels())
	}
	s.emit(s.rolloutEvent("DomainStarted", what))
}

// domainLabels names the stage's failure-domain values.
func (s *State) domainLabels() string {
	labels := make([]string, len(s.rollout.GetDomains()))
	for i, d := range s.rollout.GetDomains() {
		labels[i] = contract.DomainLabel(d)
	}
	return strings.Join(labels, ", ")
}
