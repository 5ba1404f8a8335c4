package cli

import (
	"bytes"
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
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) diffCommand() *cobra.Command {
	var files []string
	var sf strategyFlags
	cmd := &cobra.Command{
		Use:   "diff -f FILE|DIR [-f ...] [strategy flags]",
		Short: "Show what applying the files would change, storing nothing",
		Long: `A dry run of 'sluice apply': the configurator checks the files exactly as
it checks an apply (the rules, the stored intents, registry ownership,
intents marked for deletion, configs recorded invalid, sizes) and answers
what it would do, storing nothing. For the revision it would cut, the diff
shows the intents created and updated, every present node whose config would
change with the intents that change in it, and the waves and failure domains
the strategy would take them in.

Exit 0 when apply would be accepted (or change nothing), 1 when it would be
refused (the configurator's answer says why), 2 for usage errors. What the
coordinator does can still differ if nodes join or leave, or the stored
intents change, before the apply.`,
		Example: "  sluice diff -f /tmp/my-intents\n  sluice apply -f /tmp/my-intents --dry-run --first-wave 1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("nothing to compare: name intent files or directories with -f")}
			}
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			intents, err := intent.ParseFiles(files...)
			if err != nil {
				fmt.Fprintln(a.streams.Err, err)
				return silentExit(1)
			}
			return a.dryRun(cmd.Context(), intents, strategy)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file or directory (repeatable)")
	sf.register(cmd.Flags())
	return cmd
}

