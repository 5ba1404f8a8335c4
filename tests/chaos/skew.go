package chaos

// The version-skew fault (issue 38): in some seeds one or two agents are
// of the baseline release (agent.Config.Features empty: they read no
// config feature), and some changes ask for bake checks (the feature
// contract.FeatureBakeChecks), some of those with skipIncompatible. The
// coordinator must never write such an agent a config it cannot read: a
// rollout that starts with one is refused before it touches any node
// (ABORTED), or, with skipIncompatible, skips it (listed INCOMPATIBLE);
// and no fingerprint is ever recorded invalid because of such an agent
// (I9). docs/rollouts.md, "Agents too old for the config"; checkSkew.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// skewOdds: one seed in skewOdds draws the version-skew fault.
const skewOdds = 5

// baselineVersion is the version an agent of the baseline release states.
const baselineVersion = "chaos-baseline"

// SkewPlan is a version-skew fault: Old run as agents of the baseline
// release, and each change of Changes asks for bake checks.
type SkewPlan struct {
	Old     []string // sorted
	Changes map[int]SkewChange
}

// SkewChange is what a change of a SkewPlan asks for.
type SkewChange struct {
	Skip     bool   // strategy.skipIncompatible
	Passes   uint32 // strategy.bakeChecks
	Interval time.Duration
	Bake     time.Duration // the bake time, if the change has none
}

func (p *SkewPlan) String() string {
	var cs []string
	for _, i := range sortedInts(p.Changes) {
		c := p.Changes[i]
		what := "refused up front"
		if c.Skip {
			what = "skipIncompatible"
		}
		cs = append(cs, fmt.Sprintf("change %d bakeChecks %d every %s (%s)", i, c.Passes, c.Interval, what))
	}
	return fmt.Sprintf("agents of the baseline release (no config features): %s; %s", strings.Join(p.Old, ", "), strings.Join(cs, "; "))
}

