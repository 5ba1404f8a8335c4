package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) diffCommand() *cobra.Command {
	var files []string
	var output string
	var sf strategyFlags
	var strict, full bool
	var gitRange, registryName string
	cmd := &cobra.Command{
		Use:   "diff (-f FILE|DIR [-f ...] [strategy flags] | --git A..B [--registry NAME]) [--full] [-o json|yaml]",
		Short: "Show what applying the files, or a git registry's commits, would change, storing nothing",
		Long: `A dry run of 'sluice apply': the configurator checks the files exactly as
it checks an apply (the rules, the stored intents, registry ownership,
intents marked for deletion, configs recorded invalid, sizes, the fleet
verifier's rules on the whole set and the present nodes) and answers
what it would do, storing nothing. For the revision it would cut, the diff
shows the intents created and updated, what changes in the present nodes'
configs, and the waves and failure domains the strategy would take them in.

What changes is shown once for all the nodes that get the same change: the
number of nodes and the first 8 of them, then each intent added (+),
removed (-) or changed (~), a changed one with the fields that change, as
the files spell them:

  12 nodes: node-01 node-02 node-03 node-04 node-05 node-06 node-07 node-08 and 4 more
      ~ layer2network/tenant-a spec.vlan: 100 → 200

--full lists every changing node instead, with its config's fingerprint
before and after and each intent's whole spec before and after.

Exit codes, as kubectl diff's: 0 when apply would change nothing (the files'
revision is the head), 1 when it would store a new revision, 2 for usage
errors, 6 when apply would be refused (the configurator's answer says why)
or the diff could not be made (NATS unreachable, no configurator, …).
'apply --dry-run' prints the same (without --full) and exits as apply
does: 0 accepted, 1 refused.

-o json and -o yaml print the same as one object: revision, head, changed,
created, updated, unchanged, nodes {present, change, unchanged, refused},
changes [{node, from, to, wave, domain, intents [{intent, op, fields
[{path, from, to}], from, to}]}] (every changing node; an intent's from
and to, its whole spec, only with --full; a field's from or to is its JSON
value, absent where the field is unset), groups [{count, nodes, intents
[{intent, op, fields}]}] (the nodes that get the same changes, as the text
shows them), refused [{node, fingerprint, cause, failedNode, rollout,
check, output}], plan, findings [{rule, severity, intents, nodes,
nodeCount, message, fix}] (the fleet verifier's warnings) and warnings
(findings and warnings are on stderr too).

What the coordinator does can still differ if nodes join or leave, or the
stored intents change, before the apply.

--git A..B previews the change between two commits of a git registry's
branch (--registry NAME; it may be left out when there is one git
registry): the intents added (+), removed (-) and changed (~, with the
fields that change) between the commits, as a sync of the registry would
read them, and the nodes each change reaches, grouped as above (--full:
node by node). A and B are a commit's hash (abbreviated or not), a branch
or tag, or HEAD~N, HEAD being the head of the registry's branch; an empty
end is HEAD (A.. is A..HEAD). The repository is read as the configurator
reads it: one on this host in place (run it where the configurator runs,
or where the repository is at the same path), a server's fetched into
memory with the registry's credential files read on this host. Nothing is
written. Exit 0 when the registry declares the same intents at both
commits, 1 when they differ, 2 for a bad --git or --registry, 6 when a
commit cannot be read. -o json: registry, location, from and to {rev,
hash, subject, author, time}, changed, intents [{intent, op, fields}],
nodes {present, change, unchanged}, changes[], groups[] and warnings, as
above.`,
		Example: "  sluice diff -f /tmp/my-intents\n  sluice diff -f /tmp/my-intents --full\n  sluice diff -f /tmp/my-intents -o json | jq .changes[].node\n" +
			"  sluice apply -f /tmp/my-intents --dry-run --first-wave 1\n  sluice diff --git 3f2a1c9..HEAD --registry network\n  sluice diff --git main~1..main",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every failure without a code of its own exits ExitDiffFailed,
			// so that 1 means "changes" only (as kubectl diff).
			a.failCode = ExitDiffFailed
			if gitRange != "" || registryName != "" {
				return a.runGitDiff(cmd, gitRange, registryName, files, output, full)
			}
			if len(files) == 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("nothing to compare: name intent files or directories with -f, or two commits of a git registry with --git A..B")}
			}
			if err := checkFormat(output); err != nil {
				return err
			}
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			intents, where, err := intent.ParseFilesWhere(files...)
			if err != nil {
				fmt.Fprintln(a.streams.Err, err)
				return silentExit(ExitDiffFailed)
			}
			r, err := a.diff(cmd.Context(), intents, where, strategy, strict, full)
			if err != nil {
				return err
			}
			if output == formatTable {
				r.print(a.streams.Out)
			} else if err := writeStructured(a.streams.Out, r, output); err != nil {
				return err
			}
			switch {
			case len(r.Refused) > 0:
				return silentExit(ExitDiffFailed)
			case r.Changed:
				a.failCode = 0 // this 1 is diff's own
				return silentExit(ExitDiffers)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file or directory (repeatable)")
	outputFlag(cmd.Flags(), &output)
	cmd.Flags().BoolVar(&strict, "strict", false, "the fleet verifier's warnings refuse, as they would refuse 'apply --strict'")
	cmd.Flags().BoolVar(&full, "full", false, "list every changing node with its fingerprints and each intent's whole spec before and after")
	cmd.Flags().StringVar(&gitRange, "git", "", "A..B: the change between two commits of a git registry's branch, instead of -f")
	cmd.Flags().StringVar(&registryName, "registry", "", "with --git: the git registry (default: the only one)")
	sf.register(cmd.Flags())
	return cmd
}

