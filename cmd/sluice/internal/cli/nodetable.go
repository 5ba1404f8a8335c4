package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// maxNodeRows bounds the nodes listed; the rest are counted.
const maxNodeRows = 10

// Widths the node table cuts its cells to on a terminal. Output that is
// not a terminal (a pipe, a file, a CI log) gets the whole text
// (cellWidths{}): the decisive part of a failure is often last.
const (
	outputWidth  = 60
	messageWidth = 140
)

// cellWidths is how long a node table's cells may be: 0 is no limit.
type cellWidths struct{ output, message int }

// terminalWidths are the cuts for a terminal.
var terminalWidths = cellWidths{output: outputWidth, message: messageWidth}

// widthsFor is the cuts for output on a terminal (tty) or not.
func widthsFor(tty bool) cellWidths {
	if tty {
		return terminalWidths
	}
	return cellWidths{}
}

// liveNode is a node whose desired config belongs to the rollout shown, as
// the nodeconfigs and status buckets hold it now; status is nil when the
// node's agent has written none.
type liveNode struct {
	desired *sluicev1.DesiredConfig
	status  *sluicev1.NodeStatus
	// unreadable, if set, says that its desired config or its status does
	// not decode ("<unreadable: …>"); desired then names only the node if
	// it is the desired config.
	unreadable string
}

// nodeLines is a table of the nodes that did not simply succeed: the
// record's failures (invalid, timed out, refused, a failed revert), then the
// nodes that left, then the live nodes still on their way (or reverted),
// sorted by name. A live node the record already lists adds its revert to
// that row instead. The failing check's output follows the message, cut short.
func nodeLines(r *sluicev1.Rollout, live []liveNode, now time.Time) []string {
	return nodeTable(r, live, now, terminalWidths)
}

// nodeTable is nodeLines with its cells cut to w.
func nodeTable(r *sluicev1.Rollout, live []liveNode, now time.Time, w cellWidths) []string {
	type row struct{ node, result, check, msg, output string }
	var rows []row
	listed := map[string]int{} // node → its row
	for i, o := range append(slices.Clip(r.GetFailures()), r.GetSkipped()...) {
		res := o.GetResult()
		if i >= len(r.GetFailures()) && res == sluicev1.NodeResult_NODE_RESULT_UNSPECIFIED {
			res = sluicev1.NodeResult_NODE_RESULT_SKIPPED
		}
		msg := o.GetMessage()
		if res == sluicev1.NodeResult_NODE_RESULT_SKIPPED && msg == "" {
			msg = "left during the rollout (not a failure)"
		}
		if _, ok := listed[o.GetNode()]; !ok {
			listed[o.GetNode()] = len(rows)
		}
		rows = append(rows, row{o.GetNode(), nodeResult(res), o.GetFailedCheck(), msg, o.GetOutput()})
	}
	// The nodes the record names stopped in flight (contract.TallyOf):
	// once reverted, their status no longer says they were.
	stoppedWords := contract.Words(contract.CountStopped)
	var named, unnamed uint32
	for _, c := range contract.TallyOf(r).Nodes {
		if c.Key != contract.CountStopped {
			continue
		}
		for _, name := range c.Names {
			if _, ok := listed[name]; !ok {
				listed[name] = len(rows)
				rows = append(rows, row{name, stoppedWords, "", "no outcome of its own", ""})
			}
		}
		if named = uint32(len(c.Names)); named > 0 {
			unnamed = c.N - min(c.N, named)
		}
	}
	live = slices.SortedFunc(slices.Values(live), func(a, b liveNode) int { return strings.Compare(a.desired.GetNode(), b.desired.GetNode()) })
	for _, l := range live {
		res, check, msg, output, show := liveState(l, now)
		if res == "in progress" && r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
			// Its config was written when the rollout stopped: counted
			// stopped in flight, and named here.
			res, msg = contract.Words(contract.CountStopped), "no outcome of its own: "+msg
		}
		if !show {
			continue
		}
		if i, ok := listed[l.desired.GetNode()]; ok {
			switch {
			case res == stoppedWords && rows[i].result == stoppedWords:
				rows[i].msg = msg // still in flight: how long it has applied
			case l.desired.GetRevert() && (res == "reverting" || res == "reverted") || res == "unreadable":
				rows[i].result += ", " + res
			}
			continue
		}
		rows = append(rows, row{l.desired.GetNode(), res, check, msg, output})
	}
	if len(rows) == 0 {
		return nil
	}
	table := [][]string{{"NODE", "RESULT", "CHECK", "MESSAGE"}}
	for i, rw := range rows {
		if i == maxNodeRows {
			break
		}
		msg := strings.Join(strings.Fields(rw.msg), " ")
		if strings.TrimSpace(rw.output) != "" {
			msg = strings.TrimPrefix(msg+" | output: "+oneLine(rw.output, w.output), " ")
		}
		table = append(table, []string{rw.node, rw.result, orNone(rw.check), oneLine(msg, w.message)})
	}
	var b strings.Builder
	_ = writeTable(&b, table) // a strings.Builder does not fail
	lines := []string{"nodes that did not simply succeed:"}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		lines = append(lines, "  "+strings.TrimRight(l, " "))
	}
	if n := len(rows) - maxNodeRows; n > 0 {
		lines = append(lines, fmt.Sprintf("  … and %d more (sluice get nodes; sluice events --kind node)", n))
	}
	if unnamed > 0 {
		lines = append(lines, fmt.Sprintf("  … and %d more %s, not named (the record names the first %d by name)", unnamed, stoppedWords, named))
	}
	return lines
}

