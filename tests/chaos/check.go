package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Observation is everything the checker looks at, gathered by the harness
// once the system is quiescent: the final state of every bucket, the KV
// writes the harness's watchers saw in order, what every node's applier was
// asked to do, and the events stream. Check is a pure function of it, so a
// hand-made Observation proves each check can fail (check_test.go).
type Observation struct {
	Nodes        []NodeObs
	Rollouts     []*sluicev1.Rollout // every record in the rollouts bucket
	LastApplied  *sluicev1.RolloutRef
	Active       *sluicev1.RolloutRef
	Fingerprints map[string]*sluicev1.InvalidFingerprint
	Events       []*sluicev1.Event // the events stream, in stream order
	// Misread are the messages of the events stream that every reader
	// shows as unreadable (events.Read refused them), each with its
	// sequence and why. The harness publishes no event: each is one of
	// sluice's own that its subject's role may not say (I11).
	Misread []string
	// ConfigWrites and RolloutWrites are the nodeconfigs and rollouts
	// buckets' stored operations in stream order, as watchers saw them.
	ConfigWrites  []KVOp
	RolloutWrites []KVOp
	// StatusWrites are the status bucket's stored writes in order.
	StatusWrites []*sluicev1.NodeStatus
	// Targets is each rollout's rendered fingerprint per node.
	Targets map[string]map[string]string
	// Expect is what the scenario implies for each rollout, by rollout id.
	Expect map[string]Expectation
	// EmptyFingerprint is the fingerprint of the empty config.
	EmptyFingerprint string
	// NotQuiescent lists what had not settled when the harness gave up waiting.
	NotQuiescent []string
	// Spoiled are the garbage values the harness wrote (garbage-value), in
	// order, each with the value its key held before and whether it was
	// still there at rest. The bucket reads above see such a key as it is
	// at rest: unreadable, so absent (nil).
	Spoiled []Spoil
	// IntentWrites are the intents bucket's stored operations in stream
	// order (Intent set), as a watcher saw them.
	IntentWrites []KVOp
	// Registry is the scenario's registry, nil without one.
	Registry *RegistryObs
	// RevisionIntents are the intents (intents-bucket keys) of each
	// rollout's revision, by rollout id.
	RevisionIntents map[string][]string
	// Declared are the intents every change of the driver declares (it
	// never deletes one); every rollout from head generation DeclaredFrom
	// (its first change's) on rolls them out. 0: no change was accepted.
	Declared     []string
	DeclaredFrom uint64
	// Joiners are the nodes the schedule made join while a rollout
	// reverted (join-during-revert), each with when it started again.
	Joiners []Joiner
	// Unstored are the revisions rollout records name that are not in the
	// revisions bucket at rest (and never held garbage).
	Unstored []RevisionRef
	// Pairs are the nodes' redundancy groups (node → group); Freezes the
	// freezes the harness wrote; GateAnswers what the stub Prometheus
	// answered, by gate base URL (extras.go).
	Pairs       map[string]string
	Freezes     []FreezeObs
	GateAnswers map[string][]GateAnswer
}

// RevisionRef is a revision a rollout record names.
type RevisionRef struct{ Rollout, Revision string }

// RegistryObs is the scenario's registry as the harness drove it.
type RegistryObs struct {
	Name   string
	Settle time.Duration // the configurator's settle period
	// Intents are the intents it declares (intents-bucket keys).
	Intents []string
	// Absent says when the harness had each intent's file out of the
	// registry (partial-registry), in order: From taken before the file
	// left, To after it came back (zero if it never did). Outside these
	// spans every answer of the registry declared the intent.
	Absent map[string][]Span
	// Holds are the registry-hold faults as they ran (Hold).
	Holds []HoldObs
	// Confirms are the registry-confirm-pending faults as they ran
	// (ConfirmPending; registry.go).
	Confirms []ConfirmObs
	// Rewinds say when a git registry's branch was force-pushed to an
	// older commit (registry-rewind): From taken before the push, To
	// after the head was put back. The older commit's missing intents are
	// not absent (Absent): a rewound branch is held, never an answer.
	Rewinds []RewindObs
}

// HoldObs is one registry-hold fault as the harness drove it: its files
// out together from From to Back, so that the answers dropped more of the
// registry's intents than its hold share lets be pending. Times are the
// harness's, each taken so that the hold looks no longer than it was.
type HoldObs struct {
	Intents []string // the intents whose files it dropped (intents-bucket keys)
	Owned   int      // how many intents the registry declares
	From    time.Time
	// Held is when the harness first read a status of the registry whose
	// held deletion names exactly Intents; zero if it never did while the
	// files were out, Seen then says what it read last.
	Held time.Time
	Seen string
	// Confirmed is taken before the harness stored the confirmation of the
	// held deletion (sluice registry confirm); zero: it stored none.
	Confirmed time.Time
	Back      time.Time // taken before the first file came back
}

// Span is a stretch of time.
type Span struct{ From, To time.Time }

// NodeObs is one node at rest.
type NodeObs struct {
	Name string
	// Live: the node's agent runs at the end (every leave in a schedule rejoins).
	Live bool
	// OnDisk is the fingerprint in the file applier's file ("" = no file):
	// what the node really runs.
	OnDisk  string
	Desired *sluicev1.DesiredConfig // nil = no key
	Backup  *sluicev1.DesiredConfig
	Status  *sluicev1.NodeStatus
	Applies []Apply
	// Features are the config features its agent reads (version skew):
	// nil for this version's agent (every feature, as agent.Config.Features),
	// empty for an agent of the baseline release.
	Features []string
}

// Apply is one call of a node's applier, as the harness's wrapper saw it.
type Apply struct {
	At          time.Time // when the call returned
	Fingerprint string
	Rollout     string
	Revert      bool
	// RestoreAtStart: the first call of an agent started over an
	// interrupted apply (its marker on disk): the restore of last-good the
	// agent makes before it reads anything, the pause included (docs/agent.md).
	RestoreAtStart bool
	Err            string
}

// Joiner is a node that joined while a rollout reverted.
type Joiner struct {
	Node    string
	Rollout string    // the rollout that reverted when it came back
	At      time.Time // when its agent started again
}

// KVOp is one stored operation of a bucket, as a watcher saw it.
type KVOp struct {
	Key      string
	Revision uint64
	Delete   bool
	At       time.Time // when the server stored it (storedAt)
	Desired  *sluicev1.DesiredConfig
	Rollout  *sluicev1.Rollout
	Intent   *sluicev1.StoredIntent
}

