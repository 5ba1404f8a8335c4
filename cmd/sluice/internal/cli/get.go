package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// getKind is a kind `sluice get` lists.
type getKind struct {
	name    string // plural, as shown in help
	aliases []string
	// load reads the kind; values that do not decode are returned apart.
	load func(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error)
	// buckets are those load reads: --watch lists again when one changes.
	buckets []string
	// byPrefix: `get KIND NAME` takes a prefix of 6+ characters of an id.
	byPrefix bool
}

var getKinds = []getKind{
	{"intents", []string{"intent"}, loadIntents, []string{contract.BucketIntents}, false},
	{"revisions", []string{"revision", "rev", "revs"}, loadRevisions, []string{contract.BucketRevisions}, true},
	{"nodes", []string{"node"}, loadNodes, []string{contract.BucketNodes, contract.BucketStatus, contract.BucketRollouts}, false},
	{"rollouts", []string{"rollout"}, loadRollouts, []string{contract.BucketRollouts}, false},
	{"fingerprints", []string{"fingerprint", "fp"}, loadFingerprints, []string{contract.BucketFingerprints}, true},
	{"pause", []string{"pauses", "instances"}, loadPause, []string{contract.BucketControl, contract.BucketInstances, contract.BucketNodes}, false},
	{"registries", []string{"registry", "reg", "regs"}, loadRegistries, []string{contract.BucketControl, contract.BucketIntents}, false},
	{"freezes", []string{"freeze"}, loadFreezes, []string{contract.BucketControl}, false},
}

func findGetKind(s string) (getKind, error) {
	s = strings.ToLower(s)
	names := make([]string, 0, len(getKinds))
	for _, k := range getKinds {
		if s == k.name || slices.Contains(k.aliases, s) {
			return k, nil
		}
		names = append(names, k.name)
	}
	return getKind{}, fmt.Errorf("cannot get %q: use one of %s", s, strings.Join(names, ", "))
}

// getKindRows lists the kinds get takes, with their aliases.
func getKindRows() [][]string {
	rows := [][]string{{"KIND", "ALIASES"}}
	for _, k := range getKinds {
		rows = append(rows, []string{k.name, strings.Join(k.aliases, ",")})
	}
	return rows
}

