package rollout

// Incompatible: a node whose agent cannot read the config the rollout
// wrote it (it needs a newer agent). That says nothing about the config:
// its fingerprint is never recorded invalid for it (invariant I9). The node
// is skipped — listed with the skipped nodes, result INCOMPATIBLE, counted
// in Skipped and Incompatible, never against the failure budget — and it
// keeps the config in force; its agent, once upgraded, reads the desired
// config as written.

import (
	"fmt"

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