// Expectation is what a rollout's end must look like given the scenario.
type Expectation struct {
	// Phases are the acceptable end phases; empty = any terminal phase.
	Phases []sluicev1.RolloutPhase
	// MayFail are the nodes the scenario makes fail or time out on this
	// rollout's target; no other node may be recorded failed.
	MayFail []string
	// AllFail: every node of MayFail must be recorded failed (with the
	// budget not exceeded, every failing node is reached).
	AllFail bool
	// EventsMayBeLost: a NATS restart happened while this rollout ran, so
	// events published without waiting for an ack may be missing.
	EventsMayBeLost bool
	// NodesMayLapse: the schedule can stop heartbeats of nodes it does not
	// make leave (a server stopped, a network fault), so the coordinator may
	// rightly skip a failing node as departed; when the record lists one of
	// MayFail as skipped, the phase and AllFail are not judged.
	NodesMayLapse bool
	// Leavers are the nodes the schedule makes leave (agent-leave): one may
	// be away while the rollout reverts.
	Leavers []string
	// Blocking are the gates the scenario makes fail or go without data;
	// MustBlock: no failing node beyond the budget explains a rollback,
	// so a rollback names one of them in blockedBy (gates.go).
	Blocking  []string
	MustBlock bool
	// Incompatible are the nodes whose agent cannot read this rollout's
	// config (version skew: agents of the baseline release, bake checks);
	// Refuse: its strategy does not skip them, so it is refused before it
	// touches any node; OldMayBeAway: one of them may be away at its start
	// (then nothing refuses for it, and it is skipped when it comes back).
	Incompatible []string
	Refuse       bool
	OldMayBeAway bool
	Why          string // the scenario's reasoning, for the failure message
}

// Violation is one broken invariant.
type Violation struct {
	Invariant string // I1..I8, Outcome, Once, Counts
	Rollout   string
	Node      string
	Detail    string
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Invariant)
	if v.Rollout != "" {
		b.WriteString(" rollout=" + v.Rollout)
	}
	if v.Node != "" {
		b.WriteString(" node=" + v.Node)
	}
	b.WriteString(": " + v.Detail)
	return b.String()
}

// Check returns every violation in o, sorted.
func Check(o *Observation) []Violation {
	o = judgeSpoiled(o)
	var vs []Violation
	add := func(inv, rollout, node, format string, args ...any) {
		vs = append(vs, Violation{Invariant: inv, Rollout: rollout, Node: node, Detail: fmt.Sprintf(format, args...)})
	}
	for _, what := range o.NotQuiescent {
		add("I2", "", "", "not quiescent: %s", what)
	}
	byID := map[string]*sluicev1.Rollout{}
	for _, r := range o.Rollouts {
		byID[r.GetId()] = r
	}
	checkEnded(o, add)
	checkApplied(o, byID, add)
	checkOutcomesKept(o, add)
	checkFingerprints(o, add)
	checkReaper(o, add)
	checkFencing(o, add)
	checkOnce(o, add)
	checkExpectations(o, add)
	checkCounts(o, add)
	checkPartialAnswers(o, add)
	checkHolds(o, add)
	checkPendingConfirms(o, add)
	checkRewinds(o, add)
	checkDeclared(o, add)
	checkReverted(o, add)
	checkJoinedRevert(o, add)
	checkBaked(o, add)
	checkReferencedKept(o, add)
	checkTimedOutRecorded(o, add)
	checkKnownBadNotWritten(o, add)
	checkPairs(o, add)
	checkFreezesAndWindows(o, add)
	checkGates(o, add)
	checkSkew(o, add)
	checkNodeFaults(o, add)
	for _, m := range o.Misread {
		add("I11", "", "", "an event sluice published is shown as unreadable: %s", m)
	}
	sort.SliceStable(vs, func(i, j int) bool {
		a, b := vs[i], vs[j]
		if a.Invariant != b.Invariant {
			return a.Invariant < b.Invariant
		}
		if a.Rollout != b.Rollout {
			return a.Rollout < b.Rollout
		}
		return a.Node < b.Node
	})
	return vs
}

type addFunc func(inv, rollout, node, format string, args ...any)

const shortFP = 12

func short(fp string) string {
	if len(fp) > shortFP {
		return fp[:shortFP]
	}
	if fp == "" {
		return "(none)"
	}
	return fp
}

// I2: every rollout ended, within its progress deadline (leader time).
func checkEnded(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		if !contract.Terminal(r.GetPhase()) {
			add("I2", r.GetId(), "", "rollout has not ended: %s at rest", r.GetPhase())
			continue
		}
		if d := r.GetStrategy().GetProgressDeadline(); d != nil && r.GetLeaderTime().AsDuration() > d.AsDuration()+time.Second {
			add("I2", r.GetId(), "", "ran %s of leader time, past its progress deadline %s", r.GetLeaderTime().AsDuration(), d.AsDuration())
		}
	}
	if o.Active != nil && o.Active.GetRollout() != "" {
		for _, r := range o.Rollouts {
			if r.GetId() == o.Active.GetRollout() && contract.Active(r.GetPhase()) {
				add("I2", r.GetId(), "", "rollouts/active still names it at rest")
			}
		}
	}
}