func sortedInts[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// pickSkew draws a version-skew fault: one or two old agents, and bake
// checks on each change after the baseline with odds one in two (at least
// one change).
func (s Scenario) pickSkew(rng *rand.Rand, nodes []string) *SkewPlan {
	p := &SkewPlan{Changes: map[int]SkewChange{}}
	for _, i := range rng.Perm(len(nodes))[:1+rng.IntN(2)] {
		p.Old = append(p.Old, nodes[i])
	}
	slices.Sort(p.Old)
	first := 1 + rng.IntN(len(s.Changes)-1)
	for i := 1; i < len(s.Changes); i++ {
		c := SkewChange{Skip: rng.IntN(2) == 0, Passes: uint32(1 + rng.IntN(2)),
			Interval: ms(50 + rng.IntN(50)), Bake: ms(50 + rng.IntN(200))}
		if i == first || rng.IntN(2) == 0 {
			p.Changes[i] = c
		}
	}
	return p
}

// applySkew sets the skew's changes' strategies: bake checks need a bake
// time, which needs stages; a change without gets a bake time and, if it
// has no stages, waves of 1, 2, 4 … Done after pickExtras, which so sees
// the strategies as drawn.
func (s *Scenario) applySkew() {
	if s.Skew == nil {
		return
	}
	for i, c := range s.Skew.Changes {
		st := s.Changes[i].Strategy
		st.BakeChecks, st.BakeCheckInterval, st.SkipIncompatible = c.Passes, durationpb.New(c.Interval), c.Skip
		if st.GetBakeTime().AsDuration() <= 0 {
			if st.GetFirstWave() == 0 && st.GetFailureDomain() == "" {
				st.FirstWave, st.WaveGrowth = 1, 2
			}
			st.BakeTime = durationpb.New(c.Bake)
		}
	}
}

// features is what node's agent reads: nil (this version's, every
// feature) or, for an old agent, none.
func (s Scenario) features(node string) []string {
	if s.Skew != nil && slices.Contains(s.Skew.Old, node) {
		return []string{}
	}
	return nil
}

// agentVersion is node's agent version as its presence states it.
func (s Scenario) agentVersion(node string) string {
	if s.features(node) != nil {
		return baselineVersion
	}
	return "chaos"
}

// skewExpectation sets what change i's rollout must end as when it asks
// for a feature the old agents lack (x was computed as without them; bad
// and budget are the change's failing nodes and budget, bad without the
// old nodes, which are never written its target). away: an old node may
// be away when the rollout starts (it left, or heartbeats may stop): the
// coordinator then does not know it and cannot refuse for it, and skips it
// when it comes back. st is the strategy the rollout runs: the change's as
// applied (skipIncompatible if the plan or the request-time refusal says
// so), or that of a head the configurator wrote again (follow).
func (d *driver) skewExpectation(i int, st *sluicev1.Strategy, x *Expectation, skipPhases Expectation, away bool) {
	if !d.asksFeature(i, st) {
		return
	}
	sk := d.sys.sc.Skew
	skip := st.GetSkipIncompatible()
	x.Incompatible, x.Refuse, x.OldMayBeAway = sk.Old, !skip, away
	if skip {
		return
	}
	aborted := sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED
	if !away {
		// Also when a term resumed it before its refusal was stored (the
		// leader stopped between the two writes): no node was touched, so
		// the resumed term refuses it as the start would have (seed 148).
		*x = Expectation{Phases: []sluicev1.RolloutPhase{aborted}, EventsMayBeLost: x.EventsMayBeLost, NodesMayLapse: x.NodesMayLapse,
			Leavers: x.Leavers, Incompatible: sk.Old, Refuse: true,
			Why: fmt.Sprintf("its agents %v cannot read bake checks, and the strategy does not skip them: refused before touching any node", sk.Old)}
		return
	}
	*x = skipPhases
	if len(x.Phases) > 0 {
		x.Phases = append(slices.Clone(x.Phases), aborted)
	}
	x.AllFail = false
	x.Incompatible, x.Refuse, x.OldMayBeAway = sk.Old, true, true
	x.Why = fmt.Sprintf("refused up front for %v, or, if they were away at its start, they are skipped when they come back: %s", sk.Old, x.Why)
}

// asksFeature reports whether a rollout of change i running strategy st
// asks for a feature the old agents lack: the plan's change asks for bake
// checks, and st carries them (a head the configurator wrote again carries
// the defaults: none).
func (d *driver) asksFeature(i int, st *sluicev1.Strategy) bool {
	_, ok := d.sys.sc.Skew.changeOf(i)
	return ok && st.GetBakeChecks() > 0
}

// neededBy is the config features reading d needs: those it names and
// those its content needs (contract.FeaturesOf).
func neededBy(d *sluicev1.DesiredConfig) []string {
	fs := slices.Clone(d.GetFeatures())
	for _, f := range contract.FeaturesOf(d) {
		if !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	slices.Sort(fs)
	return fs
}

// reads says what a node's agent reads, for messages.
func reads(fs []string) string {
	if len(fs) == 0 {
		return "no feature: the baseline release"
	}
	return strings.Join(fs, ", ")
}

// checkSkew: version skew (issue 38).
//
//   - Skew: no desired config is written to a node whose agent does not
//     read a feature it needs (the coordinator knows from the presence).
//   - I9: a fingerprint recorded invalid (or a node listed Invalid or
//     TimedOut in a record) comes from a node whose agent could read that
//     config: never one written it only in a form its agent cannot read, or
//     that reported it INCOMPATIBLE and was never written a readable one.
//   - Skew (outcome): a rollout needing a feature the old agents lack lists
//     each of them INCOMPATIBLE (refused up front, or skipped), unless it
//     may have been away; a node is listed INCOMPATIBLE only if its agent
//     lacks a feature the rollout needs (or its presence got garbage, and
//     the coordinator cannot tell what it reads).
func checkSkew(o *Observation, add addFunc) {
	features := map[string][]string{} // only the nodes whose agent reads less than this version's
	for _, n := range o.Nodes {
		if n.Features != nil {
			features[n.Name] = n.Features
		}
	}
	readable, unreadable := map[string]bool{}, map[string]bool{} // node/fingerprint written so
	for _, w := range o.ConfigWrites {
		node, which, ok := contract.NodeOfConfigKey(w.Key)
		if !ok || which != "desired" || w.Desired == nil || contract.IsControlKey(w.Key) {
			continue
		}
		k := node + "/" + w.Desired.GetFingerprint()
		fs, old := features[node]
		missing := contract.MissingFeatures(fs, neededBy(w.Desired))
		if !old || missing == nil {
			readable[k] = true
			continue
		}
		if !unreadable[k] {
			add("Skew", w.Desired.GetRollout(), node, "was written desired config %s (%s revision %d) needing config feature(s) %s, which its agent does not read (it reads %s)",
				short(w.Desired.GetFingerprint()), w.Key, w.Revision, strings.Join(missing, ", "), reads(fs))
		}
		unreadable[k] = true
	}
	incompatible := map[string]bool{} // node/fingerprint its agent reported INCOMPATIBLE
	for _, st := range o.StatusWrites {
		if st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE {
			incompatible[st.GetNode()+"/"+st.GetFingerprint()] = true
		}
	}
	cannot := func(node, fp string) bool {
		k := node + "/" + fp
		return !readable[k] && (unreadable[k] || incompatible[k])
	}
	for _, fp := range sortedKeys(o.Fingerprints) {
		rec := o.Fingerprints[fp]
		if cannot(rec.GetNode(), fp) {
			add("I9", rec.GetRollout(), rec.GetNode(), "fingerprint %s is recorded invalid (%s: %s) from this node, whose agent could not read that config (written only in a form it does not read, or reported INCOMPATIBLE)",
				short(fp), rec.GetCheck(), rec.GetCause())
		}
	}
	for _, r := range o.Rollouts {
		for _, f := range r.GetFailures() {
			switch f.GetResult() {
			case sluicev1.NodeResult_NODE_RESULT_INVALID, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT:
				if f.GetFailedCheck() != "revert" && cannot(f.GetNode(), f.GetFingerprint()) {
					add("I9", r.GetId(), f.GetNode(), "listed %s on %s, a config its agent could not read: it should be INCOMPATIBLE, not a failure",
						f.GetResult(), short(f.GetFingerprint()))
				}
			}
		}
		listed := map[string]bool{}
		for _, sk := range r.GetSkipped() {
			if sk.GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
				continue
			}
			listed[sk.GetNode()] = true
			_, old := features[sk.GetNode()]
			spoiled := slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool { return sp.Bucket == contract.BucketNodes && sp.Key == sk.GetNode() })
			if !old && !spoiled {
				add("Skew", r.GetId(), sk.GetNode(), "listed INCOMPATIBLE (%q), but its agent reads every config feature", sk.GetMessage())
			}
		}
		// Which records must list every old node: a refusal lists them all
		// at the start; a rollout that skips them meets each at its turn, so
		// only one that ended in force (every node reached) lists them all.
		x := o.Expect[r.GetId()]
		inForce := contract.InForce(r.GetPhase())
		refused := x.Refuse && r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED
		if len(x.Incompatible) == 0 || x.OldMayBeAway || !(refused || !x.Refuse && inForce) || spoiledRollout(o, r) {
			continue
		}
		for _, n := range x.Incompatible {
			if !listed[n] {
				add("Skew", r.GetId(), n, "its agent cannot read the rollout's config (bake checks), but the record does not list it INCOMPATIBLE (%s %q)",
					strings.TrimPrefix(r.GetPhase().String(), "ROLLOUT_PHASE_"), r.GetReason())
			}
		}
	}
}

