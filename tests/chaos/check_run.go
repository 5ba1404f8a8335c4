package chaos

import (
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Checks along the run: promises of docs/rollouts.md that the state at rest
// cannot show, because the coordinator heals what they would leave behind
// (a rollout that ends gives every node outside the config in force that
// config: configureStragglers). Each reads the writes, applies and events
// the harness recorded while the seed ran.

// revertEvidence are the events that show the coordinator reverted a node,
// or knowingly did not (it left, its revert failed).
var revertEvidence = []string{"NodeReverted", "NodeRevertTarget", "NodeRevertFailed", "NodeRevertDeferred", "NodeSkipped"}

// Revert: after a rollback or an abort that reverts, every node the rollout
// touched was given its revert target (a revert write, or its applier ran
// one), or the record lists it revert-failed (with the reason) or skipped.
// Checked along the run: at rest a skipped node is healed as a straggler
// (given the config in force when the rollout ends), and it had provisioned
// the rolled-back target, so that target is its last-good and I1 cannot
// tell (issue 22). A node the schedule made leave, or whose heartbeats it
// could stop (a server stopped, a network fault), may have been away when
// the revert started: it is reverted when it comes back, or configured as a
// straggler if the rollout ended first — unless a NodeJoinedRevert event
// says it came back while the rollout reverted; so may one whose desired key
// got garbage (a new term cannot read that the rollout touched it).
func checkReverted(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		if !contract.Terminal(r.GetPhase()) || !reverted(o, r) {
			continue
		}
		x := o.Expect[r.GetId()]
		id := r.GetId()
		touched := map[string]bool{}
		evidence := map[string]bool{}
		for _, w := range o.ConfigWrites {
			d := w.Desired
			if w.Delete || d == nil || d.GetRollout() != id {
				continue
			}
			if _, which, _ := contract.NodeOfConfigKey(w.Key); which != "desired" {
				continue
			}
			if !d.GetRevert() && d.GetFingerprint() == o.Targets[id][d.GetNode()] {
				touched[d.GetNode()] = true
			}
		}
		for _, n := range o.Nodes {
			for _, a := range n.Applies {
				if a.Rollout == id && !a.Revert && a.Fingerprint == o.Targets[id][n.Name] {
					touched[n.Name] = true
				}
			}
		}
		// joinedBack: came back while the rollout reverted (NodeJoinedRevert,
		// when, by the coordinator's clock): it must be reverted after that.
		// What showed a revert before it (a NodeRevertDeferred: "reverted
		// when it comes back", a revert it never ran) is no evidence then.
		joinedBack := map[string]time.Time{}
		for _, ev := range o.Events {
			if ev.GetRollout() == id && ev.GetType() == "NodeJoinedRevert" {
				joinedBack[ev.GetNode()] = ev.GetTime().AsTime()
			}
		}
		for _, w := range o.ConfigWrites {
			d := w.Desired
			if !w.Delete && d != nil && d.GetRollout() == id && d.GetRevert() && !w.At.Before(joinedBack[d.GetNode()]) {
				if _, which, _ := contract.NodeOfConfigKey(w.Key); which == "desired" {
					evidence[d.GetNode()] = true
				}
			}
		}
		for _, n := range o.Nodes {
			for _, a := range n.Applies {
				if a.Rollout == id && a.Revert && !a.At.Before(joinedBack[n.Name]) {
					evidence[n.Name] = true
				}
			}
		}
		for _, ev := range o.Events {
			if ev.GetRollout() == id && slices.Contains(revertEvidence, ev.GetType()) && !ev.GetTime().AsTime().Before(joinedBack[ev.GetNode()]) {
				evidence[ev.GetNode()] = true
			}
		}
		for _, f := range r.GetFailures() {
			if f.GetResult() == sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED || f.GetFailedCheck() == "revert" {
				evidence[f.GetNode()] = true
			}
		}
		for _, s := range r.GetSkipped() {
			if _, back := joinedBack[s.GetNode()]; !back { // listed before it came back
				evidence[s.GetNode()] = true
			}
		}
		spoiled := desiredSpoiledWhile(o, r)
		for _, node := range sortedKeys(touched) {
			_, back := joinedBack[node]
			mayBeAway := (x.NodesMayLapse || slices.Contains(x.Leavers, node)) && !back
			if evidence[node] || mayBeAway || spoiled[node] {
				continue
			}
			add("Revert", id, node, "the rollout touched it (gave it its target %s) and ended %s, but never reverted it: no revert write, "+
				"no revert applied, no NodeReverted/RevertFailed/RevertDeferred event, not listed revert-failed or skipped",
				short(o.Targets[id][node]), r.GetPhase())
		}
	}
}