// I1: at rest each live node runs the config in force for it (the
// last-applied rollout's target, or for a node that failed in that rollout
// its backup), what it runs is on record as its desired or backup config,
// and a node that ever ran a config is never left on the empty one.
func checkApplied(o *Observation, byID map[string]*sluicev1.Rollout, add addFunc) {
	var last *sluicev1.Rollout
	if o.LastApplied != nil {
		last = byID[o.LastApplied.GetRollout()]
	}
	for _, n := range o.Nodes {
		if !n.Live {
			continue
		}
		everRan := false
		for _, a := range n.Applies {
			if a.Err == "" && a.Fingerprint != o.EmptyFingerprint && a.Fingerprint != "" {
				everRan = true
			}
		}
		if everRan && (n.OnDisk == o.EmptyFingerprint || n.OnDisk == "") {
			add("I1", "", n.Name, "runs the empty config %s although it ran a config before (desired %s, backup %s)",
				short(n.OnDisk), short(n.Desired.GetFingerprint()), short(n.Backup.GetFingerprint()))
		}
		if n.Desired != nil && n.OnDisk != n.Desired.GetFingerprint() && n.OnDisk != n.Backup.GetFingerprint() && !keptOwnLastGood(n) {
			add("I1", "", n.Name, "runs %s, neither its desired %s nor its backup %s",
				short(n.OnDisk), short(n.Desired.GetFingerprint()), short(n.Backup.GetFingerprint()))
		}
		if n.Status != nil && n.Status.GetAppliedFingerprint() != n.OnDisk {
			add("I1", "", n.Name, "status says %s in force, the applier's file has %s", short(n.Status.GetAppliedFingerprint()), short(n.OnDisk))
		}
		if last == nil {
			continue
		}
		want := o.Targets[last.GetId()][n.Name]
		if n.OnDisk == want || want == "" {
			continue
		}
		failedThere := slices.ContainsFunc(last.GetFailures(), func(f *sluicev1.NodeOutcome) bool { return f.GetNode() == n.Name }) ||
			(n.Status.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && n.Status.GetFingerprint() == want) ||
			// The config in force for it is known bad (it failed on a node with
			// the same config): the coordinator does not give it to this one.
			(n.Desired == nil && o.Fingerprints[want] != nil && o.Fingerprints[want].GetForgiven() == nil)
		if failedThere && (n.OnDisk == n.Backup.GetFingerprint() || ranBefore(n, n.OnDisk)) {
			continue // failed within the budget: it keeps its last-good
		}
		if toldUnrenderable(o, last, n) && ranBefore(n, n.OnDisk) {
			continue // the revision in force cannot be read: it keeps its last-good, and sluice said so
		}
		add("I1", last.GetId(), n.Name, "runs %s at rest; the config in force for it (last-applied %s) is %s%s",
			short(n.OnDisk), last.GetId(), short(want), whoseTarget(o, n))
	}
}

// I3: every final report of a rollout's target, made while the rollout ran,
// is reflected in its record.
func checkOutcomesKept(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		if !contract.Terminal(r.GetPhase()) || r.GetFinishedAt() == nil {
			continue
		}
		end := r.GetFinishedAt().AsTime()
		invalid, provisioned := map[string]bool{}, map[string]bool{}
		for _, st := range o.StatusWrites {
			node := st.GetNode()
			target := o.Targets[r.GetId()][node]
			if st.GetRollout() != r.GetId() || target == "" || st.GetFingerprint() != target || !st.GetLastUpdate().AsTime().Before(end) {
				continue
			}
			switch st.GetPhase() {
			case sluicev1.NodePhase_NODE_PHASE_INVALID:
				invalid[node] = true
			case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
				provisioned[node] = true
			}
		}
		// A node may be listed twice: its forward outcome, and its revert's.
		failed, invalidListed, revertFailed := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, f := range r.GetFailures() {
			switch f.GetResult() {
			case sluicev1.NodeResult_NODE_RESULT_INVALID:
				failed[f.GetNode()], invalidListed[f.GetNode()] = true, true
			case sluicev1.NodeResult_NODE_RESULT_TIMED_OUT:
				failed[f.GetNode()] = true
			case sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED:
				revertFailed[f.GetNode()] = true
			}
		}
		for _, node := range sortedKeys(invalid) {
			// A node whose revert the coordinator gave up on (its deadline
			// passed) may report on its forward target just after the rollout
			// ended for want of it: that report is recorded as an invalid
			// fingerprint (I4), not in the terminal record.
			if !failed[node] && !revertFailed[node] && !unseenAtLoad(o, r, node) {
				add("I3", r.GetId(), node, "reported Invalid for the target while the rollout ran; the record's failures do not list it")
			}
		}
		for _, node := range sortedKeys(provisioned) {
			if !invalid[node] && invalidListed[node] {
				add("I3", r.GetId(), node, "reported only Provisioned for the target; the record lists it Invalid")
			}
		}
	}
}

// unseenAtLoad: r ended in the step that resumed it at a term's load, and
// node is recorded skipped by that step as gone while no coordinator led
// (its presence was not in the term's read), and every Invalid report of
// it on its target came after that term began. Such a step decides on
// what the term read and nothing later (the live changes are taken in
// after it, docs/rollouts.md), so a node back during the load that
// reported before the step was stamped is in no record: its fingerprint
// is still held to I4 (chaos seed 27 under load: node-02, killed
// mid-apply while the leader was frozen, came back 86 ms into coord-b's
// 283 ms load and reported Invalid 8 ms after it; the same step skipped
// it and aborted the rollout, its only node gone).
func unseenAtLoad(o *Observation, r *sluicev1.Rollout, node string) bool {
	end := r.GetFinishedAt().AsTime()
	skip := outcomeOf(r.GetSkipped(), node)
	if skip == nil || !strings.Contains(skip.GetMessage(), "while no coordinator led") {
		return false
	}
	var term time.Time // the start of the last term before the end
	resumedAtEnd := false
	for _, e := range o.Events {
		at := e.GetTime().AsTime()
		switch {
		case e.GetType() == contract.EventLeadershipAcquired && !at.After(end) && at.After(term):
			term = at
		case e.GetType() == "RolloutResumed" && e.GetRollout() == r.GetId() && at.Equal(end):
			resumedAtEnd = true
		}
	}
	if !resumedAtEnd || term.IsZero() {
		return false
	}
	target := o.Targets[r.GetId()][node]
	for _, st := range o.StatusWrites {
		if st.GetNode() == node && st.GetRollout() == r.GetId() && st.GetFingerprint() == target &&
			st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && st.GetLastUpdate().AsTime().Before(end) &&
			!st.GetLastUpdate().AsTime().After(term) {
			return false // written before the term began: its load read it
		}
	}
	return true
}

func outcomeOf(list []*sluicev1.NodeOutcome, node string) *sluicev1.NodeOutcome {
	for _, o := range list {
		if o.GetNode() == node {
			return o
		}
	}
	return nil
}

