package contract

import (
	"fmt"
	"slices"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The one definition of a rollout's counts: every count `sluice rollout
// status`, the coordinator's metrics and the dashboard show is a category
// below, with its key (the RolloutCounts field as JSON names it), its words
// and what it means. Tally lays a record's counts out in three lists, each
// adding up to the total it names:
//
//   - Nodes, the forward categories: every node of the rollout once
//     (pending + in progress + provisioned + failed + skipped + stopped in
//     flight + not started = total);
//   - Revert: the touched nodes being put back (reverting + reverted +
//     revert failed), counted again;
//   - Operations: the node operations the rollout started (in progress +
//     completed + failed + cancelled at their deadline + stopped in flight =
//     attempted).
//
// Place puts one node in a category of the same list, so that a map drawn
// from it agrees with the counts.

// Category keys. Failed includes timed out (TimedOut is "of which"), Skipped
// includes incompatible.
const (
	CountPending      = "pending"
	CountInProgress   = "inProgress"
	CountProvisioned  = "provisioned"
	CountFailed       = "failed"
	CountTimedOut     = "timedOut"
	CountSkipped      = "skipped"
	CountIncompatible = "incompatible"
	CountStopped      = "stopped"
	CountNotStarted   = "notStarted"
	CountReverting    = "reverting"
	CountReverted     = "reverted"
	CountRevertFailed = "revertFailed"
	CountCompleted    = "completed" // operations only
	CountCancelled    = "cancelled" // operations only
	// PlaceOutside is a node of the fleet that is not one of the rollout's
	// (it left before the rollout started), or, with no rollout, a node
	// without a status: Place only.
	PlaceOutside = "outside"
)

// Category is one count: its key, its words, what it means, how many, and
// the part of it a sub-category says (timed out of failed).
type Category struct {
	Key     string     `json:"key"`
	Words   string     `json:"words"`
	Meaning string     `json:"meaning"`
	N       uint32     `json:"n"`
	Of      []Category `json:"of,omitempty"`
	// Names are the nodes it counts, by name, where the record names them
	// and nothing else would once they moved on: stopped in flight
	// (Rollout.stopped_nodes, the first 100 by name; N-len(Names) more
	// are counted and not named).
	Names []string `json:"names,omitempty"`
}

// Named lists c's named nodes as a line says them ("node-04, node-07 and
// 3 more"); "" when it names none.
func (c Category) Named() string {
	if len(c.Names) == 0 {
		return ""
	}
	line := strings.Join(c.Names, ", ")
	if more := sub(c.N, uint32(len(c.Names))); more > 0 {
		line += fmt.Sprintf(" and %d more", more)
	}
	return line
}

// Categories is every key's words and meaning, in the order they are shown.
var Categories = []Category{
	{Key: CountPending, Words: "pending", Meaning: "waiting for a slot: the rollout has not written its config yet"},
	{Key: CountInProgress, Words: "in progress", Meaning: "its config written, no final report from its agent yet"},
	{Key: CountProvisioned, Words: "provisioned", Meaning: "runs the rollout's config: reported Provisioned with it, or had it already (the rollout did not change it)"},
	{Key: CountFailed, Words: "failed", Meaning: "failed a check or its apply, timed out, or was refused (its config is known bad): counts against the failure budget"},
	{Key: CountTimedOut, Words: "timed out", Meaning: "of the failed: no final report within its deadline (its operation was cancelled)"},
	{Key: CountSkipped, Words: "skipped", Meaning: "left during the rollout, or its agent cannot read the config: not a failure"},
	{Key: CountIncompatible, Words: "incompatible", Meaning: "of the skipped: its agent cannot read the config (it needs a newer agent)"},
	{Key: CountStopped, Words: "stopped in flight", Meaning: "its config was written when the rollout stopped (a revert or an abort): no outcome of its own"},
	{Key: CountNotStarted, Words: "not started", Meaning: "still pending when the rollout stopped: never touched"},
	{Key: CountReverting, Words: "reverting", Meaning: "a touched node whose backup is queued or written back, no report yet"},
	{Key: CountReverted, Words: "reverted", Meaning: "a touched node whose backup is in force again"},
	{Key: CountRevertFailed, Words: "revert failed", Meaning: "a touched node whose revert failed, timed out or had no safe target"},
	{Key: CountCompleted, Words: "completed", Meaning: "an operation that ended without failing: provisioned, or its node was skipped after it started"},
	{Key: CountCancelled, Words: "cancelled at their deadline", Meaning: "an operation that timed out: cancelled at its deadline"},
	{Key: PlaceOutside, Words: "not in this rollout", Meaning: "a node of the fleet the rollout does not count (it was not present when it started), or no rollout and no status"},
}

// category is key's entry of Categories with n.
func category(key string, n uint32, of ...Category) Category {
	for _, c := range Categories {
		if c.Key == key {
			c.N, c.Of = n, of
			return c
		}
	}
	panic("contract: no category " + key)
}

// Words is key's words ("in progress"), key itself when it has none.
func Words(key string) string {
	for _, c := range Categories {
		if c.Key == key {
			return c.Words
		}
	}
	return key
}

// Tally is a rollout's counts by category: Nodes add up to Total, Revert
// to Touched (the nodes its revert put or puts back), Operations to
// Attempted.
type Tally struct {
	Total      uint32     `json:"total"`
	Nodes      []Category `json:"nodes"`
	Touched    uint32     `json:"touched"`
	Revert     []Category `json:"revert,omitempty"`
	Attempted  uint32     `json:"attempted"`
	Operations []Category `json:"operations,omitempty"`
	// Off says which list does not add up to its total, and by how much
	// ("the counts add up to 4, not the total 5"): "" when all do. A record
	// the coordinator wrote always adds up; one that does not is shown as
	// it is, and says so.
	Off string `json:"off,omitempty"`
}

// TallyOf lays r's counts out by category. The operations' failures
// leave out the nodes refused (never touched), which the record's failures
// list names (bounded: its first 100). Stopped in flight names its nodes
// (the record's stopped_nodes).
//
// A node counted stopped in flight is named by the record, not by where
// its status now places it: once its revert is done it is placed reverted
// (Place), and only the record still says it stopped in flight.
func TallyOf(r *sluicev1.Rollout) Tally {
	c := r.GetCounts()
	t := Tally{Total: c.GetTotal(), Attempted: c.GetAttempted()}
	stopped := category(CountStopped, c.GetStopped())
	if stopped.N > 0 {
		stopped.Names = r.GetStoppedNodes()
	}
	t.Nodes = []Category{
		category(CountPending, c.GetPending()),
		category(CountInProgress, c.GetInProgress()),
		category(CountProvisioned, c.GetProvisioned()),
		category(CountFailed, c.GetFailed(), category(CountTimedOut, c.GetTimedOut())),
		category(CountSkipped, c.GetSkipped(), category(CountIncompatible, c.GetIncompatible())),
		stopped,
		category(CountNotStarted, c.GetNotStarted()),
	}
	if n := c.GetReverting() + c.GetReverted() + c.GetRevertFailed(); n > 0 {
		t.Touched = n
		t.Revert = []Category{category(CountReverting, c.GetReverting()), category(CountReverted, c.GetReverted()),
			category(CountRevertFailed, c.GetRevertFailed())}
	}
	var refused uint32
	for _, f := range r.GetFailures() {
		if f.GetResult() == sluicev1.NodeResult_NODE_RESULT_REFUSED {
			refused++
		}
	}
	failedOps := sub(c.GetFailed(), c.GetTimedOut()+refused)
	ended := c.GetInProgress() + failedOps + c.GetTimedOut() + c.GetStopped()
	if t.Attempted > 0 {
		t.Operations = []Category{
			category(CountInProgress, c.GetInProgress()),
			category(CountCompleted, sub(t.Attempted, ended)),
			category(CountFailed, failedOps),
			category(CountCancelled, c.GetTimedOut()),
			category(CountStopped, c.GetStopped()),
		}
	}
	switch {
	case Sum(t.Nodes) != t.Total:
		t.Off = fmt.Sprintf("the counts add up to %d, not the total %d", Sum(t.Nodes), t.Total)
	case Sum(t.Operations) != t.Attempted:
		t.Off = fmt.Sprintf("the operations add up to %d, not the %d attempted", Sum(t.Operations), t.Attempted)
	}
	return t
}

// Sum adds up cs (not their sub-categories, which are part of them).
func Sum(cs []Category) uint32 {
	var n uint32
	for _, c := range cs {
		n += c.N
	}
	return n
}

// sub is a-b, 0 when b is more.
func sub(a, b uint32) uint32 {
	if b > a {
		return 0
	}
	return a - b
}

// Placer puts the nodes of one rollout record in its categories (Place).
type Placer struct {
	r            *sluicev1.Rollout
	running      bool
	outcome      map[string]*sluicev1.NodeOutcome // forward outcomes by node: failures, then skipped
	revertFailed map[string]bool
}

// NewPlacer indexes r's outcomes; r nil places by phase alone.
func NewPlacer(r *sluicev1.Rollout) *Placer {
	p := &Placer{r: r, running: r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		outcome: map[string]*sluicev1.NodeOutcome{}, revertFailed: map[string]bool{}}
	for _, o := range r.GetFailures() {
		if o.GetResult() == sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED || o.GetFailedCheck() == "revert" {
			p.revertFailed[o.GetNode()] = true
		} else if p.outcome[o.GetNode()] == nil {
			p.outcome[o.GetNode()] = o
		}
	}
	for _, o := range r.GetSkipped() {
		if p.outcome[o.GetNode()] == nil {
			p.outcome[o.GetNode()] = o
		}
	}
	return p
}

// Place is the category of node in the rollout: a key of Nodes or Revert
// (a touched node in its revert is placed there: what it runs now), or
// PlaceOutside. st is its status (nil: none); present says its agent is
// present; target is its config's fingerprint under the rollout's revision,
// "" when not known (then the status's revision tells whether it reports
// the rollout's config). Status and record are read at one moment: a node
// whose config was written but whose agent has not acknowledged it yet
// still reports its old config, and is placed pending (the record counts
// it in progress) for that moment — unless the caller read that write:
// written says node's desired config is this rollout's forward config
// (not its revert), and the node is then in progress while the rollout
// runs, being written, as the record counts it.
func (p *Placer) Place(node string, present bool, st *sluicev1.NodeStatus, target string, written bool) string {
	if p.r == nil {
		switch st.GetPhase() {
		case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
			return CountProvisioned
		case sluicev1.NodePhase_NODE_PHASE_PROVISIONING:
			return CountInProgress
		case sluicev1.NodePhase_NODE_PHASE_INVALID:
			return CountFailed
		case sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE:
			return CountIncompatible
		}
		return PlaceOutside
	}
	r := p.r
	ours := st.GetRollout() == r.GetId()
	forward := target != "" && st.GetFingerprint() == target || target == "" && st.GetRevision() == r.GetRevision()
	switch {
	case p.revertFailed[node]:
		return CountRevertFailed
	case ours && !forward:
		// A config this rollout wrote that is not its own: the backup, written back.
		switch st.GetPhase() {
		case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
			return CountReverted
		case sluicev1.NodePhase_NODE_PHASE_INVALID:
			return CountRevertFailed
		}
		return CountReverting
	}
	if o := p.outcome[node]; o != nil {
		switch o.GetResult() {
		case sluicev1.NodeResult_NODE_RESULT_TIMED_OUT:
			return CountTimedOut
		case sluicev1.NodeResult_NODE_RESULT_SKIPPED:
			return CountSkipped
		case sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE:
			return CountIncompatible
		}
		return CountFailed // invalid or refused
	}
	if ours && forward {
		switch st.GetPhase() {
		case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
			return CountProvisioned
		case sluicev1.NodePhase_NODE_PHASE_INVALID:
			return CountFailed
		case sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE:
			return CountIncompatible
		}
		if p.running {
			return CountInProgress
		}
		return CountStopped
	}
	if written && p.running {
		return CountInProgress // written, its agent has not acknowledged it yet
	}
	if forward && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		return CountProvisioned // it had the rollout's config already
	}
	if !present {
		return PlaceOutside
	}
	if p.running {
		return CountPending
	}
	return CountNotStarted
}

