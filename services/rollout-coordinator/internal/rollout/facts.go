package rollout

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// What the state keeps of each node's stored values. The state holds every
// node's presence, status, desired config and backup for as long as the
// term lasts; kept as decoded messages they cost 3.9 KB per node, most of
// it two whole rendered configs per node, where a fleet runs a handful of
// distinct ones (issue 20: the coordinator must fit 100,000 nodes in
// 2.5 KB each, everything included). So per node the state keeps only the
// fields its decisions read, in the small structs below, and shares what
// nodes have in common:
//
//   - configs, by fingerprint: a fingerprint is the sha256 of its config,
//     checked at intake (wellformed.DesiredConfig), so every node with one
//     fingerprint points at one NodeConfig, which nothing changes (every
//     action carries a clone);
//   - label sets: nodes of one zone and rack have equal labels, and a
//     shared set remembers what it rendered to, so a rollout renders each
//     distinct label set once rather than every node;
//   - the strings every node repeats (fingerprints, revision and rollout
//     ids) are interned, and a desired config's operation id is kept only
//     when it is not the one the coordinator derives from rollout and node.
//
// Nothing is re-read from the buckets for it: every decision is made from
// the same facts as before, and every write carries the same value.

// Intake takes in what a term reads of the nodes, value by value as the
// loop reads them, keeping only what the state keeps of each: a term then
// never holds every decoded value of the fleet at once, which is what the
// load costs at its peak (3.4 KB per node). It is handed to one Loaded
// event (Loaded.Intake), whose Decide takes its nodes over; it is not used
// after. It does no I/O: it is the same taking-in as of Loaded's lists.
type Intake struct{ s *State }

// NewIntake returns an empty intake.
func NewIntake() *Intake { return &Intake{s: NewState()} }

// Presence takes in a node's presence (its Node set from its key).
func (in *Intake) Presence(p *sluicev1.NodePresence) { in.s.takePresence(p) }

// Status takes in a node's status (its Node set from its key).
func (in *Intake) Status(st *sluicev1.NodeStatus) { in.s.takeStatus(st) }

// Desired takes in a node's desired config (its Node set from its key).
func (in *Intake) Desired(d *sluicev1.DesiredConfig) { in.s.takeDesired(d) }

// Backup takes in a node's backup (its Node set from its key).
func (in *Intake) Backup(b *sluicev1.DesiredConfig) { in.s.takeBackup(b) }

func (s *State) takePresence(p *sluicev1.NodePresence) {
	n := s.nodeOf(p.GetNode())
	s.setLabels(n, p.GetLabels())
	n.present, n.pauseAck, n.startedAt = true, agentPauseOf(p.GetPause()), stampOf(p.GetStartedAt())
	s.setAgent(n, p)
}

func (s *State) takeStatus(st *sluicev1.NodeStatus) { s.nodeOf(st.GetNode()).status = s.keepReport(st) }
func (s *State) takeDesired(d *sluicev1.DesiredConfig) {
	s.nodeOf(d.GetNode()).desired = s.keepDesired(d)
}
func (s *State) takeBackup(b *sluicev1.DesiredConfig) {
	s.nodeOf(b.GetNode()).backup = s.keepDesired(b)
}

// desired is what the state keeps of a DesiredConfig: a node's desired
// config or its backup. It is never changed once made — a change makes a
// new one —, so nodes and revert targets share them freely. Its getters
// are nil-safe like the message's.
type desired struct {
	revision, rollout, fingerprint string
	config                         *sluicev1.NodeConfig // shared: never changed
	operation                      string               // only when op is opOther
	writtenAt, deadline            stamp
	epoch                          uint64
	op                             opKind
	revert, proven, cancel         bool
	bake                           *sluicev1.BakeChecks // shared by the rollout's writes: never changed
}

// opKind says which operation id a desired config carries: the ones the
// coordinator writes are derived from its rollout, node and fingerprint.
type opKind uint8

const (
	opNone      opKind = iota // no operation id
	opApply                   // contract.OperationID(rollout, node, OpApply)
	opRevert                  // contract.OperationID(rollout, node, OpRevert)
	opConfigure               // contract.ConfigureOperationID(fingerprint)
	opOther                   // any other: kept in operation
)