// runGitDiff is `sluice diff --git A..B`.
func (a *app) runGitDiff(cmd *cobra.Command, rng, name string, files []string, output string, full bool) error {
	usage := func(err error) error { return &ExitError{Code: ExitUsage, Err: err} }
	switch {
	case rng == "":
		return usage(errors.New("--registry goes with --git A..B"))
	case len(files) > 0:
		return usage(errors.New("--git compares two commits of a git registry: give it or -f, not both"))
	}
	// The strategy flags and --strict are an apply's: a registry's sync
	// keeps the head's strategy.
	var other []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed && !slices.Contains([]string{"git", "registry", "full", "output"}, f.Name) {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 {
		return usage(fmt.Errorf("%s goes with -f, not --git: a registry's sync keeps the head's strategy; --git previews the intents and the nodes they reach", strings.Join(other, ", ")))
	}
	if err := checkFormat(output); err != nil {
		return err
	}
	r, err := a.gitDiff(cmd.Context(), rng, name, full)
	if err != nil {
		return err
	}
	if output == formatTable {
		r.print(a.streams.Out)
	} else if err := writeStructured(a.streams.Out, r, output); err != nil {
		return err
	}
	if r.Changed {
		a.failCode = 0 // this 1 is diff's own
		return silentExit(ExitDiffers)
	}
	return nil
}

// dryRun prints what applying intents with strategy would do, for
// `apply --dry-run`: exit 0 when apply would be accepted, 1 when refused.
func (a *app) dryRun(ctx context.Context, intents []*sluicev1.Intent, where *intent.Where, strategy *sluicev1.Strategy, strict bool) error {
	r, err := a.diff(ctx, intents, where, strategy, strict, false)
	if err != nil {
		return err
	}
	r.print(a.streams.Out)
	if len(r.Refused) > 0 {
		return silentExit(1)
	}
	return nil
}

// diffReport is what applying some intents would do: `sluice diff`'s
// answer, printed as text or as one JSON object.
type diffReport struct {
	Revision  string         `json:"revision"`
	Head      string         `json:"head"`    // "" when nothing was applied yet
	Changed   bool           `json:"changed"` // apply would store a new revision
	Created   []string       `json:"created"` // kind/name
	Updated   []string       `json:"updated"`
	Unchanged int            `json:"unchanged"` // of the intents given
	Nodes     diffNodeCounts `json:"nodes"`
	Changes   []nodeChange   `json:"changes"`
	Groups    []changeGroup  `json:"groups"` // the nodes that get the same changes
	Refused   []diffRefusal  `json:"refused"`
	Plan      string         `json:"plan,omitempty"` // the strategy, when a node changes
	Findings  []finding      `json:"findings"`       // the fleet verifier's (warnings: errors refuse)
	Warnings  []string       `json:"warnings"`

	waitsFor       string // the rollout a queued head waits for
	strategyUnused bool   // strategy flags given with content that is the head

	domainKey   string // the strategy's failure-domain label key
	maxParallel int
	full        bool // each node with its intents' whole specs (--full)
}

type diffNodeCounts struct {
	Present   int `json:"present"`
	Change    int `json:"change"`
	Unchanged int `json:"unchanged"`
	Refused   int `json:"refused"`
}

// nodeChange is one node whose config would change.
type nodeChange struct {
	Node    string         `json:"node"`
	From    string         `json:"from"` // fingerprint, "" when the node has no desired config yet
	To      string         `json:"to"`
	Wave    int            `json:"wave,omitempty"`   // from 1; 0 without waves
	Domain  string         `json:"domain,omitempty"` // the failure domain's label value
	Intents []intentChange `json:"intents"`

	sortKey  string // contract.DomainSortKey
	from, to *sluicev1.NodeConfig
}

// intentChange is one intent that differs in a node's config: for a
// changed one, the fields that change; with --full its whole spec before
// and after too.
type intentChange struct {
	Intent string             `json:"intent"` // kind/name
	Op     string             `json:"op"`     // added, removed or changed
	Fields []view.FieldChange `json:"fields,omitempty"`
	From   json.RawMessage    `json:"from,omitempty"`
	To     json.RawMessage    `json:"to,omitempty"`
}

// diffRefusal is a node whose new config is recorded invalid.
type diffRefusal struct {
	Node        string `json:"node"`
	Fingerprint string `json:"fingerprint"`
	Cause       string `json:"cause"`
	FailedNode  string `json:"failedNode"` // where it failed
	Rollout     string `json:"rollout"`
	Check       string `json:"check"`
	Output      string `json:"output"`
}

// diff works out what applying intents with strategy would do (see
// diffCommand); invalid intents are printed and end it with ExitError 1
// (ExitDiffFailed for diff), each after where in the files (where) its
// intent is declared.
func (a *app) diff(ctx context.Context, intents []*sluicev1.Intent, where *intent.Where, strategy *sluicev1.Strategy, strict, full bool) (*diffReport, error) {
	if errs := intent.Validate(intents); len(errs) > 0 {
		printFieldErrors(a.streams.Err, errs, where)
		return nil, silentExit(1)
	}
	nc, js, err := a.jetStream()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// The verdict is the configurator's own: it checks a dry run exactly as
	// an apply and answers before its first write.
	verdict, err := apiclient.Apply(ctx, nc, &sluicev1.ApplyRequest{Intents: intents, Strategy: strategy, Source: contract.SourceAPI, DryRun: true, Strict: strict})
	if err != nil {
		var apiErr *apiclient.Error
		if errors.As(err, &apiErr) && len(apiErr.FieldErrors) == 0 && apiErr.Code != contract.ErrCodeUnavailable {
			printFindings(a.streams.Err, apiErr.Findings)
			fmt.Fprintf(a.streams.Err, "apply would be refused: %s\n", apiErr.Description)
			return nil, silentExit(1)
		}
		return nil, a.rejectedAt(err, where)
	}
	r := &diffReport{Created: verdict.GetCreated(), Updated: verdict.GetUpdated(), Unchanged: len(verdict.GetUnchanged()),
		Changes: []nodeChange{}, Groups: []changeGroup{}, Refused: []diffRefusal{}, Warnings: []string{}, Revision: verdict.GetRevision(), Changed: verdict.GetChanged(), full: full,
		Findings: findingsOf(verdict.GetFindings()), waitsFor: verdict.GetWaitsFor(), strategyUnused: strategy != nil && !verdict.GetChanged()}
	printFindings(a.streams.Err, verdict.GetFindings())
	if r.Created == nil {
		r.Created = []string{} // [] in -o json, not null
	}
	if r.Updated == nil {
		r.Updated = []string{}
	}
	kv := map[string]jetstream.KeyValue{}
	for _, name := range []string{contract.BucketIntents, contract.BucketRevisions, contract.BucketNodes, contract.BucketNodeConfigs, contract.BucketFingerprints} {
		if kv[name], err = bucket(ctx, js, name); err != nil {
			return nil, err
		}
	}
	head, err := store.New(kv[contract.BucketRevisions], func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the head: %w", err)
	}
	r.Head = head.Value.GetRevision()
	if !r.Changed {
		return r, nil
	}
	// The per-node picture, drawn from the same plan the configurator made.
	stored, err := store.New(kv[contract.BucketIntents], func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("read the stored intents: %w", err)
	}
	live := map[string]change.Stored{}
	for _, e := range stored {
		if e.Err == nil && !contract.IsControlKey(e.Key) {
			live[e.Key] = e
		}
	}
	set := change.Apply(live, nil, intents).Set
	rev := &sluicev1.Revision{Id: render.RevisionID(set), Intents: set}
	if rev.GetId() != r.Revision {
		// An unreadable stored intent the configurator keeps in force, or a
		// change between its answer and these reads.
		r.Warnings = append(r.Warnings, fmt.Sprintf("warning: the nodes below are drawn from revision %s as read here, not %s as the configurator answered; run it again for a fresh picture",
			short(rev.GetId()), short(r.Revision)))
	}

	nodes, err := store.New(kv[contract.BucketNodes], func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("read the nodes: %w", err)
	}
	desired := map[string]*sluicev1.DesiredConfig{}
	configs, err := store.New(kv[contract.BucketNodeConfigs], func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return nil, fmt.Errorf("read the desired configs: %w", err)
	}
	for _, c := range configs {
		if node, which, ok := contract.NodeOfConfigKey(c.Key); ok && which == "desired" && c.Err == nil {
			desired[node] = c.Value
		}
	}
	refused := map[string]change.Hit{}
	if !strategy.GetRetryInvalid() {
		// Only what was recorded after the configurator answered can show
		// here: it refuses the rest itself.
		records, err := store.New(kv[contract.BucketFingerprints], func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).List(ctx, ">")
		if err != nil {
			return nil, fmt.Errorf("read the invalid fingerprints: %w", err)
		}
		for _, h := range change.KnownBad(rev, nodes, change.Known(records)) {
			refused[h.Node] = h
		}
	}

	plan, err := contract.ResolveStrategy(strategy, len(nodes))
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	r.Nodes.Present = len(nodes)
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		cfg := render.NodeConfig(rev, n.Value.GetLabels())
		fp := render.Fingerprint(cfg)
		cur := desired[n.Key]
		if cur.GetFingerprint() == fp {
			r.Nodes.Unchanged++
			continue
		}
		if h, ok := refused[n.Key]; ok {
			f := h.Record
			r.Refused = append(r.Refused, diffRefusal{Node: n.Key, Fingerprint: fp, Cause: f.GetCause(), FailedNode: f.GetNode(),
				Rollout: f.GetRollout(), Check: f.GetCheck(), Output: f.GetOutput()})
			continue
		}
		c := nodeChange{Node: n.Key, sortKey: contract.DomainSortKey(plan.DomainKey, n.Value.GetLabels()),
			from: cur.GetConfig(), to: cfg, From: cur.GetFingerprint(), To: fp}
		if plan.DomainKey != "" {
			c.Domain = contract.DomainLabel(c.sortKey)
		}
		c.Intents = intentChanges(c.from, c.to, full)
		r.Changes = append(r.Changes, c)
	}
	r.Nodes.Change, r.Nodes.Refused = len(r.Changes), len(r.Refused)
	r.Warnings = append(r.Warnings, selectsNone(intents, labelsOf(nodes))...)
	for _, w := range r.Warnings {
		fmt.Fprintln(a.streams.Err, w)
	}
	slices.SortFunc(r.Changes, func(a, b nodeChange) int {
		return cmp.Or(cmp.Compare(a.sortKey, b.sortKey), cmp.Compare(a.Node, b.Node))
	})
	if len(r.Changes) > 0 {
		r.Plan, r.domainKey, r.maxParallel = plan.Describe(), plan.DomainKey, plan.MaxParallel
		for i := range r.Changes {
			r.Changes[i].Wave = waveOf(plan.Waves, i)
		}
	}
	r.Groups = groupChanges(r.Changes)
	return r, nil
}