// reverted reports whether rollout r started reverting the nodes it
// touched: it rolled back, or an abort reverted them (an abort with
// no_revert, a supersede or a progress deadline leaves them as they are).
func reverted(o *Observation, r *sluicev1.Rollout) bool {
	if r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || len(r.GetReverted()) > 0 {
		return true
	}
	for _, w := range o.RolloutWrites {
		if w.Key == r.GetId() && w.Rollout.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
			return true
		}
	}
	return slices.ContainsFunc(o.Events, func(ev *sluicev1.Event) bool {
		return ev.GetRollout() == r.GetId() && ev.GetType() == "RolloutReverting"
	})
}

// bakeSlack is how much earlier than its bake time a stage may start, as
// the events' and the record's clocks tell it (both the coordinator
// process's wall clock, read at different moments).
const bakeSlack = 100 * time.Millisecond

// Bake: no wave or failure-domain stage starts before the one before it
// baked. A rollout with a bake time records each stage's start
// (Rollout.stages); before each stage but the first, a RolloutBaking event
// must have been published after the stage before it started, at least the
// bake time before this one started, or a stored write of the record must
// have begun a bake then (bakeUntil less the bake time). Not judged where events may be lost
// (a NATS restart or a cluster server stopped while it ran), nor after a
// stage that started no node: its record counts none and no desired config
// of the rollout's was stored while it ran (emptyStage). A bake proves the
// nodes a stage started; a term deposed between its record write opening a
// stage and its first desired write leaves such a stage behind, and the
// next term rightly starts the next one at once (docs/chaos.md, "Bake").
func checkBaked(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		bake := r.GetStrategy().GetBakeTime().AsDuration()
		stages := r.GetStages()
		if bake <= 0 || len(stages) < 2 || o.Expect[r.GetId()].EventsMayBeLost {
			continue
		}
		var baking []time.Time
		for _, ev := range o.Events {
			if ev.GetRollout() == r.GetId() && ev.GetType() == "RolloutBaking" && ev.GetTime() != nil {
				baking = append(baking, ev.GetTime().AsTime())
			}
		}
		// The record's bakeUntil is the decider's own clock (the moment it
		// began the bake plus the bake time), as the stages' starts and the
		// coordinator's event times are (a record write is evidence too,
		// where the event's publish was lost to a deposed term).
		for _, w := range o.RolloutWrites {
			if w.Rollout.GetId() == r.GetId() && w.Rollout.GetBakeUntil() != nil {
				baking = append(baking, w.Rollout.GetBakeUntil().AsTime().Add(-bake))
			}
		}
		for i := 1; i < len(stages); i++ {
			prev, start := stages[i-1].GetStartedAt().AsTime(), stages[i].GetStartedAt().AsTime()
			if emptyStage(o, r.GetId(), stages[i-1], start) {
				continue
			}
			baked := slices.ContainsFunc(baking, func(b time.Time) bool {
				return !b.Before(prev) && start.Sub(b) >= bake-bakeSlack
			})
			if !baked {
				add("Bake", r.GetId(), "", "stage %d (wave %d, domain %q) started at %s without the stage before it (started %s) baking %s first: no RolloutBaking event between them at least the bake time before",
					i+1, stages[i].GetWave(), stages[i].GetDomain(), start.Format("15:04:05.000"), prev.Format("15:04:05.000"), bake)
			}
		}
	}
}

