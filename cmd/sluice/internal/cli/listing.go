package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// listing is what `sluice get` read for one kind, printable as a table or
// as a list of objects.
type listing interface {
	// table writes the rows (header first) as tab-separated cells.
	table(now time.Time) [][]string
	// objects returns each item as one JSON object.
	objects() ([]json.RawMessage, error)
}

// footed is a listing with lines to print below its table, after a blank line.
type footed interface {
	footer(now time.Time) []string
}

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

var formats = []string{formatTable, formatJSON, formatYAML}

// More formats of `sluice get`: wide (more columns, full ids) and name
// (kind/name per line), as kubectl's.
const (
	formatWide = "wide"
	formatName = "name"
)

var getFormats = []string{formatTable, formatWide, formatName, formatJSON, formatYAML}

// requested is a listing whose JSON carries a request beside its items.
type requested interface {
	request() (json.RawMessage, error)
}

// printListing writes l, then the values that did not decode, in format to w.
func printListing(w io.Writer, l listing, unreadable []unreadableKey, format string, now time.Time) error {
	switch format {
	case formatName:
		n, ok := l.(named)
		if !ok {
			return fmt.Errorf("-o name: this listing has no names")
		}
		for _, name := range n.names() {
			if _, err := fmt.Fprintln(w, name); err != nil {
				return err
			}
		}
		return nil
	case formatTable, formatWide:
		rows := l.table(now)
		if wl, ok := l.(wide); ok && format == formatWide {
			rows = wl.wideTable(now)
		}
		for _, u := range unreadable {
			rows = append(rows, []string{u.Key, u.Cell()})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
		if f, ok := l.(footed); ok {
			if lines := f.footer(now); len(lines) > 0 {
				_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(lines, "\n"))
				return err
			}
		}
		return nil
	case formatJSON, formatYAML:
		objs, err := l.objects()
		if err != nil {
			return err
		}
		o := view.NewList(objs, unreadable)
		if r, ok := l.(requested); ok {
			if o.Request, err = r.request(); err != nil {
				return err
			}
		}
		return writeStructured(w, o, format)
	}
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(formats, ", "))
}

// writeStructured writes v as indented JSON or as YAML (format).
func writeStructured(w io.Writer, v any, format string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	if format == formatYAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
	} else {
		b = append(b, '\n')
	}
	_, err = w.Write(b)
	return err
}

// writeTable aligns rows into columns separated by three spaces.
func writeTable(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, r := range rows {
		if _, err := fmt.Fprintln(tw, strings.Join(r, "\t")); err != nil {
			return err
		}
	}
	return tw.Flush()
}

func protoObjects[T proto.Message](items []T) ([]json.RawMessage, error) {
	return view.ProtoObjects(items)
}

// intentList is the intents bucket, in key order.
type intentList []*sluicev1.StoredIntent

func (l intentList) table(now time.Time) [][]string {
	rows := [][]string{{"KIND", "NAME", "STATUS", "SOURCE", "UPDATED"}}
	for _, si := range l {
		status := "active"
		if si.GetMarkedForDeletion() {
			status = "deleting"
		}
		rows = append(rows, []string{
			orNone(intent.Kind(si.GetIntent())), si.GetIntent().GetName(), status,
			intentSource(si), age(now, si.GetUpdatedAt()),
		})
	}
	return rows
}

// intentSource is the registry an intent came from, with the place in it
// (Redis key, file) when known: "gitops:tenant-a.yaml".
func intentSource(si *sluicev1.StoredIntent) string {
	if o := si.GetOrigin(); o != "" {
		return orNone(si.GetSource()) + ":" + o
	}
	return orNone(si.GetSource())
}

func (l intentList) objects() ([]json.RawMessage, error) { return protoObjects(l) }

// revisionList is the revisions bucket, newest first, with the head and
// where each revision came from (revisionSources).
type revisionList struct {
	items   []*sluicev1.Revision
	head    *sluicev1.Head // nil when nothing was applied yet
	sources map[string]*sluicev1.Source
}

func (l revisionList) table(now time.Time) [][]string {
	rows := [][]string{{"ID", "INTENTS", "CREATED", "HEAD", "SOURCE"}}
	for _, r := range l.items {
		head := ""
		if l.head != nil && l.head.GetRevision() == r.GetId() {
			head = fmt.Sprintf("* (generation %d)", l.head.GetGeneration())
		}
		rows = append(rows, []string{short(r.GetId()), fmt.Sprint(len(r.GetIntents())), age(now, r.GetCreatedAt()), head,
			orNone(contract.SourceLine(l.sources[r.GetId()]))})
	}
	return rows
}

// revisionSources is, by revision, the source of the head move that
// introduced it: that of the oldest rollout record of it still kept (the
// lowest generation), else the head's when the head names it. A revision
// is content, not a change: the same content brought again later keeps
// the source it was first rolled out from. A revision brought by the API,
// or whose head moved on before its rollout started and whose records are
// gone, has none.
func revisionSources(rollouts []*sluicev1.Rollout, head *sluicev1.Head) map[string]*sluicev1.Source {
	out := map[string]*sluicev1.Source{}
	gen := map[string]uint64{}
	for _, r := range rollouts {
		if g, ok := gen[r.GetRevision()]; ok && g <= r.GetGeneration() {
			continue
		}
		gen[r.GetRevision()], out[r.GetRevision()] = r.GetGeneration(), r.GetSource()
	}
	if id := head.GetRevision(); id != "" {
		if _, ok := gen[id]; !ok {
			out[id] = head.GetSource()
		}
	}
	return out
}