func (a *app) getCommand() *cobra.Command {
	var output, selector string
	var watch bool
	names := make([]string, 0, len(getKinds))
	for _, k := range getKinds {
		names = append(names, k.name)
	}
	cmd := &cobra.Command{
		Use:   "get [intents|revisions|nodes|rollouts|fingerprints|pause|registries|freezes] [NAME...]",
		Short: "List intents, revisions, nodes, rollouts, invalid fingerprints, the pause or the registries",
		Long: `List what the control plane stores, read straight from its buckets.

  intents        KIND NAME STATUS SOURCE UPDATED (SOURCE is the registry it
                 came from, with where in it when known: gitops:tenant-a.yaml);
                 below the table, why each one deleting is still there, as
                 the reaper decided it, and when the reaper looks again
  revisions      ID INTENTS CREATED HEAD SOURCE (newest first; * marks the
                 head; SOURCE is where the head move that introduced it came
                 from: git registry gitops commit 0123456789ab (Ada Admin:
                 add tenant a), registry NAME, or - for the API)
  nodes          NODE PRESENT LABELS PHASE FINGERPRINT REVISION MESSAGE LAST-UPDATE
                 (every node with a presence lease or a status; LABELS are
                 its presence's, or for a node that left (PRESENT no) those
                 its last status carried; REVISION is the revision in force
                 when the node runs the config it gives the node, else the
                 one its agent last applied from)
  rollouts       ID REVISION PHASE PROVISIONED/TOTAL FAILED SKIPPED OTHER REVERTED
                 STARTED DURATION REASON (newest first; the active one is
                 marked; FAILED counts invalid and timed-out nodes; OTHER the
                 rest of the nodes in 'rollout status' words: pending 3, in
                 progress 2, stopped in flight 1, not started 3; a row adds
                 up to its total; -o wide a column for each)
  fingerprints   FINGERPRINT REVISION ROLLOUT NODE CAUSE CHECK TIME FORGIVEN OUTPUT
                 (configs recorded invalid, newest first; a rollout to one is
                 refused unless applied with --retry-invalid, or until it is
                 forgiven with 'sluice fingerprint forgive': FORGIVEN says by
                 whom, when and why)
  pause          the requested pause (sluice pause / resume), then every live
                 instance: COMPONENT INSTANCE ROLE REACHED WAITING-FOR HEARTBEAT
                 (services, then each node's agent; REACHED is the pause
                 generation it acknowledged, "not yet" when behind)
  registries     NAME KIND LOCATION STATE LAST-SYNC INTENTS MARKED: the built-in
                 source "api" (sluice apply), then every registry added with
                 'sluice registry add'; below the table, what needs you:
                 unreachable registries, held deletions (confirm with 'sluice
                 registry confirm'), invalid intents, conflicts between
                 sources (shown on both) and notes
  freezes        ID FROM TO STATE BY REASON: the periods in which no wave
                 starts (sluice freeze add), by start

Without a kind, get lists the kinds and their short names. Names after the
kind keep only those items (a node, a rollout id, kind/name or name of an
intent, 6+ characters of a revision id or fingerprint); a name that matches
nothing is an error (exit 1) after what was found is printed.

-o wide adds columns and prints ids in full (nodes: ROLLOUT, OPERATION,
AGENT, HEARTBEAT; rollouts: every count, WAVE, LEADER-EPOCH); -o name prints
kind/name, one per line (node/node-01, rollout/3-ab12cd34ef56,
layer2network/tenant-a), for scripts.

--watch lists again each time what the listing reads changes (redrawn in
place on a terminal; appended, after a blank line, otherwise) until
interrupted (Ctrl-C, exit 0).

A stored value that does not decode does not stop the listing: the table
shows it as a row with its key and "<unreadable: bucket/key reason>" (and a
hint on stderr), and the exit code stays 0. Control keys ("_fence") are
never listed.

-o json and -o yaml print {"items": [...], "unreadable": [...]}: items are the
stored objects (protojson field names; 64-bit integers as numbers; each
enum followed by the word the table shows: "phase": "NODE_PHASE_PROVISIONED",
"phaseName": "Provisioned"), unreadable the values that do not decode, each {bucket, key, reason}. For
pause, "request" is control/pause ({} when never paused) and the items are
the instances. For registries, each item is {name, kind, intents, marked,
spec, status}.`,
		Example: "  sluice get nodes\n  sluice get node node-01 -o wide\n  sluice get rollouts -o yaml\n  sluice get rollouts --watch\n" +
			"  sluice get nodes -l zone=zone-a -o name\n  sluice get registries",
		Args:      cobra.ArbitraryArgs,
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				// As kubectl api-resources: what there is to get.
				return writeTable(a.streams.Out, getKindRows())
			}
			kind, err := findGetKind(args[0])
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			sel, err := parseSelector(selector)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("-l %q: %w", selector, err)}
			}
			if sel != nil && kind.name != "nodes" {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("-l selects nodes by their labels: it applies to get nodes, not to %s", kind.name)}
			}
			if err := checkFormat(output, getFormats...); err != nil {
				return err
			}
			nc, js, err := a.jetStream()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx := cmd.Context()
			var changed <-chan struct{}
			if watch {
				if changed, err = watchBuckets(ctx, js, kind.buckets); err != nil {
					return err
				}
			}
			var buf bytes.Buffer
			missing, err := a.printGet(ctx, &buf, nc, js, kind, args[1:], sel, output)
			if err != nil {
				return err
			}
			// Nothing found prints nothing but the error, as kubectl.
			if len(missing) == 0 || len(missing) < len(args[1:]) {
				if _, err := a.streams.Out.Write(buf.Bytes()); err != nil {
					return err
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%s %s not found (sluice get %s lists them)", strings.TrimSuffix(kind.name, "s"), strings.Join(quoteAll(missing), ", "), kind.name)
			}
			if !watch {
				return nil
			}
			return a.watchGet(ctx, changed, buf.String(), func(w io.Writer) error {
				_, err := a.printGet(ctx, w, nc, js, kind, args[1:], sel, output)
				return err
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, wide, name, json or yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "list again whenever it changes, until interrupted")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "get nodes only: the nodes whose labels match every key=value, comma-separated (e.g. -l zone=zone-a,rack=rack-1)")
	return cmd
}