// dryRun prints what applying intents with strategy would do (see
// diffCommand). The verdict is the configurator's own (a dry-run apply);
// the per-node picture is drawn here from the same plan (pkg/change).
func (a *app) dryRun(ctx context.Context, intents []*sluicev1.Intent, strategy *sluicev1.Strategy) error {
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	verdict, err := apiclient.Apply(ctx, nc, &sluicev1.ApplyRequest{Intents: intents, Strategy: strategy, Source: contract.SourceAPI, DryRun: true})
	if err != nil {
		var apiErr *apiclient.Error
		if errors.As(err, &apiErr) && len(apiErr.FieldErrors) == 0 && apiErr.Code != contract.ErrCodeUnavailable {
			fmt.Fprintf(a.streams.Err, "apply would be refused: %s\n", apiErr.Description)
			return silentExit(1)
		}
		return a.rejected(err)
	}
	w := a.streams.Out
	if !verdict.GetChanged() {
		fmt.Fprintf(w, "no change: revision %s is already the head (nothing was stored: dry run)\n", short(verdict.GetRevision()))
		return nil
	}
	kv := map[string]jetstream.KeyValue{}
	for _, name := range []string{contract.BucketIntents, contract.BucketRevisions, contract.BucketNodes, contract.BucketNodeConfigs, contract.BucketFingerprints} {
		if kv[name], err = bucket(ctx, js, name); err != nil {
			return err
		}
	}
	stored, err := store.New(kv[contract.BucketIntents], func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).List(ctx, ">")
	if err != nil {
		return fmt.Errorf("read the stored intents: %w", err)
	}
	live := map[string]change.Stored{}
	for _, e := range stored {
		if e.Err == nil && !contract.IsControlKey(e.Key) {
			live[e.Key] = e
		}
	}
	set := change.Apply(live, nil, intents).Set
	rev := &sluicev1.Revision{Id: render.RevisionID(set), Intents: set}
	head, err := store.New(kv[contract.BucketRevisions], func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read the head: %w", err)
	}
	fmt.Fprintf(w, "revision %s (the head is %s): %d intent(s) created, %d updated, %d unchanged\n", short(verdict.GetRevision()),
		orNone(short(head.Value.GetRevision())), len(verdict.GetCreated()), len(verdict.GetUpdated()), len(verdict.GetUnchanged()))
	for _, id := range verdict.GetCreated() {
		fmt.Fprintf(w, "  + %s\n", id)
	}
	for _, id := range verdict.GetUpdated() {
		fmt.Fprintf(w, "  ~ %s\n", id)
	}
	if rev.GetId() != verdict.GetRevision() {
		// An unreadable stored intent the configurator keeps in force, or
		// a change between its answer and these reads.
		fmt.Fprintf(w, "note: the nodes below are drawn from revision %s as read here, not %s as the configurator answered; run it again for a fresh picture\n",
			short(rev.GetId()), short(verdict.GetRevision()))
	}

	nodes, err := store.New(kv[contract.BucketNodes], func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return fmt.Errorf("read the nodes: %w", err)
	}
	desired := map[string]*sluicev1.DesiredConfig{}
	configs, err := store.New(kv[contract.BucketNodeConfigs], func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return fmt.Errorf("read the desired configs: %w", err)
	}
	for _, c := range configs {
		if node, which, ok := contract.NodeOfConfigKey(c.Key); ok && which == "desired" && c.Err == nil {
			desired[node] = c.Value
		}
	}
	var refused map[string]change.Hit
	if !strategy.GetRetryInvalid() {
		records, err := store.New(kv[contract.BucketFingerprints], func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).List(ctx, ">")
		if err != nil {
			return fmt.Errorf("read the invalid fingerprints: %w", err)
		}
		refused = map[string]change.Hit{}
		for _, h := range change.KnownBad(rev, nodes, change.Known(records)) {
			refused[h.Node] = h
		}
	}

	type nodeChange struct {
		node, domain string
		from, to     *sluicev1.NodeConfig
		fpFrom, fpTo string
	}
	var changes []nodeChange
	var lines []string // refused nodes
	same := 0
	plan, err := contract.ResolveStrategy(strategy, len(nodes))
	if err != nil {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		cfg := render.NodeConfig(rev, n.Value.GetLabels())
		fp := render.Fingerprint(cfg)
		cur := desired[n.Key]
		if cur.GetFingerprint() == fp {
			same++
			continue
		}
		if h, ok := refused[n.Key]; ok {
			lines = append(lines, h.Describe(100))
			continue
		}
		changes = append(changes, nodeChange{node: n.Key, domain: contract.DomainSortKey(plan.DomainKey, n.Value.GetLabels()),
			from: cur.GetConfig(), to: cfg, fpFrom: cur.GetFingerprint(), fpTo: fp})
	}
	fmt.Fprintf(w, "nodes: %d present, %d change, %d unchanged, %d refused\n", len(nodes), len(changes), same, len(lines))
	for _, warning := range selectsNone(intents, labelsOf(nodes)) {
		fmt.Fprintln(a.streams.Err, warning)
	}
	slices.SortFunc(changes, func(a, b nodeChange) int { return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.node, b.node)) })
	for _, c := range changes {
		fmt.Fprintf(w, "  %s  %s → %s\n", c.node, orNone(short(c.fpFrom)), short(c.fpTo))
		printConfigDiff(w, c.from, c.to)
	}
	if len(lines) > 0 {
		// Only when the stored fingerprints changed after the
		// configurator's answer: it refuses these itself.
		fmt.Fprintf(w, "refused (recorded invalid since the configurator answered; apply would refuse it now):\n")
		for _, r := range lines {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	if len(changes) > 0 {
		fmt.Fprintf(w, "plan: %s\n", plan.Describe())
		stage, started, domain := 0, 0, ""
		var line []string
		flush := func() {
			if len(line) > 0 {
				fmt.Fprintf(w, "  %s\n", strings.Join(line, " "))
			}
			line = nil
		}
		for i, c := range changes {
			wave := waveOf(plan.Waves, started)
			if i == 0 || wave != stage || (plan.DomainKey != "" && c.domain != domain) {
				flush()
				stage, domain = wave, c.domain
				label := "all at once, " + fmt.Sprint(plan.MaxParallel) + " at a time:"
				switch {
				case plan.Waves != nil && plan.DomainKey != "":
					label = fmt.Sprintf("wave %d, %s %s:", wave, plan.DomainKey, contract.DomainLabel(c.domain))
				case plan.Waves != nil:
					label = fmt.Sprintf("wave %d:", wave)
				case plan.DomainKey != "":
					label = fmt.Sprintf("%s %s:", plan.DomainKey, contract.DomainLabel(c.domain))
				}
				line = append(line, label)
			}
			line = append(line, c.node)
			started++
		}
		flush()
	}
	fmt.Fprintln(w, "nothing was stored (dry run)")
	if len(lines) > 0 {
		return silentExit(1)
	}
	return nil
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

// printConfigDiff lists the intents that differ between two node configs:
// + added, - removed, ~ changed (old → new spec, as compact JSON).
func printConfigDiff(w io.Writer, from, to *sluicev1.NodeConfig) {
	index := func(c *sluicev1.NodeConfig) map[string]*sluicev1.Intent {
		m := map[string]*sluicev1.Intent{}
		for _, in := range c.GetIntents() {
			m[intent.ID(in)] = in
		}
		return m
	}
	old, nu := index(from), index(to)
	ids := make([]string, 0, len(old)+len(nu))
	for id := range old {
		ids = append(ids, id)
	}
	for id := range nu {
		if _, ok := old[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		o, n := old[id], nu[id]
		switch {
		case o == nil:
			fmt.Fprintf(w, "      + %s %s\n", id, compactJSON(n))
		case n == nil:
			fmt.Fprintf(w, "      - %s\n", id)
		case !proto.Equal(o, n):
			fmt.Fprintf(w, "      ~ %s %s → %s\n", id, compactJSON(o), compactJSON(n))
		}
	}
}

// compactJSON is an intent's spec as one line of JSON.
func compactJSON(in *sluicev1.Intent) string {
	in = proto.Clone(in).(*sluicev1.Intent)
	in.Name = ""
	b, err := store.Marshal(in)
	if err != nil {
		return "?"
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}