// print writes r as text: the intents, each changing node with its intents,
// the refused nodes and the waves.
func (r *diffReport) print(w io.Writer) {
	if !r.Changed {
		var st *sluicev1.Strategy
		if r.strategyUnused {
			st = &sluicev1.Strategy{}
		}
		fmt.Fprintf(w, "%s (nothing was stored: dry run)\n", noChange(r.Revision, r.waitsFor, st))
		return
	}
	fmt.Fprintf(w, "revision %s (the head is %s): %d intent(s) created, %d updated, %d unchanged\n", short(r.Revision),
		orNone(short(r.Head)), len(r.Created), len(r.Updated), r.Unchanged)
	for _, id := range r.Created {
		fmt.Fprintf(w, "  + %s\n", id)
	}
	for _, id := range r.Updated {
		fmt.Fprintf(w, "  ~ %s\n", id)
	}
	fmt.Fprintf(w, "nodes: %d present, %d change, %d unchanged, %d refused\n", r.Nodes.Present, r.Nodes.Change, r.Nodes.Unchanged, r.Nodes.Refused)
	if r.full {
		r.printNodes(w)
	} else {
		r.printGroups(w)
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "refused (the rollout would stop before touching any node; apply refuses it now):\n")
		for _, f := range r.Refused {
			fmt.Fprintf(w, "  %s → %s is recorded invalid (%s on %s in rollout %s, check %s: %s)\n", f.Node, short(f.Fingerprint),
				orNone(f.Cause), orNone(f.FailedNode), orNone(f.Rollout), orNone(f.Check), oneLine(f.Output, 100))
		}
	}
	if len(r.Changes) > 0 {
		fmt.Fprintf(w, "plan: %s\n", r.Plan)
		var line []string
		flush := func() {
			if len(line) > 0 {
				fmt.Fprintf(w, "  %s\n", strings.Join(line, " "))
			}
			line = nil
		}
		for i, c := range r.Changes {
			if i == 0 || c.Wave != r.Changes[i-1].Wave || c.sortKey != r.Changes[i-1].sortKey {
				flush()
				line = append(line, r.stageLabel(c))
			}
			line = append(line, c.Node)
		}
		flush()
	}
	fmt.Fprintln(w, "nothing was stored (dry run)")
}