// printGet writes the listing of kind (only the items names names, when
// any; only nodes matching sel) in output to w; missing are the names that
// match nothing.
func (a *app) printGet(ctx context.Context, w io.Writer, nc *nats.Conn, js jetstream.KeyValueManager, kind getKind, names []string,
	sel map[string]string, output string) (missing []string, err error) {
	l, bad, err := kind.load(ctx, js)
	if err != nil {
		return nil, err
	}
	if nodes, ok := l.(nodeList); ok && sel != nil {
		l = nodes.selecting(sel)
		if picked := l.(nodeList); len(picked) == 0 {
			// On stderr, as kubectl's "No resources found": stdout stays the (empty) listing.
			fmt.Fprintf(a.streams.Err, "no node matches -l %s: none of the %s registered has every one of those labels (sluice get nodes shows their labels)\n",
				formatSelector(sel), contract.Thousands(len(nodes)))
		}
	}
	if n, ok := l.(named); ok && len(names) > 0 {
		l, missing = pickNamed(n, names, kind.byPrefix)
		bad = nil // a value that does not decode has no name to match
	}
	tabular := output == formatTable || output == formatWide
	if len(bad) > 0 && tabular {
		fmt.Fprintln(a.streams.Err, unreadableHint(len(bad)))
	}
	if err := printListing(w, l, bad, output, a.now()); err != nil {
		return missing, err
	}
	if _, ok := l.(nodeList); ok {
		if note := storeLossNote(ctx, js); note != "" {
			if tabular {
				fmt.Fprintf(w, "\n%s\n", note)
			} else {
				fmt.Fprintln(a.streams.Err, note)
			}
		}
	}
	if il, ok := l.(intentList); ok && il.deleting() {
		// Why each deleting intent is still there: the reaper's decision.
		st, err := reaperStatus(ctx, nc)
		note := strings.Join(deletingLines(il, st, err, a.now()), "\n")
		if tabular {
			fmt.Fprintf(w, "\n%s\n", note) // below the table
		} else {
			fmt.Fprintln(a.streams.Err, note) // a listing on stdout stays parseable
		}
	}
	if rl, ok := l.(rolloutList); ok {
		if note := a.noLeaderNote(ctx, js, rl.activeRollout()); note != "" {
			if tabular {
				fmt.Fprintf(w, "\n%s\n", note) // below the table
			} else {
				fmt.Fprintln(a.streams.Err, note) // a listing on stdout stays parseable
			}
		}
	}
	return missing, nil
}

// quoteAll quotes each of s.
func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// parseSelector reads -l's key=value[,key=value…]; nil for "".
func parseSelector(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		sel[k] = v
	}
	return sel, nil
}

// formatSelector writes sel as -l takes it, keys sorted.
func formatSelector(sel map[string]string) string {
	parts := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, contract.Quote(k)+"="+contract.Quote(sel[k]))
	}
	return strings.Join(parts, ",")
}

// selecting is the nodes of l whose presence carries every label of sel
// (a node that is not present has no labels to match).
func (l nodeList) selecting(sel map[string]string) nodeList {
	out := nodeList{}
	for _, n := range l {
		labels := n.Presence.GetLabels()
		match := n.Presence != nil
		for k, v := range sel {
			if got, ok := labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out = append(out, n)
		}
	}
	return out
}

// list reads every live entry of a bucket that decodes as T, skipping
// control keys and the keys in skip; entries that do not decode are
// returned apart.
func list[T proto.Message](ctx context.Context, js jetstream.KeyValueManager, name string, newT func() T, skip ...string) ([]T, []unreadableKey, error) {
	kv, err := bucket(ctx, js, name)
	if err != nil {
		return nil, nil, err
	}
	entries, err := store.New(kv, newT).List(ctx, ">")
	if err != nil {
		return nil, nil, err
	}
	out := make([]T, 0, len(entries))
	var bad []unreadableKey
	for _, e := range entries {
		switch {
		case contract.IsControlKey(e.Key), slices.Contains(skip, e.Key):
		case e.Err != nil:
			bad = append(bad, newUnreadable(name, e.Key, e.Err))
		default:
			out = append(out, e.Value)
		}
	}
	return out, bad, nil
}