// I4: every failed fingerprint (a failed check or a timeout) is recorded
// with node, check and output; so is every Invalid report of a rollout
// target. A node fault (every Invalid report of it says node_fault: the
// node could not apply any config) is a failure, not the config's: I9.
func checkFingerprints(o *Observation, add addFunc) {
	faulted := nodeFaulted(o)
	need := func(rollout, node, fp, why string) {
		rec := o.Fingerprints[fp]
		switch {
		case rec == nil:
			add("I4", rollout, node, "fingerprint %s (%s) is not recorded as invalid", short(fp), why)
		case rec.GetNode() == "" || rec.GetCheck() == "" || rec.GetOutput() == "":
			add("I4", rollout, node, "record of %s lacks node, check or output: node=%q check=%q output=%q",
				short(fp), rec.GetNode(), rec.GetCheck(), rec.GetOutput())
		}
	}
	for _, r := range o.Rollouts {
		for _, f := range r.GetFailures() {
			switch f.GetResult() {
			case sluicev1.NodeResult_NODE_RESULT_INVALID, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT:
				if f.GetFailedCheck() == "revert" || faulted[faultKey(r.GetId(), f.GetNode(), f.GetFingerprint())] {
					continue
				}
				need(r.GetId(), f.GetNode(), f.GetFingerprint(), strings.ToLower(strings.TrimPrefix(f.GetResult().String(), "NODE_RESULT_")))
			}
		}
	}
	seen := map[string]bool{}
	for _, st := range o.StatusWrites {
		if st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_INVALID || o.Targets[st.GetRollout()][st.GetNode()] != st.GetFingerprint() ||
			st.GetNodeFault() != "" {
			continue
		}
		if k := st.GetRollout() + "/" + st.GetNode(); !seen[k] {
			seen[k] = true
			need(st.GetRollout(), st.GetNode(), st.GetFingerprint(), "the node reported its target Invalid: "+st.GetFailedCheck())
		}
	}
}

// faultKey names one node's reports on fingerprint fp under rollout.
func faultKey(rollout, node, fp string) string { return rollout + "/" + node + "/" + fp }

// nodeFaulted is every faultKey whose Invalid reports (every status write
// of it in phase INVALID) all say node_fault: the agent found its node
// unable to apply any config before anything changed.
func nodeFaulted(o *Observation) map[string]bool {
	faulted, blamed := map[string]bool{}, map[string]bool{}
	for _, st := range o.StatusWrites {
		if st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_INVALID {
			continue
		}
		k := faultKey(st.GetRollout(), st.GetNode(), st.GetFingerprint())
		if st.GetNodeFault() != "" {
			faulted[k] = true
		} else {
			blamed[k] = true
		}
	}
	for k := range blamed {
		delete(faulted, k)
	}
	return faulted
}

// I9, node faults: a fingerprint recorded invalid (as failed, not timed
// out) from a node whose every Invalid report of it was a node fault blames
// the config for what the node could not do.
func checkNodeFaults(o *Observation, add addFunc) {
	faulted := nodeFaulted(o)
	for _, fp := range sortedKeys(o.Fingerprints) {
		rec := o.Fingerprints[fp]
		if rec.GetCause() != "timed-out" && faulted[faultKey(rec.GetRollout(), rec.GetNode(), fp)] {
			add("I9", rec.GetRollout(), rec.GetNode(), "fingerprint %s is recorded invalid (%s) from this node, whose every Invalid report of it was a node fault (node_fault): the node could not apply it, the config did not fail",
				short(fp), rec.GetCheck())
		}
	}
}

// I5: the reaper never deleted a key of a node the active rollout referenced.
func checkReaper(o *Observation, add addFunc) {
	type span struct{ start, end time.Time }
	active := map[string]*span{}
	for _, w := range o.RolloutWrites {
		if w.Rollout == nil || contract.IsControlKey(w.Key) || w.Key == contract.KeyActive || w.Key == contract.KeyLastApplied {
			continue
		}
		s := active[w.Key]
		if s == nil {
			s = &span{start: w.At}
			active[w.Key] = s
		}
		if contract.Terminal(w.Rollout.GetPhase()) && s.end.IsZero() {
			s.end = w.At
		}
	}
	touched := map[string]time.Time{} // rollout/node → first desired write
	for _, w := range o.ConfigWrites {
		node, which, ok := contract.NodeOfConfigKey(w.Key)
		if !ok || contract.IsControlKey(w.Key) {
			continue
		}
		if !w.Delete {
			if which == "desired" && w.Desired.GetRollout() != "" {
				k := w.Desired.GetRollout() + "/" + node
				if _, ok := touched[k]; !ok {
					touched[k] = w.At
				}
			}
			continue
		}
		for _, id := range sortedKeys(active) {
			s := active[id]
			first, ok := touched[id+"/"+node]
			if ok && first.Before(w.At) && !w.At.Before(s.start) && (s.end.IsZero() || w.At.Before(s.end)) {
				add("I5", id, node, "%s was deleted (revision %d) while the rollout was active and referenced the node", w.Key, w.Revision)
			}
		}
	}
}

// I6: a deposed leader's write never takes effect: in each bucket the
// leader epochs of stored desired configs and rollout records never go down
// (backups are copies of earlier desired configs and keep their epoch).
func checkFencing(o *Observation, add addFunc) {
	check := func(bucket string, ops []KVOp) {
		var maxEpoch uint64
		var maxKey string
		for _, w := range ops {
			if w.Delete || contract.IsControlKey(w.Key) {
				continue
			}
			var e uint64
			var rollout, node string
			switch {
			case w.Desired != nil:
				if _, which, _ := contract.NodeOfConfigKey(w.Key); which == "backup" {
					continue // a backup is a copy of an earlier desired config and keeps its epoch
				}
				e, rollout, node = w.Desired.GetLeaderEpoch(), w.Desired.GetRollout(), w.Desired.GetNode()
			case w.Rollout != nil:
				e, rollout = w.Rollout.GetLeaderEpoch(), w.Rollout.GetId()
			}
			if e == 0 {
				continue
			}
			if e < maxEpoch {
				add("I6", rollout, node, "%s/%s revision %d was written with leader epoch %d after %s was written with epoch %d: a deposed leader's write took effect",
					bucket, w.Key, w.Revision, e, maxKey, maxEpoch)
			}
			if e > maxEpoch {
				maxEpoch, maxKey = e, w.Key
			}
		}
	}
	check(contract.BucketNodeConfigs, o.ConfigWrites)
	check(contract.BucketRollouts, o.RolloutWrites)
}

