package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// recover_nodes.go is `sluice recover --from-nodes`: ask every node with a
// live presence for its last-good (contract.LastGoodSubject), rebuild the
// intents (fromnodes.go, pure), write them as files `sluice apply` reads.
// It writes nothing to the store.

// askParallel bounds the requests in flight at once: 10,000 nodes are
// asked in a few seconds without a burst of 10,000 inboxes.
const askParallel = 64

func (a *app) recoverFromNodes(ctx context.Context, out string, timeout time.Duration) error {
	if out != "" {
		if err := emptyDir(out); err != nil {
			return &ExitError{Code: 1, Err: err}
		}
	}
	sn, err := a.bind(ctx, contract.BucketNodes)
	if err != nil {
		return err
	}
	defer sn.Close()
	_, err = requireLoss(ctx, sn.js,
		"there is nothing to recover from the nodes, and nothing was written; the store's own intents are the truth (sluice get intents)")
	if err != nil {
		return err
	}
	entries, err := store.New(sn.kv[contract.BucketNodes], func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return fmt.Errorf("list the live nodes (%s): %w", contract.BucketNodes, err)
	}
	var nodes []nodeAnswer
	for _, e := range entries {
		if contract.IsControlKey(e.Key) {
			continue
		}
		nodes = append(nodes, nodeAnswer{Node: e.Key, Labels: e.Value.GetLabels()})
		if e.Err != nil {
			nodes[len(nodes)-1].Err = "its presence does not decode: " + e.Err.Error()
		}
	}
	if len(nodes) == 0 {
		return &ExitError{Code: 1, Err: errors.New("no node has a live presence: there is nothing to ask; nothing was written")}
	}
	askAll(ctx, sn.nc, nodes, timeout)
	r := rebuildIntents(nodes)
	if len(r.Failed) == len(nodes) {
		return &ExitError{Code: 1, Err: fmt.Errorf("none of the %d nodes asked answered (%s): nothing was written", len(nodes), r.Failed[0].Err)}
	}
	summary := a.streams.Out
	if out == "" {
		// The intents go to stdout, to be redirected to a file; the
		// summary to stderr.
		summary = a.streams.Err
		if _, err := io.WriteString(a.streams.Out, intentsYAML(r)); err != nil {
			return err
		}
	} else if err := writeIntents(out, r); err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	printRecoverSummary(summary, r, len(nodes), out)
	if r.NeedsReview() {
		return silentExit(ExitRecoverReview)
	}
	return nil
}

// emptyDir checks that dir is absent or empty: `sluice apply -f DIR` would
// apply whatever else it holds.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--out %s: %w", dir, err)
	case len(ents) > 0:
		return fmt.Errorf("--out %s is not empty: 'sluice apply -f' would apply what else it holds; give a new or empty directory (nothing was written)", dir)
	}
	return nil
}

// askAll asks each node for its last-good, askParallel at a time, and
// records each answer (or why there is none) in nodes.
func askAll(ctx context.Context, nc *nats.Conn, nodes []nodeAnswer, timeout time.Duration) {
	sem := make(chan struct{}, askParallel)
	var wg sync.WaitGroup
	for i := range nodes {
		if nodes[i].Err != "" {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			nodes[i].Config, nodes[i].Err = askLastGood(ctx, nc, nodes[i].Node, timeout)
		})
	}
	wg.Wait()
}

// askLastGood asks one node's agent; the error says why there is no config
// to rebuild from ("" and nil: the node holds none).
func askLastGood(ctx context.Context, nc *nats.Conn, node string, timeout time.Duration) (*sluicev1.DesiredConfig, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subj := contract.LastGoodSubject(node)
	m, err := nc.RequestWithContext(ctx, subj, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, "no agent answers on " + subj + " (an agent older than this release, or in secure mode an account whose node permissions predate it: 'sluice creds push')"
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Sprintf("no answer within %s", timeout)
	case err != nil:
		return nil, err.Error()
	}
	switch code := m.Header.Get(contract.LastGoodErrorCodeHeader); code {
	case "":
	case "404":
		return nil, ""
	default:
		return nil, fmt.Sprintf("its agent could not read its last-good (%s): %s", code, m.Header.Get(contract.LastGoodErrorHeader))
	}
	cfg := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(m.Data, cfg); err != nil {
		return nil, "its answer does not decode: " + err.Error()
	}
	if cfg.GetNode() != "" && cfg.GetNode() != node {
		return nil, fmt.Sprintf("its answer is node %s's config", cfg.GetNode())
	}
	return cfg, ""
}

// intentYAML is one intent as a YAML document `sluice apply` reads, with
// comments saying where it came from and, when its selector must be
// edited, why.
func intentYAML(in rebuiltIntent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, rebuilt from the last-good of %s.\n", in.ID, joinNodes(in.Nodes))
	if len(in.OverSelects) > 0 {
		fmt.Fprintf(&b, "# EDIT THE SELECTOR: the labels these nodes share (%s) also select %s, which do not run this intent.\n"+
			"# The label %s selects no node: as it is, the intent is applied nowhere.\n", labelsText(in.Common), joinNodes(in.OverSelects), EditLabel)
	}
	if in.Cut {
		fmt.Fprintf(&b, "# Its nodes share %d labels, more than a selector may hold (%d): it keeps those that exclude the other nodes.\n",
			len(in.Common), contract.MaxSelectorLabels)
	}
	if len(in.Unasked) > 0 {
		fmt.Fprintf(&b, "# CHECK: the selector also selects %s, which gave no config; applying gives them this intent.\n", joinNodes(in.Unasked))
	}
	b.WriteString(specYAML(in.Intent))
	return b.String()
}

