package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// `sluice diff --git A..B [--registry NAME]`: the change between two
// commits of a git registry's branch, as its syncs would make it. The
// commits are read as the registry reads its head (registry.ReadGitCommits:
// the repository in place, or a server's fetched into memory); the intents
// in force that the registry does not own are the same on both sides, so
// what differs is the registry's answer. Each node's config is rendered at
// both commits, as `sluice diff -f` renders the node's config now and
// after: the nodes whose fingerprint differs are the ones the change
// reaches. Nothing is written, to NATS or to the repository.

// gitDiffReport is `sluice diff --git`'s answer.
type gitDiffReport struct {
	Registry string           `json:"registry"`
	Location string           `json:"location"`
	From     gitDiffSide      `json:"from"`
	To       gitDiffSide      `json:"to"`
	Changed  bool             `json:"changed"` // the registry's intents differ
	Intents  []intentChange   `json:"intents"` // added, removed or changed between the commits
	Nodes    gitDiffNodeCount `json:"nodes"`
	Changes  []nodeChange     `json:"changes"`
	Groups   []changeGroup    `json:"groups"`
	Warnings []string         `json:"warnings"`

	full bool
}

// gitDiffSide is one end of the range: the commit it names.
type gitDiffSide struct {
	Rev     string `json:"rev"`  // as given
	Hash    string `json:"hash"` // in full
	Subject string `json:"subject"`
	Author  string `json:"author"`
	Time    string `json:"time"` // the author's, RFC 3339
}

func sideOf(rev string, c *sluicev1.GitCommit) gitDiffSide {
	return gitDiffSide{Rev: rev, Hash: c.GetHash(), Subject: c.GetSubject(), Author: c.GetAuthor(), Time: c.GetTime().AsTime().UTC().Format(time.RFC3339)}
}

type gitDiffNodeCount struct {
	Present   int `json:"present"`
	Change    int `json:"change"`
	Unchanged int `json:"unchanged"`
}

// parseGitRange reads --git's A..B; an empty end is HEAD, the head of the
// registry's branch, as git reads A.. and ..B.
func parseGitRange(s string) (from, to string, err error) {
	if strings.Contains(s, "...") {
		return "", "", fmt.Errorf("--git: %q: give two commits as A..B (the change from A to B); A...B is not read", s)
	}
	from, to, ok := strings.Cut(s, "..")
	if !ok {
		return "", "", fmt.Errorf("--git: %q: give two commits as A..B, such as 3f2a1c9..HEAD or main~1..main", s)
	}
	if strings.TrimSpace(from) != from || strings.TrimSpace(to) != to {
		return "", "", fmt.Errorf("--git: %q: a commit has white space around it", s)
	}
	if from == "" {
		from = "HEAD"
	}
	if to == "" {
		to = "HEAD"
	}
	return from, to, nil
}