// getOne reads bucket/key as T: ok is false when the key does not exist or
// its value does not decode (then bad describes it).
func getOne[T proto.Message](ctx context.Context, js jetstream.KeyValueManager, name, key string, newT func() T) (v T, bad []unreadableKey, err error) {
	kv, err := bucket(ctx, js, name)
	if err != nil {
		return v, nil, err
	}
	e, err := store.New(kv, newT).Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return v, nil, nil
	case undecodable(err):
		return v, []unreadableKey{newUnreadable(name, key, err)}, nil
	}
	return e.Value, nil, err
}

func loadIntents(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	items, bad, err := list(ctx, js, contract.BucketIntents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	return intentList(items), bad, err
}

func loadRevisions(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	items, bad, err := list(ctx, js, contract.BucketRevisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }, contract.KeyHead, contract.KeyPending)
	if err != nil {
		return nil, nil, err
	}
	slices.SortStableFunc(items, func(a, b *sluicev1.Revision) int {
		if c := b.GetCreatedAt().AsTime().Compare(a.GetCreatedAt().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetId(), b.GetId())
	})
	head, badHead, err := getOne(ctx, js, contract.BucketRevisions, contract.KeyHead, func() *sluicev1.Head { return &sluicev1.Head{} })
	if err != nil {
		return nil, nil, err
	}
	rollouts, err := rolloutRecords(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	return revisionList{items: items, head: head, sources: revisionSources(rollouts, head)}, append(badHead, bad...), nil
}

// rolloutRecords is every readable rollout record, for where revisions came
// from: none while the rollouts bucket does not exist (no coordinator has
// started yet). Records that do not decode are left to the listings of
// rollouts to report.
func rolloutRecords(ctx context.Context, js jetstream.KeyValueManager) ([]*sluicev1.Rollout, error) {
	if _, err := js.KeyValue(ctx, contract.BucketRollouts); errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	items, _, err := list(ctx, js, contract.BucketRollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, contract.KeyActive, contract.KeyLastApplied)
	return items, err
}

func loadNodes(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	presences, badP, err := list(ctx, js, contract.BucketNodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if err != nil {
		return nil, nil, err
	}
	statuses, badS, err := list(ctx, js, contract.BucketStatus, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if err != nil {
		return nil, nil, err
	}
	nodes := mergeNodes(presences, statuses)
	nodes.markInForce(revisionInForce(ctx, js))
	return nodes, append(badP, badS...), nil
}

// revisionInForce is the last-applied rollout's revision; nil when there is
// none or it cannot be read (the nodes' own revisions are shown then).
func revisionInForce(ctx context.Context, js jetstream.KeyValueManager) *sluicev1.Revision {
	last, _, err := getOne(ctx, js, contract.BucketRollouts, contract.KeyLastApplied, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if err != nil || last.GetRevision() == "" {
		return nil
	}
	rev, _, err := getOne(ctx, js, contract.BucketRevisions, last.GetRevision(), func() *sluicev1.Revision { return &sluicev1.Revision{} })
	if err != nil {
		return nil
	}
	return rev
}

func loadRollouts(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	items, bad, err := list(ctx, js, contract.BucketRollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, contract.KeyActive, contract.KeyLastApplied)
	if err != nil {
		return nil, nil, err
	}
	sortRollouts(items)
	active, badActive, err := getOne(ctx, js, contract.BucketRollouts, contract.KeyActive, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if err != nil {
		return nil, nil, err
	}
	return rolloutList{items: items, active: active.GetRollout()}, append(badActive, bad...), nil
}

func loadFingerprints(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	items, bad, err := list(ctx, js, contract.BucketFingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	if err != nil {
		return nil, nil, err
	}
	view.SortFingerprints(items)
	return fingerprintList(items), bad, nil
}