// emptyStage reports whether stage st of rollout id, which the next stage
// ended at end, started no node: the record counts none, and no forward
// desired config of the rollout was stored from its start until end (a
// watcher sees a write after it is stored, so a write of the stage cannot
// be seen before its start; one seen after end belongs to a stage that,
// in one term, started right after it, and the record counts it).
func emptyStage(o *Observation, id string, st *sluicev1.StageResult, end time.Time) bool {
	if st.GetNodes() > 0 {
		return false
	}
	from := st.GetStartedAt().AsTime()
	return !slices.ContainsFunc(o.ConfigWrites, func(w KVOp) bool {
		d := w.Desired
		return d != nil && d.GetRollout() == id && !d.GetRevert() && !d.GetCancel() &&
			strings.HasSuffix(w.Key, ".desired") && !w.At.Before(from) && w.At.Before(end)
	})
}

// I5, for revisions: the reaper never deletes a revision that anything
// references. Every rollout record names its revision (history and undo
// read it), so each must still be stored at rest. The harness runs the
// reaper with a retention of one revision, so a seed's older revisions are
// collected and only references keep them.
func checkReferencedKept(o *Observation, add addFunc) {
	for _, u := range o.Unstored {
		add("I5", u.Rollout, "", "its revision %s is not stored at rest: deleted while the rollout's record references it", short(u.Revision))
	}
}

// I4, for timeouts: a node that timed out has its target recorded invalid
// with cause timed-out as it times out, by the coordinator that timed it
// out; not only later, if ever, from the agent's own report (which a node
// that never answers again does not make). Where the record names that node
// and rollout (it was not recorded first by another node's failure), its
// cause must be timed-out and its time no later than the NodeTimedOut
// event's (both are the time of the step that recorded it).
func checkTimedOutRecorded(o *Observation, add addFunc) {
	// rollout/node → its last NodeTimedOut event: a leader deposed as it
	// timed the node out may have published one whose record never landed.
	timedOutAt := map[string]time.Time{}
	for _, ev := range o.Events {
		if ev.GetType() == "NodeTimedOut" && ev.GetTime() != nil {
			timedOutAt[ev.GetRollout()+"/"+ev.GetNode()] = ev.GetTime().AsTime()
		}
	}
	for _, r := range o.Rollouts {
		for _, f := range r.GetFailures() {
			if f.GetResult() != sluicev1.NodeResult_NODE_RESULT_TIMED_OUT || f.GetFailedCheck() == "revert" {
				continue
			}
			rec := o.Fingerprints[f.GetFingerprint()]
			if rec == nil || rec.GetNode() != f.GetNode() || rec.GetRollout() != r.GetId() {
				continue // not recorded (I4 says so), or first recorded by another failure
			}
			if rec.GetCause() != "timed-out" {
				add("I4", r.GetId(), f.GetNode(), "timed out, but its fingerprint %s is recorded with cause %q, not timed-out", short(f.GetFingerprint()), rec.GetCause())
			}
			// A record the harness wrote garbage over was recorded again
			// afterwards, by whoever read the garbage (seed 178): its time
			// says when, not when it was first recorded.
			if ev, ok := timedOutAt[r.GetId()+"/"+f.GetNode()]; ok && rec.GetTime().AsTime().After(ev) && !spoiledKey(o, contract.BucketFingerprints, f.GetFingerprint()) {
				add("I4", r.GetId(), f.GetNode(), "timed out at %s (NodeTimedOut), but its fingerprint %s was recorded only at %s: not by the coordinator that timed it out",
					ev.Format("15:04:05.000"), short(f.GetFingerprint()), rec.GetTime().AsTime().Format("15:04:05.000"))
			}
		}
	}
}

