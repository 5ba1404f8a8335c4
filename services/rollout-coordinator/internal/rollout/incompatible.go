package rollout

// Incompatible: a node whose agent cannot read the config the rollout
// would write it (it needs a newer agent). Its presence says which config
// features the agent reads: the coordinator writes no config needing
// another — a rollout that starts with such nodes is refused before it
// touches any (refuseIncompatible) unless its strategy skips them, and a
// node met later is skipped before its write (fill) — and an agent that
// cannot read what it was written anyway reports INCOMPATIBLE
// (incompatibleReported). That says nothing about the config:
// its fingerprint is never recorded invalid for it (invariant I9). The node
// is skipped — listed with the skipped nodes, result INCOMPATIBLE, counted
// in Skipped and Incompatible, never against the failure budget — and it
// keeps the config in force; its agent, once upgraded, reads the desired
// config as written.

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// incompatibleReported takes n's INCOMPATIBLE report on the config in
// flight there (st: its status, phase INCOMPATIBLE, on n's target). A
// revert its agent cannot read is a revert that failed: the node needs an
// operator (or a newer agent).
func (s *State) incompatibleReported(n *node, st *sluicev1.NodeStatus) {
	s.land(n)
	if n.rev == revInFlight {
		s.revertFailed(n, fmt.Sprintf("its agent cannot read backup %s: %s", render.Short(n.target), st.GetMessage()),
			"upgrade its agent, or put a config it reads in force by hand")
		return
	}
	s.skipIncompatible(n, st.GetCheckOutput(), st.GetMessage(), true)
}

// skipIncompatible skips n, whose agent cannot read its target: output is
// what the agent's decoder said, msg the agent's message; announce emits
// NodeIncompatible (not for an outcome an earlier term announced).
func (s *State) skipIncompatible(n *node, output, msg string, announce bool) {
	s.setProg(n, progIncompatible)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, "", output, msg)
	if announce {
		s.emit(s.nodeEvent(n, "NodeIncompatible", msg+"; skipped, not counted as a failure, its fingerprint not recorded invalid: upgrade its agent"))
	}
}

// setAgent takes what n's agent reads and runs from its presence p, and
// reports whether what it reads changed. A heartbeat that changes nothing
// allocates nothing.
func (s *State) setAgent(n *node, p *sluicev1.NodePresence) (readsChanged bool) {
	fs, v := p.GetConfigFeatures(), p.GetAgentVersion()
	runs := ran{fingerprint: p.GetInForceFingerprint(), revision: p.GetInForceRevision(), rollout: p.GetInForceRollout()}
	sameReads := n.version() == v && joinedEqual(n.reads(), fs)
	if sameReads && n.inForce() == runs {
		return false
	}
	a := agentReads{reads: n.reads(), version: v,
		runs: ran{fingerprint: s.intern(runs.fingerprint), revision: s.intern(runs.revision), rollout: s.intern(runs.rollout)}}
	if !sameReads {
		a.reads = strings.Join(fs, ",")
	}
	switch shared, ok := s.agents[a]; {
	case a == (agentReads{}):
		n.agent = nil
	case ok:
		n.agent = shared
	default:
		n.agent = &a
		s.agents[a] = &a
	}
	return !sameReads
}

// agentReads is what an agent reads and runs, as its presence says: its
// config features, comma-joined, its version, and the config in force on
// its node (storeloss.go). Nodes whose agents say the same share one (a
// fleet runs few releases and few configs at once).
type agentReads struct {
	reads, version string
	runs           ran
}

// reads is n's agent's config features, comma-joined ("" when unknown).
func (n *node) reads() string {
	if n.agent == nil {
		return ""
	}
	return n.agent.reads
}

// inForce is what n's agent says it runs (its presence's in_force_*, from
// the last-good on its disk; empty when unknown).
func (n *node) inForce() ran {
	if n.agent == nil {
		return ran{}
	}
	return n.agent.runs
}

// version is n's agent's version ("" when unknown).
func (n *node) version() string {
	if n.agent == nil {
		return ""
	}
	return n.agent.version
}

// joinedEqual reports whether joined is fs joined with commas.
func joinedEqual(joined string, fs []string) bool {
	for i, f := range fs {
		if i > 0 {
			if !strings.HasPrefix(joined, ",") {
				return false
			}
			joined = joined[1:]
		}
		if !strings.HasPrefix(joined, f) {
			return false
		}
		joined = joined[len(f):]
	}
	return joined == ""
}

// cannotRead says why n's agent cannot read a desired config of
// fingerprint fp with config, asking for bake re-runs (bake), as its
// presence says; "" when it can. An agent whose presence states no features is of the baseline
// release (contract.ConfigFeatures).
func (n *node) cannotRead(fp string, bake *sluicev1.BakeChecks, config *sluicev1.NodeConfig) string {
	missing := contract.CannotRead(n.readsList(), &sluicev1.DesiredConfig{BakeChecks: bake, Config: config})
	if missing == nil {
		return ""
	}
	return contract.DescribeCannotRead(n.version(), n.readsList(), missing, render.Short(fp))
}

// readsList is the config features n's agent reads, as its presence said.
func (n *node) readsList() []string {
	if n.reads() == "" {
		return nil
	}
	return strings.Split(n.reads(), ",")
}

// skipUnreadable skips pending node n, whose agent cannot read its target
// (why: cannotRead), without writing it anything.
func (s *State) skipUnreadable(n *node, why string) {
	s.pending.remove(n)
	s.skipIncompatible(n, "", why, true)
}

// refuseIncompatible refuses a rollout that starts with nodes whose agent
// cannot read their target, before any node is touched, naming them
// (unless its strategy skips them: skip_incompatible, or it is refused
// already). The nodes are listed INCOMPATIBLE, the others not started; it
// ends ABORTED.
func (s *State) refuseIncompatible() {
	if s.plan.SkipIncompatible || s.stopReason != "" {
		return
	}
	type refusal struct {
		n   *node
		why string
	}
	var refused []refusal
	for _, n := range s.pending.sorted() { // in start order
		if why := n.cannotRead(n.target, s.bakeSpec, n.config); why != "" {
			refused = append(refused, refusal{n, why})
		}
	}
	if len(refused) == 0 {
		return
	}
	names := make([]string, 0, min(len(refused), 5))
	for i, r := range refused {
		s.pending.remove(r.n)
		s.setProg(r.n, progIncompatible)
		s.recordOutcome(r.n, sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, "", "", r.why)
		if i < 5 {
			names = append(names, r.n.name+" ("+r.n.versionOrUnknown()+")")
		}
	}
	more := ""
	if len(refused) > len(names) {
		more = fmt.Sprintf(" and %d more", len(refused)-len(names))
	}
	s.dropPending()
	s.stopReason = fmt.Sprintf("refused before touching any node: %d node(s) have an agent that cannot read their config: %s%s; first: %s; "+
		"upgrade their agents, or apply with --skip-incompatible to skip them", len(refused), strings.Join(names, ", "), more, refused[0].why)
	// Nodes in flight from before a restart are left to finish; maybeFinish ends it.
}

func (n *node) versionOrUnknown() string {
	if n.version() == "" {
		return "agent version unknown"
	}
	return "agent " + n.version()
}
