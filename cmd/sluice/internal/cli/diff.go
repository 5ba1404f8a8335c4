package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

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
		Long: `A dry run of 'sluice apply': for the revision these files would produce
(merged into the stored intents as apply merges them), it shows the intents
created and updated, every present node whose config would change with the
intents that change in it, the nodes that would be refused because their new
config is recorded invalid, and the waves and failure domains the strategy
would take them in. Nothing is sent to the configurator or stored.

Exit 0 when apply would be accepted (or change nothing), 1 when it would be
refused (an invalid intent, or a config recorded invalid), 2 for usage errors.
What the coordinator does can still differ if nodes join or leave, or the
stored intents change, before the apply.`,
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

// dryRun prints what applying intents with strategy would do (see diffCommand).
func (a *app) dryRun(ctx context.Context, intents []*sluicev1.Intent, strategy *sluicev1.Strategy) error {
	if errs := intent.Validate(intents); len(errs) > 0 {
		printFieldErrors(a.streams.Err, errs)
		return silentExit(1)
	}
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
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
	live := map[string]*sluicev1.Intent{}
	for _, e := range stored {
		if e.Err == nil && !contract.IsControlKey(e.Key) && !e.Value.GetMarkedForDeletion() {
			live[e.Key] = e.Value.GetIntent()
		}
	}
	var created, updated []string
	merged := maps.Clone(live)
	for _, in := range render.Sorted(intents) {
		key := intent.Key(in)
		switch cur, ok := live[key]; {
		case !ok:
			created = append(created, intent.ID(in))
		case !proto.Equal(cur, in):
			updated = append(updated, intent.ID(in))
		}
		merged[key] = in
	}
	set := make([]*sluicev1.Intent, 0, len(merged))
	for _, in := range merged {
		set = append(set, in)
	}
	render.Sort(set)
	if errs := intent.Validate(set); len(errs) > 0 {
		printFieldErrors(a.streams.Err, errs)
		return silentExit(1)
	}
	rev := &sluicev1.Revision{Id: render.RevisionID(set), Intents: set}
	head, err := store.New(kv[contract.BucketRevisions], func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read the head: %w", err)
	}
	w := a.streams.Out
	if head.Value.GetRevision() == rev.GetId() {
		fmt.Fprintf(w, "no change: revision %s is already the head (nothing was stored: dry run)\n", short(rev.GetId()))
		return nil
	}
	fmt.Fprintf(w, "revision %s (the head is %s): %d intent(s) created, %d updated, %d unchanged\n", short(rev.GetId()),
		orNone(short(head.Value.GetRevision())), len(created), len(updated), len(intents)-len(created)-len(updated))
	for _, id := range created {
		fmt.Fprintf(w, "  + %s\n", id)
	}
	for _, id := range updated {
		fmt.Fprintf(w, "  ~ %s\n", id)
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
	bad, err := store.New(kv[contract.BucketFingerprints], func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).List(ctx, ">")
	if err != nil {
		return fmt.Errorf("read the invalid fingerprints: %w", err)
	}
	known := map[string]*sluicev1.InvalidFingerprint{}
	for _, f := range bad {
		if f.Err == nil && !contract.IsControlKey(f.Key) && f.Value.GetForgiven() == nil {
			known[f.Key] = f.Value
		}
	}

	type change struct {
		node, domain string
		from, to     *sluicev1.NodeConfig
		fpFrom, fpTo string
	}
	var changes []change
	var refused []string
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
		if f := known[fp]; f != nil && !strategy.GetRetryInvalid() {
			refused = append(refused, fmt.Sprintf("%s → %s is recorded invalid (%s on %s in rollout %s, check %s: %s)", n.Key, short(fp),
				orNone(f.GetCause()), orNone(f.GetNode()), orNone(f.GetRollout()), orNone(f.GetCheck()), oneLine(f.GetOutput(), 100)))
			continue
		}
		changes = append(changes, change{node: n.Key, domain: contract.DomainSortKey(plan.DomainKey, n.Value.GetLabels()),
			from: cur.GetConfig(), to: cfg, fpFrom: cur.GetFingerprint(), fpTo: fp})
	}
	fmt.Fprintf(w, "nodes: %d present, %d change, %d unchanged, %d refused\n", len(nodes), len(changes), same, len(refused))
	for _, warning := range selectsNone(intents, labelsOf(nodes)) {
		fmt.Fprintln(a.streams.Err, warning)
	}
	slices.SortFunc(changes, func(a, b change) int { return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.node, b.node)) })
	for _, c := range changes {
		fmt.Fprintf(w, "  %s  %s → %s\n", c.node, orNone(short(c.fpFrom)), short(c.fpTo))
		printConfigDiff(w, c.from, c.to)
	}
	if len(refused) > 0 {
		fmt.Fprintf(w, "refused (the rollout would stop before touching any node; apply refuses it now):\n")
		for _, r := range refused {
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
	if len(refused) > 0 {
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