// Once: a rollout is started once, its terminal record is never written
// again, and no node is given the target of a rollout that ended without
// leaving it in force (RolledBack, Aborted). A rollout that ended in force
// may give its target to a node that joins later: that is the config in force.
func checkOnce(o *Observation, add addFunc) {
	started := map[string]int{}
	for _, ev := range o.Events {
		if ev.GetType() == "RolloutStarted" {
			started[ev.GetRollout()]++
		}
	}
	for _, id := range sortedKeys(started) {
		if started[id] > 1 {
			add("Once", id, "", "%d RolloutStarted events: the rollout ran more than once", started[id])
		}
	}
	ended := map[string]KVOp{}
	for _, w := range o.RolloutWrites {
		if w.Rollout == nil || w.Delete || w.Key == contract.KeyActive || w.Key == contract.KeyLastApplied || contract.IsControlKey(w.Key) {
			continue
		}
		if prev, ok := ended[w.Key]; ok {
			add("Once", w.Key, "", "terminal record (%s, revision %d) was written again: now %s %q (revision %d)",
				prev.Rollout.GetPhase(), prev.Revision, w.Rollout.GetPhase(), w.Rollout.GetReason(), w.Revision)
			continue
		}
		if contract.Terminal(w.Rollout.GetPhase()) {
			ended[w.Key] = w
		}
	}
	finished := map[string]time.Time{}
	for _, r := range o.Rollouts {
		if contract.Terminal(r.GetPhase()) && !contract.InForce(r.GetPhase()) && r.GetFinishedAt() != nil {
			finished[r.GetId()] = r.GetFinishedAt().AsTime()
		}
	}
	reported := map[string]bool{}
	for _, w := range o.ConfigWrites {
		d := w.Desired
		if d == nil || d.GetRevert() || d.GetWrittenAt() == nil {
			continue
		}
		end, ok := finished[d.GetRollout()]
		if !ok || !d.GetWrittenAt().AsTime().After(end) || o.Targets[d.GetRollout()][d.GetNode()] != d.GetFingerprint() {
			continue
		}
		if k := d.GetRollout() + "/" + d.GetNode(); !reported[k] {
			reported[k] = true
			add("Once", d.GetRollout(), d.GetNode(), "was given the rollout's target %s at %s, after the rollout ended at %s",
				short(d.GetFingerprint()), d.GetWrittenAt().AsTime().Format("15:04:05.000"), end.Format("15:04:05.000"))
		}
	}
}

// Outcome: each rollout ended as the scenario implies.
func checkExpectations(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		x, ok := o.Expect[r.GetId()]
		if !ok || !contract.Terminal(r.GetPhase()) {
			continue
		}
		if x.NodesMayLapse && slices.ContainsFunc(r.GetSkipped(), func(n *sluicev1.NodeOutcome) bool { return slices.Contains(x.MayFail, n.GetNode()) }) {
			x.Phases, x.AllFail = nil, false // a failing node lapsed and was skipped: it may not count
		}
		// A failing node listed INCOMPATIBLE was never given the target (its
		// agent cannot read it, or its presence got garbage: the coordinator
		// cannot tell what it reads): it may not count. checkSkew judges
		// whether it should have been listed so.
		if slices.ContainsFunc(r.GetSkipped(), func(n *sluicev1.NodeOutcome) bool {
			return n.GetResult() == sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE && slices.Contains(x.MayFail, n.GetNode())
		}) {
			x.Phases, x.AllFail = nil, false
		}
		// A failing node the rollout never wrote to, whose presence lapsed
		// (or got garbage) while no coordinator led, leaves no trace in the
		// record but its total (docs/rollouts.md, "Restarts and
		// leadership"): the record's total is below the fleet and names it
		// nowhere. It may not count (seed 103, skew: node-02's presence
		// garbage during a NATS restart).
		if c := r.GetCounts(); int(c.GetTotal()) < len(o.Nodes) && slices.ContainsFunc(x.MayFail, func(n string) bool {
			named := slices.ContainsFunc(append(slices.Clone(r.GetFailures()), r.GetSkipped()...), func(f *sluicev1.NodeOutcome) bool { return f.GetNode() == n })
			gone := x.NodesMayLapse || slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool { return sp.Bucket == contract.BucketNodes && sp.Key == n })
			return !named && gone
		}) {
			x.Phases, x.AllFail = nil, false
		}
		// Every node it was for lapsed before it was configured: it proved
		// nothing, and ends Aborted rather than in force (docs/rollouts.md).
		if c := r.GetCounts(); x.NodesMayLapse && len(x.Phases) > 0 && c.GetProvisioned() == 0 && c.GetSkipped() > 0 {
			x.Phases, x.AllFail = append(slices.Clone(x.Phases), sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED), false
		}
		// A node whose desired key got garbage while the rollout ran may
		// never have read its config (its agent refuses the garbage): it
		// may time out, and then the rollout may end any way.
		spoiled := desiredSpoiledWhile(o, r)
		if slices.ContainsFunc(r.GetFailures(), func(f *sluicev1.NodeOutcome) bool {
			return f.GetResult() == sluicev1.NodeResult_NODE_RESULT_TIMED_OUT && spoiled[f.GetNode()]
		}) {
			x.Phases, x.AllFail = nil, false
		}
		// A rollout whose revision got garbage before it ended cannot render
		// its nodes' configs in a new term, and one whose record did cannot
		// be resumed (the term stops it as an abort and reverts what it
		// touched: rollout.LostRollout): either may stop there, Aborted.
		if len(x.Phases) > 0 && slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool {
			spoilsIt := sp.Bucket == contract.BucketRevisions && sp.Key == r.GetRevision() ||
				sp.Bucket == contract.BucketRollouts && sp.Key == r.GetId()
			return spoilsIt && (r.GetFinishedAt() == nil || sp.At.Before(r.GetFinishedAt().AsTime()))
		}) {
			x.Phases, x.AllFail = append(slices.Clone(x.Phases), sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED), false
		}
		if len(x.Phases) > 0 && !slices.Contains(x.Phases, r.GetPhase()) {
			add("Outcome", r.GetId(), "", "ended %s (%q); the scenario implies %s: %s", r.GetPhase(), r.GetReason(), phaseList(x.Phases), x.Why)
		}
		failed := map[string]bool{}
		for _, f := range r.GetFailures() {
			if f.GetResult() != sluicev1.NodeResult_NODE_RESULT_INVALID && f.GetResult() != sluicev1.NodeResult_NODE_RESULT_TIMED_OUT {
				continue
			}
			failed[f.GetNode()] = true
			if f.GetResult() == sluicev1.NodeResult_NODE_RESULT_TIMED_OUT && spoiled[f.GetNode()] {
				continue
			}
			if !slices.Contains(x.MayFail, f.GetNode()) {
				add("Outcome", r.GetId(), f.GetNode(), "recorded %s (%s: %s), but the scenario never makes it fail", f.GetResult(), f.GetFailedCheck(), f.GetMessage())
			}
		}
		if x.AllFail {
			for _, n := range x.MayFail {
				if !failed[n] {
					add("Outcome", r.GetId(), n, "the scenario makes it fail and the rollout reached every node, but the record does not list it failed")
				}
			}
		}
	}
}

