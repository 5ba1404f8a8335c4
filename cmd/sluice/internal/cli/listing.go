package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
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

// listObject is a listing in json and yaml output.
type listObject struct {
	// Request is what a listing of instances answers to (get pause: the
	// requested pause), kept apart from the items.
	Request    json.RawMessage   `json:"request,omitempty"`
	Items      []json.RawMessage `json:"items"`
	Unreadable []unreadableKey   `json:"unreadable"`
}

// requested is a listing whose JSON carries a request beside its items.
type requested interface {
	request() (json.RawMessage, error)
}

// printListing writes l, then the values that did not decode, in format to w.
func printListing(w io.Writer, l listing, unreadable []unreadableKey, format string, now time.Time) error {
	switch format {
	case formatTable:
		rows := l.table(now)
		for _, u := range unreadable {
			rows = append(rows, []string{u.Key, u.cell()})
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
		o := listObject{Items: objs, Unreadable: unreadable}
		if r, ok := l.(requested); ok {
			if o.Request, err = r.request(); err != nil {
				return err
			}
		}
		if o.Items == nil {
			o.Items = []json.RawMessage{}
		}
		if o.Unreadable == nil {
			o.Unreadable = []unreadableKey{}
		}
		b, err := json.MarshalIndent(o, "", "  ")
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
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(formats, ", "))
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
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		b, err := jsonOf(it)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
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

// revisionList is the revisions bucket, newest first, with the head.
type revisionList struct {
	items []*sluicev1.Revision
	head  *sluicev1.Head // nil when nothing was applied yet
}

func (l revisionList) table(now time.Time) [][]string {
	rows := [][]string{{"ID", "INTENTS", "CREATED", "HEAD"}}
	for _, r := range l.items {
		head := ""
		if l.head != nil && l.head.GetRevision() == r.GetId() {
			head = fmt.Sprintf("* (generation %d)", l.head.GetGeneration())
		}
		rows = append(rows, []string{short(r.GetId()), fmt.Sprint(len(r.GetIntents())), age(now, r.GetCreatedAt()), head})
	}
	return rows
}

func (l revisionList) objects() ([]json.RawMessage, error) { return protoObjects(l.items) }

// nodeRow is one node as its agent's presence lease and its status show it;
// either may be missing (a node that left keeps its status until the reaper
// removes it; a node that just joined has no status yet).
type nodeRow struct {
	Name     string
	Presence *sluicev1.NodePresence
	Status   *sluicev1.NodeStatus
	// InForce is the revision in force (last-applied) when the node runs
	// the config it gives the node, else "": after an undo to a revision
	// that gives a node the config it already ran, its status still names
	// the revision that last changed it.
	InForce string
}

// revision is the REVISION column: the revision in force when the node runs
// its config, else the revision its agent last applied a config from.
func (n nodeRow) revision() string {
	if n.InForce != "" {
		return n.InForce
	}
	return n.Status.GetRevision()
}

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
		rows = append(rows, []string{
			n.Name, present, labelString(n.Presence.GetLabels()), nodePhase(n.Status.GetPhase()),
			shortN(n.Status.GetFingerprint(), 12), short(n.revision()),
			oneLine(n.Status.GetMessage(), 60), age(now, last),
		})
	}
	return rows
}

// nodeObject is a node in json and yaml output.
type nodeObject struct {
	Node     string          `json:"node"`
	Present  bool            `json:"present"`
	InForce  string          `json:"revisionInForce,omitempty"`
	Presence json.RawMessage `json:"presence,omitempty"`
	Status   json.RawMessage `json:"status,omitempty"`
}

func (l nodeList) objects() ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(l))
	for _, n := range l {
		o := nodeObject{Node: n.Name, Present: n.Presence != nil, InForce: n.InForce}
		var err error
		if n.Presence != nil {
			if o.Presence, err = jsonOf(n.Presence); err != nil {
				return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
			}
		}
		if n.Status != nil {
			if o.Status, err = jsonOf(n.Status); err != nil {
				return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
			}
		}
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// mergeNodes joins presences and statuses by node name, sorted.
func mergeNodes(presences []*sluicev1.NodePresence, statuses []*sluicev1.NodeStatus) nodeList {
	byName := map[string]*nodeRow{}
	row := func(name string) *nodeRow {
		if r, ok := byName[name]; ok {
			return r
		}
		r := &nodeRow{Name: name}
		byName[name] = r
		return r
	}
	for _, p := range presences {
		row(p.GetNode()).Presence = p
	}
	for _, s := range statuses {
		row(s.GetNode()).Status = s
	}
	out := make(nodeList, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b nodeRow) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// markInForce sets InForce on each present node that runs the config
// inForce (the last-applied revision) gives it.
func (l nodeList) markInForce(inForce *sluicev1.Revision) {
	if inForce == nil {
		return
	}
	for i, n := range l {
		if n.Presence == nil || n.Status.GetAppliedFingerprint() == "" {
			continue
		}
		if render.Fingerprint(render.NodeConfig(inForce, n.Presence.GetLabels())) == n.Status.GetAppliedFingerprint() {
			l[i].InForce = inForce.GetId()
		}
	}
}

// rolloutList is the rollouts bucket, newest first, with the active one.
type rolloutList struct {
	items  []*sluicev1.Rollout
	active string // id of the active rollout, "" when none
}

func (l rolloutList) table(now time.Time) [][]string {
	rows := [][]string{{"ID", "REVISION", "PHASE", "PROVISIONED/TOTAL", "FAILED", "SKIPPED", "REVERTED", "STARTED", "DURATION", "REASON"}}
	for _, r := range l.items {
		id := r.GetId()
		if id == l.active {
			id += " (active)"
		}
		c := r.GetCounts()
		phase := rolloutPhase(r.GetPhase())
		if pauseLine(r) != "" {
			phase += " (paused)" // held by 'sluice rollout pause', as rollout status says
		}
		rows = append(rows, []string{
			id, short(r.GetRevision()), phase,
			fmt.Sprintf("%d/%d", c.GetProvisioned(), c.GetTotal()), fmt.Sprint(c.GetFailed()),
			fmt.Sprint(c.GetSkipped()), fmt.Sprint(c.GetReverted()),
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
func sortRollouts(rs []*sluicev1.Rollout) {
	slices.SortStableFunc(rs, func(a, b *sluicev1.Rollout) int {
		if c := b.GetStartedAt().AsTime().Compare(a.GetStartedAt().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(b.GetGeneration(), a.GetGeneration())
	})
}

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