func (d *desired) GetFingerprint() string {
	if d == nil {
		return ""
	}
	return d.fingerprint
}

func (d *desired) GetRevision() string {
	if d == nil {
		return ""
	}
	return d.revision
}

func (d *desired) GetRollout() string {
	if d == nil {
		return ""
	}
	return d.rollout
}

func (d *desired) GetConfig() *sluicev1.NodeConfig {
	if d == nil {
		return nil
	}
	return d.config
}

func (d *desired) GetRevert() bool { return d != nil && d.revert }
func (d *desired) GetCancel() bool { return d != nil && d.cancel }
func (d *desired) GetProven() bool { return d != nil && d.proven }

// operationOf is d's operation id, d being node's desired config or backup.
func (d *desired) operationOf(node string) string {
	switch d.GetOp() {
	case opApply:
		return contract.OperationID(d.rollout, node, contract.OpApply)
	case opRevert:
		return contract.OperationID(d.rollout, node, contract.OpRevert)
	case opConfigure:
		return contract.ConfigureOperationID(d.fingerprint)
	case opOther:
		return d.operation
	}
	return ""
}

func (d *desired) GetOp() opKind {
	if d == nil {
		return opNone
	}
	return d.op
}

// message is d as the value of node's key: a copy, its config cloned.
func (d *desired) message(node string) *sluicev1.DesiredConfig {
	if d == nil {
		return nil
	}
	m := &sluicev1.DesiredConfig{Node: node, Revision: d.revision, Rollout: d.rollout, Fingerprint: d.fingerprint,
		WrittenAt: d.writtenAt.timestamp(), LeaderEpoch: d.epoch, Revert: d.revert, Proven: d.proven,
		Operation: d.operationOf(node), Deadline: d.deadline.duration(), Cancel: d.cancel}
	if d.bake != nil {
		m.BakeChecks = proto.Clone(d.bake).(*sluicev1.BakeChecks)
	}
	if d.config != nil {
		m.Config = proto.Clone(d.config).(*sluicev1.NodeConfig)
	}
	m.Features = contract.FeaturesOf(m)
	return m
}

// shareDesired returns d as the state keeps it. A desired config this term
// made (its write time unset: the loop stamps the message it writes, not
// d) is the same for every node of one label set in one rollout, so such
// values are shared (State.desireds); one read from a key, stamped, is
// kept on its own.
func (s *State) shareDesired(d desired) *desired {
	if d.writtenAt.set {
		return &d
	}
	if k := s.desireds[d]; k != nil {
		return k
	}
	k := &d
	s.desireds[d] = k
	return k
}

// keepDesired is what the state keeps of m, read from node's key.
func (s *State) keepDesired(m *sluicev1.DesiredConfig) *desired {
	if m == nil {
		return nil
	}
	node := m.GetNode()
	d := &desired{revision: s.intern(m.GetRevision()), rollout: s.intern(m.GetRollout()), fingerprint: s.intern(m.GetFingerprint()),
		config: s.shareConfig(m.GetFingerprint(), m.GetConfig()), writtenAt: stampOf(m.GetWrittenAt()),
		deadline: stampOfDuration(m.GetDeadline()), epoch: m.GetLeaderEpoch(), revert: m.GetRevert(), proven: m.GetProven(), cancel: m.GetCancel(),
		bake: m.GetBakeChecks()}
	// Read once per term: comparing with the derived ids may build them.
	switch op := m.GetOperation(); op {
	case "":
	case contract.OperationID(d.rollout, node, contract.OpApply):
		d.op = opApply
	case contract.OperationID(d.rollout, node, contract.OpRevert):
		d.op = opRevert
	case contract.ConfigureOperationID(d.fingerprint):
		d.op = opConfigure
	default:
		d.op, d.operation = opOther, op
	}
	return d
}

// report is what the state keeps of a node's status: what it reports on,
// and why it failed only when it did (an Invalid report's check, output and
// message are all that is read of them).
type report struct {
	phase                          sluicev1.NodePhase
	fingerprint, rollout, revision string
	failed                         *failedReport           // Invalid or Incompatible only: what the agent said
	lastInvalid                    *sluicev1.InvalidReport // as the status carried it
}