// specYAML encodes in as kind, name and spec (the spec's protojson, its
// field names as files write them).
func specYAML(in *sluicev1.Intent) string {
	m := in.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("spec"))
	spec := []byte("{}")
	if fd != nil {
		if j, err := protojson.Marshal(m.Get(fd).Message().Interface()); err == nil {
			spec = j
		}
	}
	doc := fmt.Sprintf(`{"kind": %q, "name": %q, "spec": %s}`, intent.Kind(in), in.GetName(), spec)
	y, err := yaml.JSONToYAML([]byte(doc))
	if err != nil { // protojson's output is JSON: this cannot fail
		return fmt.Sprintf("# cannot encode %s: %v\n", intent.ID(in), err)
	}
	// kind and name first, as people write them.
	lines := strings.SplitAfter(string(y), "\n")
	var head, rest []string
	for _, l := range lines {
		if strings.HasPrefix(l, "kind: ") || strings.HasPrefix(l, "name: ") {
			head = append(head, l)
		} else {
			rest = append(rest, l)
		}
	}
	slices.Sort(head) // kind before name
	return strings.Join(head, "") + strings.Join(rest, "")
}

// intentsYAML is every rebuilt intent as one multi-document YAML stream.
func intentsYAML(r rebuild) string {
	docs := make([]string, len(r.Intents))
	for i, in := range r.Intents {
		docs[i] = intentYAML(in)
	}
	return strings.Join(docs, "---\n")
}

// writeIntents writes each intent to DIR/<kind>.<name>.yaml.
func writeIntents(dir string, r rebuild) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	for _, in := range r.Intents {
		path := filepath.Join(dir, intent.Key(in.Intent)+".yaml")
		if err := os.WriteFile(path, []byte(intentYAML(in)), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// printRecoverSummary says what was asked, what answered, what was rebuilt
// and what the operator must do next.
func printRecoverSummary(w io.Writer, r rebuild, asked int, out string) {
	fmt.Fprintf(w, "asked %d nodes with a live presence: %d answered", asked, asked-len(r.Failed))
	if len(r.Empty) > 0 {
		fmt.Fprintf(w, " (%d hold no last-good: %s)", len(r.Empty), joinNodes(r.Empty))
	}
	fmt.Fprintln(w)
	for _, f := range r.Failed {
		fmt.Fprintf(w, "  did not answer: %s: %s\n", f.Node, f.Err)
	}
	for _, rev := range slices.Sorted(maps.Keys(r.Revisions)) {
		fmt.Fprintf(w, "  revision %s: %s\n", render.Short(rev), joinNodes(r.Revisions[rev]))
	}
	where := "to stdout"
	if out != "" {
		where = "to " + out
	}
	fmt.Fprintf(w, "rebuilt %d intents %s\n", len(r.Intents), where)
	for _, in := range r.Intents {
		sel := "no selector (every node)"
		if s := intent.Selector(in.Intent).GetMatchLabels(); len(s) > 0 {
			sel = "selector " + labelsText(s)
		}
		fmt.Fprintf(w, "  %s on %s: %s\n", in.ID, joinNodes(in.Nodes), sel)
		if len(in.OverSelects) > 0 {
			fmt.Fprintf(w, "    EDIT: the labels its nodes share also select %s, which do not run it; its selector has %s=true and selects nothing until you edit it\n",
				joinNodes(in.OverSelects), EditLabel)
		}
		if in.Cut {
			fmt.Fprintf(w, "    its nodes share %d labels, more than a selector may hold (%d): it keeps those that exclude the other nodes\n",
				len(in.Common), contract.MaxSelectorLabels)
		}
		if len(in.Unasked) > 0 {
			fmt.Fprintf(w, "    CHECK: it also selects %s, which gave no config\n", joinNodes(in.Unasked))
		}
	}
	if len(r.Conflicts) > 0 {
		fmt.Fprintf(w, "%d conflicts, not written (the same kind and name with different content; decide which is right and write it yourself):\n", len(r.Conflicts))
		for _, c := range r.Conflicts {
			for _, v := range c.Variants {
				fmt.Fprintf(w, "  %s on %s: %s\n", c.ID, joinNodes(v.Nodes), compactSpec(v.Intent))
			}
		}
	}
	fmt.Fprintln(w, "not recovered: intents that selected no live node (no node's config holds them), sources, origins and deletion marks.")
	fmt.Fprintln(w, "the revision id will differ from the one the nodes run: it hashes the selectors, which are rebuilt, not recovered; the nodes' configs are what counts.")
	fmt.Fprintln(w, "nothing was written to the store. Review the intents, then: sluice recover --confirm-empty --reason '…' && sluice apply -f DIR")
}

// compactSpec is an intent's spec on one line, to tell conflicting
// contents apart.
func compactSpec(in *sluicev1.Intent) string {
	m := in.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("spec"))
	if fd == nil {
		return "{}"
	}
	j, err := protojson.Marshal(m.Get(fd).Message().Interface())
	if err != nil {
		return err.Error()
	}
	return strings.Join(strings.Fields(string(j)), " ")
}

func joinNodes(nodes []string) string {
	const most = 10
	if len(nodes) > most {
		return strings.Join(nodes[:most], ", ") + fmt.Sprintf(" and %d more", len(nodes)-most)
	}
	return strings.Join(nodes, ", ")
}

// labelsText is labels as k=v,… sorted, "{}" for none.
func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "{}"
	}
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