// spoiledRollout reports whether the harness wrote garbage over r's
// revision or record before r ended: a new term may then stop it as it
// can (Outcome allows ABORTED), without the outcomes it would list.
func spoiledRollout(o *Observation, r *sluicev1.Rollout) bool {
	return slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool {
		spoilsIt := sp.Bucket == contract.BucketRevisions && sp.Key == r.GetRevision() ||
			sp.Bucket == contract.BucketRollouts && sp.Key == r.GetId()
		return spoilsIt && (r.GetFinishedAt() == nil || sp.At.Before(r.GetFinishedAt().AsTime()))
	})
}

// refusedForVersions is how the configurator's request-time refusal of a
// change some present agents cannot read begins (services/configurator,
// refuseIncompatible; docs/rollouts.md).
const refusedForVersions = "whose agent cannot read its config: "

// refusedForSkew takes the configurator's refusal (desc) of change i at
// request time: a skew change that does not skip the old agents, refused
// naming nodes whose agent cannot read it. Every node it names must be an
// old agent's (else a Skew violation: it blamed an agent that reads the
// feature). The user then applies it again with skipIncompatible, as the
// refusal says (d.changes[i].skipping), and the change is judged as one
// that skips them. false: not such a refusal.
func (d *driver) refusedForSkew(i int, desc string) bool {
	sk := d.sys.sc.Skew
	c, ok := sk.changeOf(i)
	if !ok || c.Skip || d.changes[i].skipping || !strings.Contains(desc, refusedForVersions) {
		return false
	}
	for _, name := range sortedKeys(d.sys.nodes) {
		if strings.Contains(desc, name+": its agent") && !slices.Contains(sk.Old, name) {
			d.sys.findingsMu.Lock()
			d.sys.findings = append(d.sys.findings, Violation{Invariant: "Skew", Node: name, Detail: fmt.Sprintf(
				"the configurator refused change %d naming this node, whose agent reads every feature: %s", i, desc)})
			d.sys.findingsMu.Unlock()
		}
	}
	d.changes[i].skipping = true
	d.sys.log.add("change %d refused at request time for agents that cannot read it; applied again with skipIncompatible: %s", i, desc)
	return true
}

// changeOf is change i of the plan, if it asks for a feature (nil-safe).
func (p *SkewPlan) changeOf(i int) (SkewChange, bool) {
	if p == nil {
		return SkewChange{}, false
	}
	c, ok := p.Changes[i]
	return c, ok
}
