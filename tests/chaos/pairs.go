package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// pairLabel names a node's redundancy group (docs/rollouts.md,
// "Redundancy groups").
const pairLabel = contract.LabelPair

// pickPairs puts 1–3 pairs of nodes (as many as the fleet has) in
// redundancy groups, and lets every change after the baseline configure
// every node at once: only the pair rule then keeps two members apart.
func (s *Scenario) pickPairs(rng *rand.Rand, x *Extras) {
	perm := rng.Perm(s.Nodes)
	pairs := min(1+rng.IntN(3), s.Nodes/2)
	for p := range pairs {
		group := fmt.Sprintf("pair-%d", p+1)
		x.Pairs[NodeName(perm[2*p])] = group
		x.Pairs[NodeName(perm[2*p+1])] = group
	}
	for i := 1; i < len(s.Changes); i++ {
		s.Changes[i].Strategy.MaxParallel = strconv.Itoa(s.Nodes)
	}
}

// Labels are node i's labels: its zone and rack, and its redundancy group
// if the scenario puts it in one.
func (s Scenario) Labels(i int) map[string]string {
	l := NodeLabels(i)
	if g := s.Extras.Pairs[NodeName(i)]; g != "" {
		l[pairLabel] = g
	}
	return l
}

// unprovenSpan is one member's time unproven in a rollout: from the write
// of its target (a new operation) until it reported Provisioned and, when
// the strategy bakes between stages, the bake after that passed; or until
// it failed, timed out, left or was stopped. Open: no end was seen.
type unprovenSpan struct {
	node       string
	from, to   time.Time
	open       bool
	operation  string
	provedBake bool // ended by a bake after Provisioned
	byStop     bool // ended only by the rollout's revert or end: no outcome of its own seen
	// provisioned is its Provisioned report under a staged bake when no
	// bake after it was seen to end it (zero otherwise): the message says
	// so, rather than "no outcome".
	provisioned time.Time
}

// Pairs: two members of one redundancy group are never unproven at the
// same time within a rollout (docs/rollouts.md). A member's span starts
// at each forward write of the rollout's target to it that starts a new
// operation (written_at, the coordinator's clock), and ends at the
// earliest of: its Provisioned report of that target (the agent's
// last_update: the coordinator saw it later still), plus, with a bake
// between stages, the end of the first bake that began after it (a
// RolloutBaking event's time and the bake time, less bakeSlack but not
// less than nothing: bakeLessSlack); an
// outcome that frees the group (NodeFailed, NodeTimedOut, NodeSkipped, at
// the decision's time, which the coordinator stamps on its events: endLag;
// an Invalid report); the rollout starting its revert or ending. A member
// whose span has no end seen, where events may be lost, is not judged (its
// failure or departure may be what was lost); nor one whose desired key got
// garbage while the rollout ran (a new term rewrites it to repair it, not
// as a new start). Reverts are never held, so they are not starts.
func checkPairs(o *Observation, add addFunc) {
	if len(o.Pairs) == 0 {
		return
	}
	for _, r := range o.Rollouts {
		id := r.GetId()
		x := o.Expect[id]
		spoiled := desiredSpoiledWhile(o, r)
		spans := pairSpans(o, r)
		groups := map[string][]unprovenSpan{}
		for _, sp := range spans {
			if g := o.Pairs[sp.node]; g != "" && !spoiled[sp.node] {
				groups[g] = append(groups[g], sp)
			}
		}
		for _, g := range sortedKeys(groups) {
			ss := groups[g]
			slices.SortFunc(ss, func(a, b unprovenSpan) int { return a.from.Compare(b.from) })
			for i, a := range ss {
				if (a.open || a.byStop) && x.EventsMayBeLost {
					continue
				}
				for _, b := range ss[i+1:] {
					if b.node == a.node || b.from.Before(a.from) || (!a.open && !b.from.Before(a.to)) {
						continue
					}
					end := "no end seen"
					switch {
					case a.byStop && !a.provisioned.IsZero():
						end = "provisioned at " + a.provisioned.Format("15:04:05.000") + ", no bake after it seen before the rollout stopped at " + a.to.Format("15:04:05.000")
					case a.byStop:
						end = "no outcome of its own seen before the rollout stopped at " + a.to.Format("15:04:05.000")
					case !a.open:
						end = "unproven until " + a.to.Format("15:04:05.000")
						if a.provedBake {
							end += " (the bake after its Provisioned)"
						}
					}
					add("Pairs", id, b.node, "was given the target (operation %q) at %s while %s of its group %q was unproven: given it at %s, %s",
						b.operation, b.from.Format("15:04:05.000"), a.node, g, a.from.Format("15:04:05.000"), end)
				}
			}
		}
	}
}