// Counted is the Nodes key a placed key counts in: timed out in failed,
// incompatible in skipped; others are themselves.
func Counted(key string) string {
	switch key {
	case CountTimedOut:
		return CountFailed
	case CountIncompatible:
		return CountSkipped
	}
	return key
}

// N is how many t counts in the category key: a forward category or one of
// their parts (timed out, incompatible), else a revert one; 0 for a key it
// does not hold. The operations' categories are Op's.
func (t Tally) N(key string) uint32 {
	for _, list := range [][]Category{t.Nodes, t.Revert} {
		for _, c := range list {
			if c.Key == key {
				return c.N
			}
			for _, of := range c.Of {
				if of.Key == key {
					return of.N
				}
			}
		}
	}
	return 0
}

// Op is how many of the operations t counts are in the category key
// (in progress, completed, failed, cancelled, stopped); 0 for another.
func (t Tally) Op(key string) uint32 {
	for _, c := range t.Operations {
		if c.Key == key {
			return c.N
		}
	}
	return 0
}

// Rest is the forward categories of t that count a node and are not among
// shown, in order: what a table with a column for each of shown lists in
// one more (OTHER), so that its row adds up to the total.
func (t Tally) Rest(shown ...string) []Category {
	rest := []Category{}
	for _, c := range t.Nodes {
		if c.N > 0 && !slices.Contains(shown, c.Key) {
			rest = append(rest, c)
		}
	}
	return rest
}