// Counts: the record's counts match what happened.
func checkCounts(o *Observation, add addFunc) {
	reverted := map[string]map[string]bool{}
	for _, ev := range o.Events {
		if ev.GetType() == "NodeReverted" {
			if reverted[ev.GetRollout()] == nil {
				reverted[ev.GetRollout()] = map[string]bool{}
			}
			reverted[ev.GetRollout()][ev.GetNode()] = true
		}
	}
	for _, r := range o.Rollouts {
		if !contract.Terminal(r.GetPhase()) {
			continue
		}
		c := r.GetCounts()
		failed := map[string]bool{}
		for _, f := range r.GetFailures() {
			// docs/rollouts.md: failed counts every node that failed, timed
			// out, or was refused (its target recorded invalid).
			switch f.GetResult() {
			case sluicev1.NodeResult_NODE_RESULT_INVALID, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, sluicev1.NodeResult_NODE_RESULT_REFUSED:
				failed[f.GetNode()] = true
			}
		}
		if int(c.GetFailed()) != len(failed) {
			add("Counts", r.GetId(), "", "counts.failed = %d, but %d nodes failed, timed out or were refused (%s)", c.GetFailed(), len(failed), strings.Join(sortedKeys(failed), ", "))
		}
		if int(c.GetSkipped()) != len(r.GetSkipped()) {
			add("Counts", r.GetId(), "", "counts.skipped = %d, but %d skipped nodes are listed", c.GetSkipped(), len(r.GetSkipped()))
		}
		// docs/rollouts.md: the forward counts add up to the total, every
		// node of the rollout counted once.
		if sum := c.GetPending() + c.GetInProgress() + c.GetProvisioned() + c.GetFailed() + c.GetSkipped() + c.GetStopped() + c.GetNotStarted(); sum != c.GetTotal() {
			add("Counts", r.GetId(), "", "the forward counts add up to %d, not the total %d (%v)", sum, c.GetTotal(), c)
		}
		ev := len(reverted[r.GetId()])
		x := o.Expect[r.GetId()]
		// A node whose desired key got garbage while the rollout ran may
		// have been reverted by a term whose successor cannot read that
		// revert (the garbage is all its key holds): the successor's record
		// may not count it.
		unknowable := 0
		spoiled := desiredSpoiledWhile(o, r)
		for n := range reverted[r.GetId()] {
			if spoiled[n] {
				unknowable++
			}
		}
		switch {
		case int(c.GetReverted()) == ev:
		case int(c.GetReverted()) < ev && int(c.GetReverted()) >= ev-unknowable:
		case x.EventsMayBeLost && ev < int(c.GetReverted()):
			// a NATS restart may have dropped an unacknowledged event
		default:
			add("Counts", r.GetId(), "", "counts.reverted = %d, but %d nodes have a NodeReverted event (%s)", c.GetReverted(), ev, strings.Join(sortedKeys(reverted[r.GetId()]), ", "))
		}
	}
}

func phaseList(ps []sluicev1.RolloutPhase) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strings.TrimPrefix(p.String(), "ROLLOUT_PHASE_")
	}
	return strings.Join(s, " or ")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// whoseTarget names the rollouts whose target for n is what n runs, to help