// gitDiff works out what moving registry name from commit A to commit B
// of --git would change.
func (a *app) gitDiff(ctx context.Context, rng, name string, full bool) (*gitDiffReport, error) {
	from, to, err := parseGitRange(rng)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	nc, js, err := a.jetStream()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	control, err := bucket(ctx, js, contract.BucketControl)
	if err != nil {
		return nil, err
	}
	spec, err := gitRegistrySpec(ctx, store.New(control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }), name)
	if err != nil {
		return nil, err
	}
	name = spec.GetName()
	trees, location, err := registry.ReadGitCommits(ctx, spec, from, to)
	switch {
	case errors.Is(err, registry.ErrNoCommit):
		return nil, &ExitError{Code: ExitDiffFailed, Err: fmt.Errorf("--git: %w", err)}
	case err != nil:
		return nil, &ExitError{Code: ExitDiffFailed, Err: fmt.Errorf("--registry %s: read its repository: %w", name, err)}
	}
	r := &gitDiffReport{Registry: name, Location: location, full: full, Warnings: []string{},
		From: sideOf(from, trees[0].Commit), To: sideOf(to, trees[1].Commit)}

	intentsKV, err := bucket(ctx, js, contract.BucketIntents)
	if err != nil {
		return nil, err
	}
	nodesKV, err := bucket(ctx, js, contract.BucketNodes)
	if err != nil {
		return nil, err
	}
	stored, err := store.New(intentsKV, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("read the stored intents: %w", err)
	}
	// What the registry does not own stays as it is at both commits; what
	// another source owns is not the registry's to change (a sync leaves
	// it, reporting a conflict).
	others := map[string]change.Stored{}
	for _, e := range stored {
		if e.Err == nil && !contract.IsControlKey(e.Key) && e.Value.GetSource() != name {
			others[e.Key] = e
		}
	}
	bad := map[string]bool{} // origins unreadable at either commit: left out of both
	for _, t := range trees {
		for _, d := range t.Snapshot.Documents {
			if d.Err != nil {
				bad[d.Origin] = true
				r.Warnings = append(r.Warnings, fmt.Sprintf("warning: %s at %s: %v; its intents are left out at both commits",
					d.Origin, contract.ShortHash(t.Commit.GetHash()), d.Err))
			}
		}
		if t.NoPath {
			r.Warnings = append(r.Warnings, fmt.Sprintf("warning: the registry's path is not a directory at %s: read as holding no intent",
				contract.ShortHash(t.Commit.GetHash())))
		}
	}
	sets := make([][]*sluicev1.Intent, 2)
	answers := make([][]*sluicev1.Intent, 2)
	for i, t := range trees {
		answers[i] = r.declared(t, bad, others)
		set := change.Effective(others)
		sets[i] = append(set, answers[i]...)
		render.Sort(sets[i])
	}
	render.Sort(answers[0])
	render.Sort(answers[1])
	for _, fe := range intent.Validate(sets[1]) {
		r.Warnings = append(r.Warnings, fmt.Sprintf("warning: %s at %s: a sync reports it invalid and keeps the version in force",
			intent.FormatFieldError(fe), contract.ShortHash(trees[1].Commit.GetHash())))
	}
	r.Intents = intentChanges(&sluicev1.NodeConfig{Intents: answers[0]}, &sluicev1.NodeConfig{Intents: answers[1]}, full)
	r.Changed = len(r.Intents) > 0

	nodes, err := store.New(nodesKV, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("read the nodes: %w", err)
	}
	revA, revB := &sluicev1.Revision{Id: render.RevisionID(sets[0]), Intents: sets[0]}, &sluicev1.Revision{Id: render.RevisionID(sets[1]), Intents: sets[1]}
	r.Nodes.Present = len(nodes)
	r.Changes = []nodeChange{}
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		cfgA, cfgB := render.NodeConfig(revA, n.Value.GetLabels()), render.NodeConfig(revB, n.Value.GetLabels())
		fpA, fpB := render.Fingerprint(cfgA), render.Fingerprint(cfgB)
		if fpA == fpB {
			r.Nodes.Unchanged++
			continue
		}
		r.Changes = append(r.Changes, nodeChange{Node: n.Key, From: fpA, To: fpB, from: cfgA, to: cfgB, Intents: intentChanges(cfgA, cfgB, full)})
	}
	slices.SortFunc(r.Changes, func(a, b nodeChange) int { return strings.Compare(a.Node, b.Node) })
	r.Nodes.Change = len(r.Changes)
	r.Groups = groupChanges(r.Changes)
	for _, w := range r.Warnings {
		fmt.Fprintln(a.streams.Err, w)
	}
	return r, nil
}