// StageTallyOf lays out the nodes a wave or failure-domain stage of r
// started (Total) in the forward categories: in progress, provisioned,
// failed (timed out of it), skipped and stopped in flight. The stage
// record keeps the nodes it started and the rollout's counts when it
// began; its results are the rollout's counts at its end less those. The
// end of a stage still open is now; a stage ends with none of its nodes in
// flight, or with the rollout, whose counts then are its final ones (so the
// last stage of a stopped rollout has its nodes stopped in flight). Skipped
// is what is left of the nodes started: those that left, or whose agent
// cannot read the config, after it started them (the rollout's skipped
// also counts nodes of later stages that left before they started).
// Pending and not started count nothing: a stage's nodes are those it
// started.
func StageTallyOf(r *sluicev1.Rollout, st *sluicev1.StageResult) Tally {
	c, b := r.GetCounts(), st.GetCountsAtStart()
	diff := func(now, then uint32) uint32 { return sub(now, then) }
	started, prov, failed, timedOut := st.GetNodes(), st.GetProvisioned(), st.GetFailed(), st.GetTimedOut()
	var inProgress, stopped uint32
	stages := r.GetStages()
	last := len(stages) > 0 && stages[len(stages)-1] == st
	switch {
	case b == nil:
		// Recorded without its counts at start: as recorded.
	case st.GetEndedAt() == nil && !Terminal(r.GetPhase()):
		started, prov = diff(c.GetAttempted(), b.GetAttempted()), diff(c.GetProvisioned(), b.GetProvisioned())
		failed, timedOut = diff(c.GetFailed(), b.GetFailed()), diff(c.GetTimedOut(), b.GetTimedOut())
		inProgress, stopped = diff(c.GetInProgress(), b.GetInProgress()), diff(c.GetStopped(), b.GetStopped())
	case last && st.GetEndedAt() != nil && Terminal(r.GetPhase()):
		stopped = diff(c.GetStopped(), b.GetStopped())
	}
	skipped := sub(started, inProgress+prov+failed+stopped)
	t := Tally{Total: started, Nodes: []Category{
		category(CountInProgress, inProgress),
		category(CountProvisioned, prov),
		category(CountFailed, failed, category(CountTimedOut, timedOut)),
		category(CountSkipped, skipped),
		category(CountStopped, stopped),
	}}
	if n := Sum(t.Nodes); n != t.Total {
		t.Off = fmt.Sprintf("the counts add up to %d, not the %d started", n, t.Total)
	}
	return t
}