// pairSpans are the unproven spans of the members of r's nodes.
func pairSpans(o *Observation, r *sluicev1.Rollout) []unprovenSpan {
	id := r.GetId()
	stop := time.Time{} // the revert's start or the end: nothing starts after it
	for _, ev := range o.Events {
		if ev.GetRollout() == id && ev.GetType() == "RolloutReverting" && ev.GetTime() != nil {
			stop = ev.GetTime().AsTime()
			break
		}
	}
	if stop.IsZero() && r.GetFinishedAt() != nil {
		stop = r.GetFinishedAt().AsTime()
	}
	st := r.GetStrategy()
	staged := st.GetBakeTime().AsDuration() > 0 && (st.GetFirstWave() > 0 || st.GetFailureDomain() != "")
	bake := st.GetBakeTime().AsDuration()
	// When each bake began and how long it lasts: a RolloutBaking event's
	// time and the strategy's bake, or a new term's RolloutResumed that
	// continues the bake the term before began (its record's bake_until:
	// "the bake continues: 103ms of 146ms left"), whose RolloutBaking may
	// never have been published (seed 81: the leader killed 10 ms after
	// it wrote the record, the next term's wave 2 then rightly started
	// 103 ms after its resume, and the check, finding no RolloutBaking
	// before wave 2's, held node-01 unproven until that one's end).
	type bakeAt struct {
		at    time.Time
		lasts time.Duration
	}
	var baking []bakeAt
	for _, ev := range o.Events {
		if ev.GetRollout() != id || ev.GetTime() == nil {
			continue
		}
		switch ev.GetType() {
		case "RolloutBaking":
			baking = append(baking, bakeAt{ev.GetTime().AsTime(), bake})
		case "RolloutResumed":
			if left, ok := bakeContinues(ev.GetReason()); ok {
				baking = append(baking, bakeAt{ev.GetTime().AsTime(), left})
			}
		}
	}
	slices.SortFunc(baking, func(a, b bakeAt) int { return a.at.Compare(b.at) })
	ends := map[string][]time.Time{} // node → when an outcome freed its group
	for _, ev := range o.Events {
		switch ev.GetType() {
		case "NodeFailed", "NodeTimedOut", "NodeSkipped":
			if ev.GetRollout() == id && ev.GetTime() != nil {
				ends[ev.GetNode()] = append(ends[ev.GetNode()], ev.GetTime().AsTime())
			}
		}
	}
	for _, ts := range ends {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
	used := map[string]int{} // node → its ends taken by earlier spans
	var out []unprovenSpan
	seen := map[string]bool{} // node/operation
	for _, w := range o.ConfigWrites {
		d := w.Desired
		if w.Delete || d == nil || d.GetRollout() != id || d.GetRevert() || d.GetCancel() || d.GetWrittenAt() == nil {
			continue
		}
		if _, which, _ := contract.NodeOfConfigKey(w.Key); which != "desired" || o.Pairs[d.GetNode()] == "" {
			continue
		}
		if d.GetFingerprint() != o.Targets[id][d.GetNode()] || seen[d.GetNode()+"/"+d.GetOperation()] {
			continue
		}
		if end := r.GetFinishedAt(); end != nil && d.GetWrittenAt().AsTime().After(end.AsTime()) {
			// A node configured with the config in force after the rollout
			// ended (a straggler, a node that came back: seed 70) is no
			// start of the rollout, and the rule holds within one.
			continue
		}
		seen[d.GetNode()+"/"+d.GetOperation()] = true
		sp := unprovenSpan{node: d.GetNode(), from: d.GetWrittenAt().AsTime(), operation: d.GetOperation(), open: true}
		end := func(t time.Time, bake, stop bool) {
			if t.Before(sp.from) {
				return
			}
			if sp.open || t.Before(sp.to) {
				sp.to, sp.open, sp.provedBake, sp.byStop = t, false, bake, stop
			}
		}
		for _, s := range o.StatusWrites {
			if s.GetNode() != sp.node || s.GetFingerprint() != d.GetFingerprint() || s.GetLastUpdate() == nil {
				continue
			}
			at := s.GetLastUpdate().AsTime()
			switch s.GetPhase() {
			case sluicev1.NodePhase_NODE_PHASE_INVALID:
				end(at, false, false)
			case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
				if at.Before(sp.from) {
					continue
				}
				if !staged {
					end(at, false, false)
					continue
				}
				baked := false
				for _, b := range baking {
					if !b.at.Before(at) {
						end(b.at.Add(bakeLessSlack(b.lasts)), true, false)
						baked = true
						break
					}
				}
				if !baked && sp.provisioned.IsZero() {
					sp.provisioned = at
				}
			}
		}
		// The first outcome event of the node from endLag before this
		// write on, not one an earlier span of it took, ends the span at
		// its time (at the write's, if earlier: freed before it landed).
		if ts := ends[sp.node]; used[sp.node] < len(ts) {
			for i, t := range ts[used[sp.node]:] {
				if !t.Before(sp.from.Add(-endLag)) {
					end(later(t, sp.from), false, false)
					used[sp.node] += i + 1
					break
				}
			}
		}
		if !stop.IsZero() {
			end(stop, false, true)
		}
		out = append(out, sp)
	}
	return out
}

// endLag: the coordinator stamps an outcome event with the time of the
// decision that freed the group (Decide), and the mate's write, decided in
// that step or later, is stamped when its writer sends it, so no later
// than the mate's write. The freed member's own write is sent by a writer
// pool too, and may land after the step that saw the member leave: an
// event up to endLag before the write still belongs to it (chaos seed 52:
// node-11 skipped 30 ms after its write, and the old rule, the event's
// time less 50 ms, threw that end away). Longer than a writer's lag under
// load, shorter than a node's leave, return and new write in one rollout.
const endLag = time.Second

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bakeLessSlack is how long after a RolloutBaking event's time its bake
// may be taken to have passed: the bake time less bakeSlack, but never less
// than nothing. A bake shorter than the slack (53–81 ms in seeds 246, 384
// and 882) otherwise ended before it began, often before the member was
// even given the target, and such an end was thrown away as one before
// the span's start: a member provisioned and baked stayed unproven until
// the rollout stopped, and its mate, rightly given the target after that
// bake, was flagged.
func bakeLessSlack(bake time.Duration) time.Duration { return max(bake-bakeSlack, 0) }

// bakeContinues reads the time left of a bake a new term continues from a
// RolloutResumed reason ("…; the bake continues: 103ms of 146ms left").
func bakeContinues(reason string) (time.Duration, bool) {
	_, rest, ok := strings.Cut(reason, "the bake continues: ")
	if !ok {
		return 0, false
	}
	left, _, ok := strings.Cut(rest, " of ")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(left)
	return d, err == nil
}

// pairsOf is the scenario's groups for the Observation (node → group).
func (s Scenario) pairsOf() map[string]string { return maps.Clone(s.Extras.Pairs) }
