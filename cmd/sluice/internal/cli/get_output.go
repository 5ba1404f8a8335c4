package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// named is a listing whose items have names: `get KIND NAME` picks items by
// them and `-o name` prints them, as kind/name (kubectl's form).
type named interface {
	listing
	// names are the items' kind/name, in the listing's order.
	names() []string
	// pick is the listing of the items whose index keep accepts.
	pick(keep func(i int) bool) listing
}

// wide is a listing with more columns for -o wide: full ids, and what the
// table leaves out.
type wide interface {
	wideTable(now time.Time) [][]string
}

// matchesName reports whether arg names the item kindName (kind/name): its
// name, kind/name, or for ids (revisions, fingerprints) a prefix of at
// least 6 characters.
func matchesName(kindName, arg string, prefixOK bool) bool {
	arg = strings.ToLower(arg)
	kindName = strings.ToLower(kindName)
	_, name, _ := strings.Cut(kindName, "/")
	if arg == kindName || arg == name {
		return true
	}
	return prefixOK && len(arg) >= 6 && strings.HasPrefix(name, arg)
}

// pickNamed keeps the items of l named by args; missing lists the args
// that name none.
func pickNamed(l named, args []string, prefixOK bool) (picked listing, missing []string) {
	names := l.names()
	found := make([]bool, len(args))
	picked = l.pick(func(i int) bool {
		keep := false
		for j, arg := range args {
			if matchesName(names[i], arg, prefixOK) {
				keep, found[j] = true, true
			}
		}
		return keep
	})
	for j, arg := range args {
		if !found[j] {
			missing = append(missing, arg)
		}
	}
	return picked, missing
}

// pickBy keeps the items of s whose index keep accepts.
func pickBy[T any](s []T, keep func(i int) bool) []T {
	out := make([]T, 0, len(s))
	for i, v := range s {
		if keep(i) {
			out = append(out, v)
		}
	}
	return out
}

// deleting reports whether any intent of l is marked for deletion.
func (l intentList) deleting() bool {
	return slices.ContainsFunc(l, func(si *sluicev1.StoredIntent) bool { return si.GetMarkedForDeletion() })
}

func (l intentList) names() []string {
	out := make([]string, len(l))
	for i, si := range l {
		out[i] = strings.ToLower(intent.Kind(si.GetIntent())) + "/" + si.GetIntent().GetName()
	}
	return out
}

func (l intentList) pick(keep func(int) bool) listing { return intentList(pickBy(l, keep)) }

func (l revisionList) names() []string {
	out := make([]string, len(l.items))
	for i, r := range l.items {
		out[i] = "revision/" + r.GetId()
	}
	return out
}

func (l revisionList) pick(keep func(int) bool) listing {
	return revisionList{items: pickBy(l.items, keep), head: l.head, sources: l.sources}
}

func (l revisionList) wideTable(now time.Time) [][]string {
	rows := [][]string{{"ID", "INTENTS", "CREATED", "HEAD", "SOURCE"}}
	for i, row := range l.table(now)[1:] {
		rows = append(rows, append([]string{l.items[i].GetId()}, row[1:]...))
	}
	return rows
}

func (l nodeList) names() []string {
	out := make([]string, len(l))
	for i, n := range l {
		out[i] = "node/" + n.Name
	}
	return out
}

func (l nodeList) pick(keep func(int) bool) listing { return nodeList(pickBy(l, keep)) }

func (l nodeList) wideTable(now time.Time) [][]string {
	rows := [][]string{{"NODE", "PRESENT", "LABELS", "PHASE", "FINGERPRINT", "REVISION", "ROLLOUT", "OPERATION", "AGENT", "HEARTBEAT", "MESSAGE", "LAST-UPDATE"}}
	for i, row := range l.table(now)[1:] {
		n := l[i]
		rows = append(rows, []string{
			row[0], row[1], row[2], row[3], orNone(n.Status.GetFingerprint()), orNone(n.Revision()),
			orNone(n.Status.GetRollout()), orNone(n.Status.GetOperation()), orNone(n.Presence.GetAgentVersion()),
			age(now, n.Presence.GetHeartbeatAt()), oneLine(n.Status.GetMessage(), 120), row[7],
		})
	}
	return rows
}

func (l rolloutList) names() []string {
	out := make([]string, len(l.items))
	for i, r := range l.items {
		out[i] = "rollout/" + r.GetId()
	}
	return out
}

func (l rolloutList) pick(keep func(int) bool) listing {
	return rolloutList{items: pickBy(l.items, keep), active: l.active}
}

func (l rolloutList) wideTable(now time.Time) [][]string {
	// Every forward category a column, in contract.TallyOf's order (a row
	// adds up to its total), then the revert's.
	counts := []string{contract.CountPending, contract.CountInProgress, contract.CountFailed, contract.CountTimedOut, contract.CountSkipped,
		contract.CountStopped, contract.CountNotStarted, contract.CountReverting, contract.CountReverted, contract.CountRevertFailed}
	header := []string{"ID", "REVISION", "PHASE", "PROVISIONED/TOTAL"}
	for _, key := range counts {
		header = append(header, countColumn(key))
	}
	rows := [][]string{append(header, "WAVE", "LEADER-EPOCH", "STARTED", "DURATION", "REASON")}
	for i, row := range l.table(now)[1:] {
		r := l.items[i]
		t := contract.TallyOf(r)
		wave := none
		if r.GetWave() > 0 {
			wave = fmt.Sprint(r.GetWave())
		}
		cells := []string{row[0], orNone(r.GetRevision()), row[2], row[3]}
		for _, key := range counts {
			cells = append(cells, countCell(t, key))
		}
		rows = append(rows, append(cells, wave, fmt.Sprint(r.GetLeaderEpoch()), row[8], row[9], oneLine(r.GetReason(), 120)))
	}
	return rows
}

func (l fingerprintList) names() []string {
	out := make([]string, len(l))
	for i, f := range l {
		out[i] = "fingerprint/" + f.GetFingerprint()
	}
	return out
}

func (l fingerprintList) pick(keep func(int) bool) listing { return fingerprintList(pickBy(l, keep)) }

func (l fingerprintList) wideTable(now time.Time) [][]string {
	rows := [][]string{{"FINGERPRINT", "REVISION", "ROLLOUT", "NODE", "CAUSE", "CHECK", "TIME", "FORGIVEN", "OUTPUT"}}
	for i, row := range l.table(now)[1:] {
		f := l[i]
		row[0], row[1], row[8] = f.GetFingerprint(), orNone(f.GetRevision()), oneLine(f.GetOutput(), 120)
		rows = append(rows, row)
	}
	return rows
}

func (l pauseList) names() []string {
	out := make([]string, len(l.insts))
	for i, in := range l.insts {
		out[i] = "instance/" + in.GetComponent() + "." + in.GetInstance()
	}
	return out
}

func (l pauseList) pick(keep func(int) bool) listing {
	return pauseList{req: l.req, insts: pickBy(l.insts, keep)}
}

func (l registryList) names() []string {
	out := make([]string, len(l.rows))
	for i, r := range l.rows {
		out[i] = "registry/" + r.name
	}
	return out
}

func (l registryList) pick(keep func(int) bool) listing {
	return registryList{rows: pickBy(l.rows, keep)}
}

func (l freezeList) names() []string {
	out := make([]string, len(l))
	for i, f := range l {
		out[i] = "freeze/" + f.GetId()
	}
	return out
}

func (l freezeList) pick(keep func(int) bool) listing { return freezeList(pickBy(l, keep)) }