// KnownBad: a fingerprint recorded invalid (and not forgiven) is never
// written to a node after it was recorded: a rollout refuses it before
// touching any node, and a straggler is not given it. Exceptions: the
// rollout that recorded it, while it still runs, goes on with its other
// nodes within the failure budget; a revert writes a node's proven backup
// back even if it failed elsewhere; a cancel rewrites the node's desired
// config to stop its operation. Times are the coordinator's (the record's
// time, the write's written_at).
func checkKnownBadNotWritten(o *Observation, add addFunc) {
	finished := map[string]time.Time{}
	for _, r := range o.Rollouts {
		if r.GetFinishedAt() != nil {
			finished[r.GetId()] = r.GetFinishedAt().AsTime()
		}
	}
	reported := map[string]bool{}
	for _, w := range o.ConfigWrites {
		d := w.Desired
		if w.Delete || d == nil || d.GetRevert() || d.GetCancel() || d.GetWrittenAt() == nil {
			continue
		}
		if _, which, _ := contract.NodeOfConfigKey(w.Key); which != "desired" {
			continue
		}
		rec := o.Fingerprints[d.GetFingerprint()]
		if rec == nil || rec.GetForgiven() != nil || rec.GetTime() == nil || !d.GetWrittenAt().AsTime().After(rec.GetTime().AsTime()) {
			continue
		}
		if end, ok := finished[rec.GetRollout()]; d.GetRollout() == rec.GetRollout() && (!ok || !d.GetWrittenAt().AsTime().After(end)) {
			continue // its own rollout, still running, within its budget
		}
		if k := d.GetNode() + "/" + d.GetFingerprint(); !reported[k] {
			reported[k] = true
			add("KnownBad", d.GetRollout(), d.GetNode(), "was given %s at %s (rollout %s, operation %q), recorded invalid at %s (%s on %s in rollout %s)",
				short(d.GetFingerprint()), d.GetWrittenAt().AsTime().Format("15:04:05.000"), d.GetRollout(), d.GetOperation(),
				rec.GetTime().AsTime().Format("15:04:05.000"), rec.GetCause(), rec.GetNode(), rec.GetRollout())
		}
	}
}

// spoiledKey reports whether the harness wrote garbage over bucket/key
// during the run (garbage-value).
func spoiledKey(o *Observation, bucket, key string) bool {
	for _, sp := range o.Spoiled {
		if sp.Bucket == bucket && sp.Key == key {
			return true
		}
	}
	return false
}

// JoinedRevert: a node that joins while a rollout reverts is given the
// config in force (docs/rollouts.md), never the rollout's forward target:
// no desired config carrying that target is written to it after it came
// back and before the rollout's record ended. Checked along the run: the
// rollout's end gives every node outside the config in force that config,
// so at rest nothing shows a joiner that ran the rolled-back target for a
// while.
func checkJoinedRevert(o *Observation, add addFunc) {
	for _, j := range o.Joiners {
		target := o.Targets[j.Rollout][j.Node]
		if target == "" {
			continue
		}
		var end time.Time
		for _, w := range o.RolloutWrites {
			if w.Key == j.Rollout && w.Rollout != nil && contract.Terminal(w.Rollout.GetPhase()) {
				end = w.At
				break
			}
		}
		for _, w := range o.ConfigWrites {
			d := w.Desired
			if w.Delete || d == nil || d.GetRevert() || w.At.Before(j.At) || (!end.IsZero() && w.At.After(end)) {
				continue
			}
			if node, which, _ := contract.NodeOfConfigKey(w.Key); node != j.Node || which != "desired" {
				continue
			}
			if d.GetFingerprint() == target {
				add("JoinedRevert", j.Rollout, j.Node, "it joined while the rollout reverted, and was given the rollout's target %s "+
					"(desired write revision %d, naming rollout %s) instead of the config in force", short(target), w.Revision, d.GetRollout())
			}
		}
	}
}