func (r *report) GetPhase() sluicev1.NodePhase {
	if r == nil {
		return sluicev1.NodePhase_NODE_PHASE_UNSPECIFIED
	}
	return r.phase
}

func (r *report) GetFingerprint() string {
	if r == nil {
		return ""
	}
	return r.fingerprint
}

func (r *report) GetRollout() string {
	if r == nil {
		return ""
	}
	return r.rollout
}

func (r *report) GetRevision() string {
	if r == nil {
		return ""
	}
	return r.revision
}

func (r *report) GetFailedCheck() string {
	if r == nil || r.failed == nil {
		return ""
	}
	return r.failed.check
}

func (r *report) GetCheckOutput() string {
	if r == nil || r.failed == nil {
		return ""
	}
	return r.failed.output
}

func (r *report) GetMessage() string {
	if r == nil || r.failed == nil {
		return ""
	}
	return r.failed.message
}

func (r *report) GetNodeFault() string {
	if r == nil || r.failed == nil {
		return ""
	}
	return r.failed.nodeFault
}

func (r *report) GetLastInvalid() *sluicev1.InvalidReport {
	if r == nil {
		return nil
	}
	return r.lastInvalid
}

// keepReport is what the state keeps of st. A report that carries no
// failure is the same for every node on one fingerprint of one rollout, so
// such reports are shared (State.reports), as the strings in them are: a
// report is never changed once made.
func (s *State) keepReport(st *sluicev1.NodeStatus) *report {
	r := report{phase: st.GetPhase(), fingerprint: s.intern(st.GetFingerprint()), rollout: s.intern(st.GetRollout()),
		revision: s.intern(st.GetRevision()), lastInvalid: st.GetLastInvalid()}
	if r.phase == sluicev1.NodePhase_NODE_PHASE_INVALID || r.phase == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE {
		r.failed = &failedReport{check: st.GetFailedCheck(), output: st.GetCheckOutput(), message: st.GetMessage(), nodeFault: st.GetNodeFault()}
	}
	if r.failed != nil || r.lastInvalid != nil {
		return &r
	}
	if k := s.reports[r]; k != nil {
		return k
	}
	k := &r
	s.reports[r] = k
	return k
}

// agentPause is the control-plane pause a node's agent reached, as its
// presence says (sluicev1.PauseAck: only these two fields are read).
type agentPause struct {
	generation uint64
	paused     bool
}

func agentPauseOf(a *sluicev1.PauseAck) agentPause {
	return agentPause{generation: a.GetGeneration(), paused: a.GetPaused()}
}

// reached reports whether the agent reached generation gen.
func (a agentPause) reached(gen uint64) bool {
	return contract.PauseReached(&sluicev1.PauseAck{Generation: a.generation}, gen)
}

// stamp is a Timestamp's or Duration's seconds and nanos, as stored (set:
// the field was there): the message costs a pointer and 48 bytes.
type stamp struct {
	sec  int64
	nsec int32
	set  bool
}

func stampOf(t *timestamppb.Timestamp) stamp {
	if t == nil {
		return stamp{}
	}
	return stamp{sec: t.GetSeconds(), nsec: t.GetNanos(), set: true}
}

// sameInstant reports whether t says the same seconds and nanoseconds as
// the timestamp ts (nil being the zero instant, as AsTime has it).
func (t stamp) sameInstant(ts *timestamppb.Timestamp) bool {
	return t.sec == ts.GetSeconds() && t.nsec == ts.GetNanos()
}

func stampOfDuration(d *durationpb.Duration) stamp {
	if d == nil {
		return stamp{}
	}
	return stamp{sec: d.GetSeconds(), nsec: d.GetNanos(), set: true}
}

func (t stamp) timestamp() *timestamppb.Timestamp {
	if !t.set {
		return nil
	}
	return &timestamppb.Timestamp{Seconds: t.sec, Nanos: t.nsec}
}

func (t stamp) duration() *durationpb.Duration {
	if !t.set {
		return nil
	}
	return &durationpb.Duration{Seconds: t.sec, Nanos: t.nsec}
}