// read an I1 failure (for example a PartiallyFailed rollout that did not
// become last-applied).
func whoseTarget(o *Observation, n NodeObs) string {
	var ids []string
	for _, r := range o.Rollouts {
		if o.Targets[r.GetId()][n.Name] == n.OnDisk {
			ids = append(ids, fmt.Sprintf("%s (ended %s)", r.GetId(), strings.TrimPrefix(r.GetPhase().String(), "ROLLOUT_PHASE_")))
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return "; it runs the target of " + strings.Join(ids, ", ")
}

// toldUnrenderable: node n has no desired config, the revision in force
// (rollout last's) still holds the harness's garbage at rest, so no
// coordinator can render n's config in force, and one said so naming n
// (NodeNotConfigured). A node whose keys were reaped while it was away
// comes back to that (virtual seed 230: its revert was deferred until it
// came back, the reaper deleted its backup after the rollout ended).
func toldUnrenderable(o *Observation, last *sluicev1.Rollout, n NodeObs) bool {
	if n.Desired != nil || !slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool {
		return sp.AtRest && sp.Bucket == contract.BucketRevisions && sp.Key == last.GetRevision()
	}) {
		return false
	}
	return slices.ContainsFunc(o.Events, func(ev *sluicev1.Event) bool {
		return ev.GetType() == "NodeNotConfigured" && ev.GetNode() == n.Name && ev.GetRevision() == last.GetRevision()
	})
}

// ranBefore reports whether n's applier put fp in force without error at
// some point: a config it can hold as last-good.
// keptOwnLastGood: the node's desired config failed on it and its agent
// runs its own last-good, which no backup key names because the node had
// none (its keys were reaped while it was away, and it was configured
// afresh when it came back).
func keptOwnLastGood(n NodeObs) bool {
	st := n.Status
	return n.Backup == nil && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
		st.GetFingerprint() == n.Desired.GetFingerprint() && st.GetAppliedFingerprint() == n.OnDisk && ranBefore(n, n.OnDisk)
}

func ranBefore(n NodeObs, fp string) bool {
	return slices.ContainsFunc(n.Applies, func(a Apply) bool { return a.Err == "" && a.Fingerprint == fp })
}

// judgeSpoiled returns o as the checker judges it. A key that still holds
// a garbage value the harness wrote (garbage-value) is judged by the value
// its owner stored there before: nobody rewrote it, its owner still goes by
// that value, and every reader sees the key as unreadable. So a node whose
// desired config, backup or status key holds garbage is judged by its
// coordinator's or agent's last write there (I1), a rollout record or
// pointer by the coordinator's last one (I1–I4, Outcome, Counts), a failed
// fingerprint by its record (I4). A key whose garbage was rewritten is
// read as rewritten: nothing changes for it.
//
// A stale desired config the harness wrote (stale-desired: a deposed
// leader's write, well-formed) is no sluice write: it leaves the writes
// judged along the run (I6, Once, KnownBad …), and a key that still holds
// it at rest is judged by the coordinator's write before it.
func judgeSpoiled(o *Observation) *Observation {
	if slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool { return sp.Stale }) {
		c := *o
		c.ConfigWrites = slices.DeleteFunc(slices.Clone(o.ConfigWrites), func(w KVOp) bool {
			return slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool {
				return sp.Stale && sp.Bucket == contract.BucketNodeConfigs && sp.Key == w.Key && sp.Revision == w.Revision
			})
		})
		o = &c
	}
	if !slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool { return sp.AtRest && sp.Before != nil }) {
		return o
	}
	c := *o
	c.Nodes = slices.Clone(o.Nodes)
	c.Rollouts = slices.Clone(o.Rollouts)
	c.Fingerprints = maps.Clone(o.Fingerprints)
	node := func(name string) *NodeObs {
		for i := range c.Nodes {
			if c.Nodes[i].Name == name {
				return &c.Nodes[i]
			}
		}
		return nil
	}
	for _, sp := range o.Spoiled {
		if !sp.AtRest {
			continue
		}
		switch v := sp.Before.(type) {
		case *sluicev1.DesiredConfig:
			name, which, _ := contract.NodeOfConfigKey(sp.Key)
			if n := node(name); n != nil && which == "desired" && (n.Desired == nil || sp.Stale) {
				n.Desired = v
			} else if n != nil && which == "backup" && n.Backup == nil {
				n.Backup = v
			}
		case *sluicev1.NodeStatus:
			if n := node(sp.Key); n != nil && n.Status == nil {
				n.Status = v
			}
		case *sluicev1.Rollout:
			if !slices.ContainsFunc(c.Rollouts, func(r *sluicev1.Rollout) bool { return r.GetId() == sp.Key }) {
				c.Rollouts = append(c.Rollouts, v)
			}
		case *sluicev1.RolloutRef:
			switch {
			case sp.Key == contract.KeyActive && c.Active == nil:
				c.Active = v
			case sp.Key == contract.KeyLastApplied && c.LastApplied == nil:
				c.LastApplied = v
			}
		case *sluicev1.InvalidFingerprint:
			if c.Fingerprints[sp.Key] == nil {
				c.Fingerprints[sp.Key] = v
			}
		}
	}
	return &c
}

// desiredSpoiledWhile names the nodes whose desired key the harness wrote
// garbage into while rollout r ran (from its first stored write to its end).
func desiredSpoiledWhile(o *Observation, r *sluicev1.Rollout) map[string]bool {
	out := map[string]bool{}
	if len(o.Spoiled) == 0 {
		return out
	}
	var start time.Time
	for _, w := range o.RolloutWrites {
		if w.Key == r.GetId() && w.Rollout != nil {
			start = w.At
			break
		}
	}
	end := r.GetFinishedAt().AsTime()
	for _, sp := range o.Spoiled {
		name, which, ok := contract.NodeOfConfigKey(sp.Key)
		if sp.Bucket != contract.BucketNodeConfigs || !ok || which != "desired" {
			continue
		}
		if (start.IsZero() || !sp.At.Before(start)) && (r.GetFinishedAt() == nil || sp.At.Before(end)) {
			out[name] = true
		}
	}
	return out
}

// I7: no intent is marked for deletion because of a registry answer that
// later proved partial. The harness knows when each registry intent's file
// was absent (Registry.Absent); every other answer declared it. A mark is
// one only an answer lacking the intent can cause, so it must follow an
// absence that had lasted the whole settle period by then, and that lasted
// at least the settle period in all: a file back within the settle period
// proves the answers that lacked it partial. Marks are read from the
// intents bucket's writes (a write that marks an unmarked intent) and from
// IntentMarkedForDeletion events (their time is the configurator's).
// A mark after the harness confirmed a pending set naming the intent,
// while its file was out, is the operator's (ConfirmPending), not an
// answer's.
// A mark while a git registry's branch was rewound (registry-rewind), or
// within growthSeen after it was put back, is a violation whatever the
// settle period says: a rewound branch is held, never an answer.
//
// And while the registry refills, no mark: an answer that grows (a file
// back) starts the settle period of every intent still missing again, so a
// mark needs the whole settle period without a file coming back, not only
// its own file's absence. A file back less than growthSeen before the mark
// is not counted: the answer the mark followed may have been read before.
func checkPartialAnswers(o *Observation, add addFunc) {
	reg := o.Registry
	if reg == nil {
		return
	}
	type growth struct {
		at  time.Time
		key string
	}
	var grew []growth // when a file came back: the answers grew
	for _, key := range reg.Intents {
		for _, sp := range reg.Absent[key] {
			if !sp.To.IsZero() {
				grew = append(grew, growth{sp.To, key})
			}
		}
	}
	slices.SortFunc(grew, func(a, b growth) int { return a.at.Compare(b.at) })
	// lastGrowth is the latest file back after from and growthSeen or more
	// before m.
	lastGrowth := func(from, m time.Time) (growth, bool) {
		var last growth
		for _, g := range grew {
			if g.at.After(from) && !g.at.After(m.Add(-growthSeen)) {
				last = g
			}
		}
		return last, !last.at.IsZero()
	}
	marks := intentMarks(o)
	for _, key := range reg.Intents {
		for _, m := range marks[key] {
			var span *Span
			for i, sp := range reg.Absent[key] {
				if !sp.From.After(m) {
					span = &reg.Absent[key][i]
				}
			}
			var why string
			rewound := slices.IndexFunc(reg.Rewinds, func(r RewindObs) bool {
				return !m.Before(r.From) && (r.To.IsZero() || m.Before(r.To.Add(growthSeen)))
			})
			switch {
			case reg.confirmedPending(key, m):
				continue // an operator confirmed its pending deletion (ConfirmPending)
			case rewound >= 0:
				why = fmt.Sprintf("the registry's branch was force-pushed to an older commit at %s (a rewind), which is held, never synced",
					reg.Rewinds[rewound].From.Format("15:04:05.000"))
			case span == nil:
				why = "no answer of the registry lacked it: its file was never removed"
			case m.Before(span.From.Add(reg.Settle)):
				why = fmt.Sprintf("its file had been gone %s, less than the settle period %s", m.Sub(span.From).Round(time.Millisecond), reg.Settle)
			case !span.To.IsZero() && span.To.Sub(span.From) < reg.Settle:
				why = fmt.Sprintf("its file came back %s after it left, within the settle period %s: the answers that lacked it were partial",
					span.To.Sub(span.From).Round(time.Millisecond), reg.Settle)
			default:
				g, ok := lastGrowth(span.From, m)
				if !ok || !m.Before(g.at.Add(reg.Settle)) {
					continue // missing for the whole settle period, which no growing answer restarted: a deletion
				}
				why = fmt.Sprintf("the registry's answer grew %s before (%s came back at %s), within the settle period %s: a source that refills may still bring it, and a growing answer starts the period again",
					m.Sub(g.at).Round(time.Millisecond), g.key, g.at.Format("15:04:05.000"), reg.Settle)
			}
			add("I7", "", "", "registry %s's intent %s was marked for deletion at %s; %s", reg.Name, key, m.Format("15:04:05.000"), why)
			break // once per intent
		}
	}
}