func (l revisionList) objects() ([]json.RawMessage, error) { return protoObjects(l.items) }

// nodeRow is one node as its presence and its status show it.
type nodeRow = view.Node

// nodeList is the union of the nodes and status buckets, by name.
type nodeList []nodeRow

func (l nodeList) table(now time.Time) [][]string {
	rows := [][]string{{"NODE", "PRESENT", "LABELS", "PHASE", "FINGERPRINT", "REVISION", "MESSAGE", "LAST-UPDATE"}}
	for _, n := range l {
		present := "no"
		if n.Presence != nil {
			present = "yes"
		}
		last := n.Status.GetLastUpdate()
		if last == nil {
			last = n.Presence.GetHeartbeatAt()
		}
		fp, msg := n.Status.GetFingerprint(), n.Status.GetMessage()
		if n.Status == nil && n.Presence.GetInForceFingerprint() != "" {
			// No status stored (a lost store): what the agent says it runs.
			fp, msg = n.Presence.GetInForceFingerprint(), "no status stored; the agent runs its last-good"
		}
		rows = append(rows, []string{
			n.Name, present, labelString(n.Labels()), nodePhase(n.Status.GetPhase()),
			shortN(fp, 12), short(n.Revision()),
			oneLine(msg, 60), age(now, last),
		})
	}
	return rows
}

func (l nodeList) objects() ([]json.RawMessage, error) { return view.NodeObjects(l) }

// mergeNodes joins presences and statuses by node name, sorted.
func mergeNodes(presences []*sluicev1.NodePresence, statuses []*sluicev1.NodeStatus) nodeList {
	return view.MergeNodes(presences, statuses)
}

// markInForce sets InForce on each present node that runs the config
// inForce (the last-applied revision) gives it (view.MarkInForce).
func (l nodeList) markInForce(inForce *sluicev1.Revision) { view.MarkInForce(l, inForce) }

// rolloutList is the rollouts bucket, newest first, with the active one.
type rolloutList struct {
	items  []*sluicev1.Rollout
	active string // id of the active rollout, "" when none
}

func (l rolloutList) table(now time.Time) [][]string {
	rows := [][]string{{"ID", "REVISION", "PHASE", "PROVISIONED/TOTAL", "FAILED", "SKIPPED", otherColumn, "REVERTED", "STARTED", "DURATION", "REASON"}}
	for _, r := range l.items {
		id := r.GetId()
		if id == l.active {
			id += " (active)"
		}
		t := contract.TallyOf(r)
		phase := rolloutPhase(r.GetPhase())
		if pauseLine(r) != "" {
			phase += " (paused)" // held by 'sluice rollout pause', as rollout status says
		}
		rows = append(rows, []string{
			id, short(r.GetRevision()), phase,
			provisionedCell(t), countCell(t, contract.CountFailed), countCell(t, contract.CountSkipped),
			otherCell(t, contract.CountProvisioned, contract.CountFailed, contract.CountSkipped), countCell(t, contract.CountReverted),
			age(now, r.GetStartedAt()), rolloutDuration(r, now), oneLine(r.GetReason(), 60),
		})
	}
	return rows
}

func (l rolloutList) objects() ([]json.RawMessage, error) { return protoObjects(l.items) }

// activeRollout is the record of the active rollout, nil when none.
func (l rolloutList) activeRollout() *sluicev1.Rollout {
	for _, r := range l.items {
		if r.GetId() == l.active && l.active != "" {
			return r
		}
	}
	return nil
}

// rolloutDuration is how long r ran, or has run so far.
func rolloutDuration(r *sluicev1.Rollout, now time.Time) string {
	if r.GetStartedAt() == nil {
		return none
	}
	end := now
	if r.GetFinishedAt() != nil {
		end = r.GetFinishedAt().AsTime()
	}
	return humanDuration(end.Sub(r.GetStartedAt().AsTime()))
}

// sortRollouts orders rollouts newest first: by start, then by generation.
func sortRollouts(rs []*sluicev1.Rollout) { view.SortRollouts(rs) }

// fingerprintList is the invalid fingerprints, newest first.
type fingerprintList []*sluicev1.InvalidFingerprint

func (l fingerprintList) table(now time.Time) [][]string {
	rows := [][]string{{"FINGERPRINT", "REVISION", "ROLLOUT", "NODE", "CAUSE", "CHECK", "TIME", "FORGIVEN", "OUTPUT"}}
	for _, f := range l {
		cause := f.GetCause()
		if cause == "" {
			cause = "check-failed" // recorded before causes were
		}
		forgiven := none
		if fg := f.GetForgiven(); fg != nil {
			forgiven = oneLine(fmt.Sprintf("by %s %s ago: %s", fg.GetBy(), age(now, fg.GetAt()), orNone(fg.GetReason())), 60)
		}
		rows = append(rows, []string{
			shortN(f.GetFingerprint(), 12), short(f.GetRevision()), orNone(f.GetRollout()), orNone(f.GetNode()),
			cause, orNone(f.GetCheck()), age(now, f.GetTime()), forgiven, oneLine(f.GetOutput(), 50),
		})
	}
	return rows
}

func (l fingerprintList) objects() ([]json.RawMessage, error) { return protoObjects(l) }