// labelSet is one set of node labels, shared by every node that has it.
// Its map is never changed.
type labelSet struct {
	m    map[string]string
	key  string // its key in State.labelSets
	refs int    // nodes holding it; at 0 it leaves the table
	// What it rendered to last, newest first: a rollout's revision and the
	// last applied one are the two a term renders most.
	renders [2]rendering
	// Its failure-domain sort key under the strategy's label domainLabel.
	domainLabel, domain string
}

// rendering is a revision's config for a label set, and its fingerprint.
type rendering struct {
	rev *sluicev1.Revision
	fp  string
	cfg *sluicev1.NodeConfig
}

// labelKey is the canonical form of a label map: its pairs sorted by key,
// each string prefixed with its length, so that no two maps share one.
func labelKey(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		for _, x := range [2]string{k, m[k]} {
			b.WriteString(strconv.Itoa(len(x)))
			b.WriteByte(':')
			b.WriteString(x)
		}
	}
	return b.String()
}

// setLabels gives n the label set equal to m, shared with every other
// node that has it. Unchanged labels (every heartbeat) cost a comparison.
func (s *State) setLabels(n *node, m map[string]string) {
	if n.labels != nil && maps.Equal(n.labels.m, m) {
		return
	}
	if old := n.labels; old != nil {
		if old.refs--; old.refs == 0 {
			delete(s.labelSets, old.key)
		}
	}
	key := labelKey(m)
	ls := s.labelSets[key]
	if ls == nil {
		ls = &labelSet{m: m, key: key}
		s.labelSets[key] = ls
	}
	ls.refs++
	n.labels = ls
}

// labelMap is n's label map (nil when none is known).
func (n *node) labelMap() map[string]string {
	if n.labels == nil {
		return nil
	}
	return n.labels.m
}

// renderFor is what rev renders to for n's labels: its fingerprint and
// config, shared with every node of the same labels or config.
func (s *State) renderFor(rev *sluicev1.Revision, n *node) (string, *sluicev1.NodeConfig) {
	ls := n.labels
	if ls == nil {
		ls = &s.noLabels
	}
	for _, r := range ls.renders {
		if r.rev == rev && r.rev != nil {
			return r.fp, r.cfg
		}
	}
	cfg := render.NodeConfig(rev, ls.m)
	fp := s.intern(render.Fingerprint(cfg))
	cfg = s.shareConfig(fp, cfg)
	ls.renders[1], ls.renders[0] = ls.renders[0], rendering{rev: rev, fp: fp, cfg: cfg}
	return fp, cfg
}

// domainOf is n's failure-domain sort key under label key.
func (s *State) domainOf(key string, n *node) string {
	ls := n.labels
	if ls == nil {
		ls = &s.noLabels
	}
	if ls.domainLabel != key || ls.domain == "" {
		ls.domainLabel, ls.domain = key, s.intern(contract.DomainSortKey(key, ls.m))
	}
	return ls.domain
}

// shareConfig returns the config shared by every value with fingerprint
// fp, cfg itself the first time. It is shared only when equal to the one
// kept: the loop checked every fingerprint it read against its config
// (wellformed.DesiredConfig), a test's value may not match, and a node's
// config must be its own either way. The comparison is paid when a value
// is read or rendered — once per node and term, or once per label set and
// revision —, never per event.
func (s *State) shareConfig(fp string, cfg *sluicev1.NodeConfig) *sluicev1.NodeConfig {
	if cfg == nil || fp == "" {
		return cfg
	}
	kept := s.configs[fp]
	switch {
	case kept == nil:
		s.configs[fp] = cfg
		return cfg
	case kept == cfg || proto.Equal(kept, cfg):
		return kept
	}
	return cfg
}

// intern returns the copy of x the state keeps, so that a fingerprint or an
// id that every node repeats is stored once.
func (s *State) intern(x string) string {
	if x == "" {
		return ""
	}
	if k, ok := s.strs[x]; ok {
		return k
	}
	s.strs[x] = x
	return x
}

// forgetShared empties the tables of configs, strings, reports and desired
// configs (at the end of a
// rollout): what nodes still hold stays shared, and what none holds any
// more can go. Label sets leave their table as their last node does.
func (s *State) forgetShared() {
	clear(s.configs)
	clear(s.strs)
	clear(s.agents)
	clear(s.reports)
	clear(s.desireds)
}