// intentMarks are the times each intent was marked for deletion, in order:
// a write of the intents bucket that marks an unmarked intent, and an
// IntentMarkedForDeletion event (its time is the configurator's).
func intentMarks(o *Observation) map[string][]time.Time {
	marks := map[string][]time.Time{}
	marked := map[string]bool{}
	for _, w := range o.IntentWrites {
		if w.Intent == nil {
			continue
		}
		m := w.Intent.GetMarkedForDeletion()
		if m && !marked[w.Key] {
			marks[w.Key] = append(marks[w.Key], w.At)
		}
		marked[w.Key] = m
	}
	for _, ev := range o.Events {
		if ev.GetType() == "IntentMarkedForDeletion" && ev.GetTime() != nil {
			marks[ev.GetId()] = append(marks[ev.GetId()], ev.GetTime().AsTime())
		}
	}
	for _, ms := range marks {
		slices.SortFunc(ms, func(a, b time.Time) int { return a.Compare(b) })
	}
	return marks
}

// Hold: a registry answer that drops more of its intents than the hold
// share lets be pending (registry-hold) is held, not marked, until an
// operator confirms it, and the confirmation marks them. For each hold the
// harness made: the registry's status held exactly the dropped intents'
// deletion while their files were out; none of them was marked between the
// drop and the confirmation (or, unconfirmed, their return); and once
// confirmed, each was marked within confirmWithin. Not judged when garbage
// was written over the registry's spec, confirmation, status or intents:
// what sluice does with those is what its rules for unreadable values say.
func checkHolds(o *Observation, add addFunc) {
	reg := o.Registry
	if reg == nil || len(reg.Holds) == 0 {
		return
	}
	for _, sp := range o.Spoiled {
		if (sp.Bucket == contract.BucketRegistries && sp.Key == reg.Name) ||
			(sp.Bucket == contract.BucketControl && (sp.Key == contract.RegistryKey(reg.Name) || sp.Key == contract.RegistryConfirmKey(reg.Name))) ||
			(sp.Bucket == contract.BucketIntents && slices.Contains(reg.Intents, sp.Key)) {
			return
		}
	}
	marks := intentMarks(o)
	clock := func(t time.Time) string { return t.Format("15:04:05.000") }
	for _, h := range reg.Holds {
		if h.Back.IsZero() {
			continue // the fault did not get to the end (the run ended, or the harness failed: said so)
		}
		what := fmt.Sprintf("registry %s's answers dropped %d of its %d intents (%s) from %s, more than its hold share lets be pending",
			reg.Name, len(h.Intents), h.Owned, strings.Join(h.Intents, ", "), clock(h.From))
		if h.Held.IsZero() {
			add("Hold", "", "", "%s; its status never held their deletion in the %s they were out (last read: %s)",
				what, h.Back.Sub(h.From).Round(time.Millisecond), h.Seen)
		}
		end, until := h.Back, "they came back unconfirmed at "+clock(h.Back)
		if !h.Confirmed.IsZero() {
			end, until = h.Confirmed, "the harness confirmed the deletion at "+clock(h.Confirmed)
		}
		for _, key := range h.Intents {
			if i := slices.IndexFunc(marks[key], func(m time.Time) bool { return m.After(h.From) && m.Before(end) }); i >= 0 {
				add("Hold", "", "", "%s; %s was marked for deletion at %s, before %s: a mass deletion is held until confirmed",
					what, key, clock(marks[key][i]), until)
			}
			if h.Confirmed.IsZero() {
				continue
			}
			if !slices.ContainsFunc(marks[key], func(m time.Time) bool {
				return !m.Before(h.Confirmed) && m.Before(h.Confirmed.Add(confirmWithin+growthSeen))
			}) {
				add("Hold", "", "", "%s; the harness confirmed the held deletion at %s, and %s was not marked for deletion within %s of it",
					what, clock(h.Confirmed), key, confirmWithin+growthSeen)
			}
		}
	}
}

// I8, as far as a run shows it: a value that is not well-formed for its key
// never reaches a decision. The driver declares the same intents in every
// change and never deletes one, so every revision rolled out from its first
// change on holds each of them; one that lacks an intent was cut from a
// stored set that took an unreadable value (garbage-value) for no intent.
func checkDeclared(o *Observation, add addFunc) {
	if o.DeclaredFrom == 0 {
		return
	}
	for _, r := range o.Rollouts {
		have, ok := o.RevisionIntents[r.GetId()]
		if !ok || r.GetGeneration() < o.DeclaredFrom {
			continue
		}
		var lacks []string
		for _, k := range o.Declared {
			if !slices.Contains(have, k) {
				lacks = append(lacks, k)
			}
		}
		if len(lacks) > 0 {
			add("I8", r.GetId(), "", "its revision %s leaves out %s, which every change declares and nothing deleted (generation %d; an unreadable stored intent taken for none?)",
				short(r.GetRevision()), strings.Join(lacks, ", "), r.GetGeneration())
		}
	}
}