// finding is a fleet verifier's finding in diff's JSON (sluicev1.Finding
// with its severity as a word).
type finding struct {
	Rule      string   `json:"rule"`
	Severity  string   `json:"severity"` // error or warning
	Intents   []string `json:"intents"`
	Nodes     []string `json:"nodes"`
	NodeCount uint32   `json:"nodeCount"`
	Message   string   `json:"message"`
	Fix       string   `json:"fix"`
}

func findingsOf(fs []*sluicev1.Finding) []finding {
	out := []finding{}
	for _, f := range fs {
		out = append(out, finding{Rule: f.GetRule(), Severity: verify.SeverityWord(f.GetSeverity()), Intents: orEmpty(f.GetIntents()),
			Nodes: orEmpty(f.GetNodes()), NodeCount: f.GetNodeCount(), Message: f.GetMessage(), Fix: f.GetFix()})
	}
	return out
}

// orEmpty is s, or [] for nil (so that JSON shows [], not null).
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// stageLabel names the stage c starts in: its wave and failure domain, or
// "all at once, N at a time:".
func (r *diffReport) stageLabel(c nodeChange) string {
	switch {
	case c.Wave > 0 && r.domainKey != "":
		return fmt.Sprintf("wave %d, %s %s:", c.Wave, r.domainKey, c.Domain)
	case c.Wave > 0:
		return fmt.Sprintf("wave %d:", c.Wave)
	case r.domainKey != "":
		return fmt.Sprintf("%s %s:", r.domainKey, c.Domain)
	}
	return fmt.Sprintf("all at once, %d at a time:", r.maxParallel)
}

// waveOf is the wave (from 1) the node started after started others falls
// in; 0 without waves.
func waveOf(waves []int, started int) int {
	for i, end := range waves {
		if started < end {
			return i + 1
		}
	}
	if len(waves) > 0 {
		return len(waves)
	}
	return 0
}

// intentChanges lists the intents that differ between two node configs
// (view.ConfigDiff, as the dashboard's drawer shows them), in diff's
// words: added, removed, or changed with the fields that change; full adds
// the old and new spec as JSON.
func intentChanges(from, to *sluicev1.NodeConfig, full bool) []intentChange {
	words := map[string]string{"+": "added", "-": "removed", "~": "changed"}
	out := []intentChange{}
	for _, c := range view.ConfigDiff(from, to) {
		ic := intentChange{Intent: c.Intent, Op: words[c.Op]}
		if c.Op == "~" {
			ic.Fields = view.SpecFields(c.From, c.To)
		}
		if full && c.Op == "~" {
			ic.From = json.RawMessage(c.From)
		}
		if full && c.To != "" {
			ic.To = json.RawMessage(c.To)
		}
		out = append(out, ic)
	}
	return out
}