// declared is what a sync of t would hold the registry's: its intents,
// without those of a bad origin, those declared twice (a sync takes
// neither) and those another source owns.
func (r *gitDiffReport) declared(t registry.GitTree, bad map[string]bool, others map[string]change.Stored) []*sluicev1.Intent {
	count := map[string]int{}
	for _, d := range t.Snapshot.Documents {
		for _, in := range d.Intents {
			count[intent.Key(in)]++
		}
	}
	var out []*sluicev1.Intent
	for _, d := range t.Snapshot.Documents {
		if bad[d.Origin] {
			continue
		}
		for _, in := range d.Intents {
			key := intent.Key(in)
			if o, ok := others[key]; ok && !o.Value.GetMarkedForDeletion() {
				r.Warnings = append(r.Warnings, fmt.Sprintf("warning: %s at %s is owned by %s: a sync leaves it as it is", intent.ID(in),
					contract.ShortHash(t.Commit.GetHash()), o.Value.GetSource()))
				continue
			}
			if count[key] > 1 {
				r.Warnings = append(r.Warnings, fmt.Sprintf("warning: %s is declared %d times at %s: a sync takes neither", intent.ID(in),
					count[key], contract.ShortHash(t.Commit.GetHash())))
				count[key] = -count[key] // warned once
				continue
			}
			if count[key] < 0 {
				continue
			}
			out = append(out, in)
		}
	}
	return out
}

// gitRegistrySpec is registry name's spec, which must be a git registry's;
// with no name, the one git registry there is.
func gitRegistrySpec(ctx context.Context, specs *store.Store[*sluicev1.RegistrySpec], name string) (*sluicev1.RegistrySpec, error) {
	usage := func(format string, args ...any) error {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
	}
	if name != "" {
		e, err := specs.Get(ctx, contract.RegistryKey(name))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, usage("--registry: there is no registry %s (sluice get registries lists them)", name)
		case err != nil:
			return nil, fmt.Errorf("--registry %s: read its spec: %w", name, err)
		case e.Value.GetGit() == nil:
			return nil, usage("--registry: %s is a %s registry, not a git registry: --git compares commits of a git registry's branch", name, registryKindOf(e.Value))
		}
		return e.Value, nil
	}
	all, err := specs.List(ctx, contract.RegistryKeyPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("read the registries: %w", err)
	}
	var git []string
	var found *sluicev1.RegistrySpec
	for _, e := range all {
		if e.Err == nil && e.Value.GetGit() != nil {
			git, found = append(git, e.Value.GetName()), e.Value
		}
	}
	switch len(git) {
	case 0:
		return nil, usage("--git: there is no git registry (sluice registry add NAME --git URL adds one)")
	case 1:
		return found, nil
	}
	slices.Sort(git)
	return nil, usage("--git: there are %d git registries (%s): name one with --registry", len(git), strings.Join(git, ", "))
}

// registryKindOf is a spec's kind in one word.
func registryKindOf(spec *sluicev1.RegistrySpec) string {
	switch spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		return "redis"
	case *sluicev1.RegistrySpec_Directory:
		return "directory"
	}
	return "git"
}

// print writes r as text: the commits, the intents that change, and the
// nodes they reach, grouped as `sluice diff` groups them (--full: node by
// node).
func (r *gitDiffReport) print(w io.Writer) {
	side := func(s gitDiffSide) string { return fmt.Sprintf("%s (%s)", contract.ShortHash(s.Hash), s.Subject) }
	fmt.Fprintf(w, "registry %s (%s): %s → %s\n", r.Registry, r.Location, side(r.From), side(r.To))
	if !r.Changed {
		fmt.Fprintln(w, "no change: the registry declares the same intents at both commits (nothing was stored: a preview)")
		return
	}
	var added, removed, changed int
	for _, ic := range r.Intents {
		switch ic.Op {
		case "added":
			added++
		case "removed":
			removed++
		default:
			changed++
		}
	}
	fmt.Fprintf(w, "intents: %d added, %d removed, %d changed\n", added, removed, changed)
	printIntentChanges(w, "  ", r.Intents)
	fmt.Fprintf(w, "nodes: %d present, %d change, %d unchanged\n", r.Nodes.Present, r.Nodes.Change, r.Nodes.Unchanged)
	d := &diffReport{Changes: r.Changes, Groups: r.Groups}
	if r.full {
		d.printNodes(w)
	} else {
		d.printGroups(w)
	}
	fmt.Fprintln(w, "nothing was stored (a preview of the commits)")
}