// liveState says where a live node is with its desired config: its result,
// the failed check, a message and the check's output; show is false for a
// node that simply succeeded.
func liveState(l liveNode, now time.Time) (result, check, msg, output string, show bool) {
	if l.unreadable != "" {
		return "unreadable", "", l.unreadable, "", true
	}
	d, st := l.desired, l.status
	reported := st != nil && st.GetFingerprint() == d.GetFingerprint()
	since := st.GetApplyStartedAt()
	if since == nil {
		since = st.GetLastUpdate()
	}
	if !reported {
		// An agent acknowledges an operation once it has run a second
		// (docs/agent.md): until then it may be applying it.
		msg = "the agent has not acknowledged it"
		if w := d.GetWrittenAt(); w != nil {
			msg = "written " + age(now, w) + " ago; " + msg
		}
		if d.GetRevert() {
			return "reverting", "", "backup " + shortN(d.GetFingerprint(), 12) + " " + msg, "", true
		}
		return "in progress", "", msg, "", true
	}
	switch st.GetPhase() {
	case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
		if d.GetRevert() {
			return "reverted", "", "backup " + shortN(d.GetFingerprint(), 12) + " is in force again", "", true
		}
		return "", "", "", "", false
	case sluicev1.NodePhase_NODE_PHASE_INVALID:
		res := "invalid"
		if d.GetRevert() {
			res = "revert failed"
		}
		return res, st.GetFailedCheck(), st.GetMessage(), st.GetCheckOutput(), true
	case sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE:
		return "incompatible", "", st.GetMessage(), st.GetCheckOutput(), true
	}
	msg = "applying for " + age(now, since)
	if d.GetRevert() {
		msg = "applying its backup for " + age(now, since)
	}
	if p := st.GetProgress(); p != "" {
		msg = p + "; " + msg
	}
	msg += deadlineNote(d)
	if d.GetRevert() {
		return "reverting", "", msg, "", true
	}
	return "in progress", "", msg, "", true
}

// deadlineNote names the deadline of d's operation, if it has one.
func deadlineNote(d *sluicev1.DesiredConfig) string {
	if dl := d.GetDeadline().AsDuration(); dl > 0 {
		return fmt.Sprintf(" (deadline %s)", dl)
	}
	return ""
}

func nodeResult(r sluicev1.NodeResult) string {
	if r == sluicev1.NodeResult_NODE_RESULT_UNSPECIFIED {
		return "failed"
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(r.String(), "NODE_RESULT_")), "_", " ")
}
