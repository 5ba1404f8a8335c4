package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) applyCommand() *cobra.Command {
	var files []string
	var sf strategyFlags
	var dry, strict bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR [-f ...]",
		Short: "Store intents and roll the new revision out",
		Long: fmt.Sprintf(`Apply parses intent files (a directory stands for its *.yaml, *.yml and *.json
files) and sends them to the configurator in one all-or-nothing request. If the
set of intents changes, a new revision becomes the head and the
rollout-coordinator rolls it out.

The strategy flags say how the revision is rolled out (docs/rollouts.md). They
are checked before anything is sent: a bad value or combination is a usage
error naming the flag, with exit code 2.

If any intent is invalid, every problem is printed as <intent>: <field>: <rule>,
nothing is stored, and the exit code is 1.

Before a revision is cut, the configurator runs the fleet verifier on the
whole set the apply produces, the present nodes and the strategy
(docs/intents.md, "Fleet rules"): an error refuses the apply (exit 1,
nothing stored); a warning is printed and the apply goes on, unless
--strict makes warnings refuse too. 'sluice verify' runs the same rules on
files alone.

Content that is already the head changes nothing, and the strategy flags
given with it are not used: apply says so.

Limits (docs/intents.md, "Apply limits"): an intent file of at most %d MiB,
at most %d intents in one apply, and a request that fits the NATS server's
max_payload. Anything larger is refused before it is sent, with exit code 1.`,
			intent.MaxFileSize>>20, intent.MaxIntentsPerApply),
		Example: `  sluice apply -f examples/
  sluice apply -f tenant-a.yaml --max-parallel 10%
  sluice apply -f tenant-a.yaml --first-wave 1 --bake-time 2m --failure-domain zone --failure-budget 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("nothing to apply: name intent files or directories with -f")}
			}
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			intents, where, err := intent.ParseFilesWhere(files...)
			if err != nil {
				fmt.Fprintln(a.streams.Err, err)
				fmt.Fprintln(a.streams.Err, "nothing was sent: fix the files above and apply again")
				return silentExit(1)
			}
			if len(intents) == 0 {
				return errors.New("the files hold no intents")
			}
			if err := intent.CheckApplySize(len(intents)); err != nil {
				return fmt.Errorf("%s: %w; nothing was sent", strings.Join(files, ", "), err)
			}
			if dry {
				return a.dryRun(cmd.Context(), intents, where, strategy, strict)
			}
			nc, err := a.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			resp, err := apiclient.Apply(cmd.Context(), nc, &sluicev1.ApplyRequest{
				Intents: intents, Strategy: strategy, Source: contract.SourceAPI, Strict: strict,
			})
			if err != nil {
				return a.rejectedAt(err, where)
			}
			if len(resp.GetErrors()) > 0 {
				printFieldErrors(a.streams.Err, resp.GetErrors(), where)
				return silentExit(1)
			}
			printApplied(a.streams.Out, resp, strategy)
			printFindings(a.streams.Err, resp.GetFindings())
			for _, w := range selectsNone(intents, a.presentLabels(cmd.Context())) {
				fmt.Fprintln(a.streams.Err, w)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file or directory (repeatable)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "show what would change, as 'sluice diff' does, and store nothing")
	cmd.Flags().BoolVar(&strict, "strict", false, "the fleet verifier's warnings refuse the apply as its errors do")
	sf.register(cmd.Flags())
	return cmd
}

func (a *app) deleteCommand() *cobra.Command {
	var sf strategyFlags
	cmd := &cobra.Command{
		Use:   "delete KIND NAME | KIND/NAME",
		Short: "Delete an intent and roll the revision without it out",
		Long: `Delete marks an intent for deletion: the next revision leaves it out and is
rolled out like any other; the reaper removes the intent once no revision in
use refers to it. KIND is Layer2Network, VRFRoute or RoutingTable, in any case.
The strategy flags are those of apply, checked the same way.`,
		Example: "  sluice delete layer2network tenant-a\n  sluice delete routingtable/mgmt",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kindArg, name := "", ""
			if len(args) == 2 {
				kindArg, name = args[0], args[1]
			} else if k, n, ok := strings.Cut(args[0], "/"); ok {
				kindArg, name = k, n
			} else {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("name the intent as KIND NAME or KIND/NAME, not %q", args[0])}
			}
			kind, err := intent.ParseKind(kindArg)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			nc, err := a.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			resp, err := apiclient.Delete(cmd.Context(), nc, &sluicev1.DeleteRequest{
				Kind: kind, Name: name, Strategy: strategy,
			})
			if err != nil {
				return a.rejected(err)
			}
			fmt.Fprintf(a.streams.Out, "%s marked for deletion\n", intent.IDOf(kind, name))
			printRevision(a.streams.Out, resp.GetRevision(), resp.GetGeneration(), resp.GetChanged(), resp.GetWaitsFor(), strategy)
			printFindings(a.streams.Err, resp.GetFindings())
			return nil
		},
	}
	sf.register(cmd.Flags())
	return cmd
}

// rejected explains an error from the configurator's API.
func (a *app) rejected(err error) error { return a.rejectedAt(err, nil) }

// rejectedAt is rejected, naming where in the files (where) each field
// error's intent is declared.
func (a *app) rejectedAt(err error, where *intent.Where) error {
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) && len(apiErr.Findings) > 0 {
		// The fleet verifier refused: each finding, then the summary.
		printFindings(a.streams.Err, apiErr.Findings)
		fmt.Fprintf(a.streams.Err, "rejected: %s\n", apiErr.Description)
		return silentExit(1)
	}
	if errors.As(err, &apiErr) && len(apiErr.FieldErrors) > 0 {
		for _, fe := range apiErr.FieldErrors {
			fmt.Fprintln(a.streams.Err, where.Format(fe))
		}
		// The configurator lists at most the first 100 problems; its
		// description counts them all and says what was stored.
		if apiErr.Description != "" {
			fmt.Fprintf(a.streams.Err, "rejected: %s\n", apiErr.Description)
		} else {
			printRejected(a.streams.Err, len(apiErr.FieldErrors))
		}
		return silentExit(1)
	}
	return err
}

// printFieldErrors lists validation problems, one per line, each after
// where its intent is declared in the files (where; nil: not said), and
// says that the request changed nothing.
func printFieldErrors(w io.Writer, errs []*sluicev1.FieldError, where *intent.Where) {
	for _, fe := range errs {
		fmt.Fprintln(w, where.Format(fe))
	}
	printRejected(w, len(errs))
}

// printFindings prints the fleet verifier's findings, one line each
// ("warning vrf-unknown: …; fix: …").
func printFindings(w io.Writer, fs []*sluicev1.Finding) {
	for _, f := range fs {
		fmt.Fprintln(w, contract.EscapeLine(verify.Format(f)))
	}
}

func printRejected(w io.Writer, n int) {
	problems := "problems"
	if n == 1 {
		problems = "problem"
	}
	fmt.Fprintf(w, "rejected (%d %s): nothing was stored\n", n, problems)
}

// printApplied says what an apply changed, intent by intent, then the revision.
func printApplied(w io.Writer, resp *sluicev1.ApplyResponse, st *sluicev1.Strategy) {
	for _, x := range []struct {
		ids  []string
		verb string
	}{{resp.GetCreated(), "created"}, {resp.GetUpdated(), "updated"}, {resp.GetUnchanged(), "unchanged"}} {
		for _, id := range x.ids {
			fmt.Fprintf(w, "%s %s\n", id, x.verb)
		}
	}
	printRevision(w, resp.GetRevision(), resp.GetGeneration(), resp.GetChanged(), resp.GetWaitsFor(), st)
}

func printRevision(w io.Writer, revision string, generation uint64, changed bool, waitsFor string, st *sluicev1.Strategy) {
	switch {
	case !changed:
		fmt.Fprintln(w, noChange(revision, waitsFor, st))
	case waitsFor != "" && contract.Supersedes(st):
		fmt.Fprintf(w, "revision %s (generation %d): rollout %s starts no more nodes and stops once its in-flight nodes settle; then this one starts — watch with: sluice rollout status --watch\n",
			short(revision), generation, waitsFor)
	case waitsFor != "":
		fmt.Fprintf(w, "revision %s (generation %d): queued — it starts when rollout %s ends (--while-active supersede stops that one instead)\n",
			short(revision), generation, waitsFor)
	default:
		fmt.Fprintf(w, "revision %s (generation %d): rollout starting — watch with: sluice rollout status --watch\n",
			short(revision), generation)
	}
}

// noChange says that content already the head changes nothing: that the
// strategy flags given (st set) were not used, and, when the head's rollout
// is queued, which rollout it waits for.
func noChange(revision, waitsFor string, st *sluicev1.Strategy) string {
	msg := fmt.Sprintf("no change: revision %s is already the head", short(revision))
	if st != nil {
		msg += "; the strategy flags were not used (a strategy is used only when the head moves)"
	}
	if waitsFor != "" {
		msg += fmt.Sprintf("; its rollout is queued: it starts when rollout %s ends", waitsFor)
	}
	return msg
}

// strategyFlags are the rollout strategy flags of apply and delete;
// docs/rollouts.md explains each field. Each flag is named for its field
// (strategy.bakeTime is --bake-time), so a rule broken names its flag.
type strategyFlags struct {
	maxParallel, failureDomain, failureBudget string
	whileActive                               string
	firstWave, maxUnprovenDomains, bakeChecks uint32
	waveGrowth                                float64
	bake, bakeCheckEvery, apply, pickup       time.Duration
	progress                                  time.Duration
	retryInvalid                              bool
	skipIncompatible                          bool
	windows                                   []string
	gates                                     []string
	gatesFile                                 string
}

func (f *strategyFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.maxParallel, "max-parallel", "", `nodes configured at once: a count ("5") or a share of the nodes ("10%"); default 1`)
	fs.Uint32Var(&f.firstWave, "first-wave", 0, "nodes in the first wave (the canary); 0: no waves")
	fs.Float64Var(&f.waveGrowth, "wave-growth", 0, fmt.Sprintf("each next wave is this many times the previous, from 1 to %d (default %g with --first-wave)", intent.MaxWaveGrowth, contract.DefaultWaveGrowth))
	fs.DurationVar(&f.bake, "bake-time", 0, "pause after each wave or failure domain before the next (needs --first-wave or --failure-domain)")
	fs.Uint32Var(&f.bakeChecks, "bake-checks", 0, "every node of a wave must pass its checks, re-run by its agent while it bakes, this many times before the next wave (needs --bake-time); a failing re-run fails the node")
	fs.DurationVar(&f.bakeCheckEvery, "bake-check-interval", 0, fmt.Sprintf("how often agents re-run their checks while baking (default %s with --bake-checks)", contract.DefaultBakeCheckInterval))
	fs.StringVar(&f.failureDomain, "failure-domain", "", "label key, e.g. zone: finish one value before starting the next")
	fs.Uint32Var(&f.maxUnprovenDomains, "max-unproven-domains", 0, "failure-domain values that may hold unproven nodes at once: a stage takes up to N values, the next start once all are done and baked (needs --failure-domain; default 1)")
	fs.StringVar(&f.failureBudget, "failure-budget", "", `failed nodes tolerated before stopping and reverting: a count ("2") or a percentage ("5%"); default 0`)
	fs.DurationVar(&f.apply, "apply-deadline", 0, fmt.Sprintf("per node, from its agent's acknowledgement to its report (default %s)", contract.DefaultApplyDeadline))
	fs.DurationVar(&f.pickup, "pickup-deadline", 0, fmt.Sprintf("per node that never acknowledges, from the write; at least the apply deadline (default %s)", contract.DefaultPickupDeadline))
	fs.DurationVar(&f.progress, "progress-deadline", 0, fmt.Sprintf("the whole rollout, counted while a coordinator runs it (default %s)", contract.DefaultProgressDeadline))
	fs.BoolVar(&f.retryInvalid, "retry-invalid", false, "roll out even fingerprints recorded as invalid, on purpose")
	fs.BoolVar(&f.skipIncompatible, "skip-incompatible", false, "skip the nodes whose agent is too old to read their config (e.g. --bake-checks needs a newer agent) instead of refusing the rollout")
	fs.StringArrayVar(&f.windows, "window", nil, `weekly window in which waves may start, e.g. "Mon-Fri 09:00-16:00 Europe/Berlin" (DAYS HH:MM-HH:MM [ZONE]; repeat for several); a wave in flight when it closes finishes`)
	fs.StringArrayVar(&f.gates, "gate", nil, `a gate the rollout must pass (repeatable): NAME=prometheus:URL?query=PROMQL&max=N[&min=N&lookback=5m&step=15s&min-samples=1&deadline=10m] before each next wave and the end, or NAME=prometheus:URL?alert=ALERT[,ALERT][&interval=10s&deadline=10m] all the time; values as written, no URL escaping`)
	fs.StringVar(&f.gatesFile, "gates-file", "", "a YAML file of gates the rollout must pass, as --gate takes them (docs/rollouts.md, \"Gates file\"); with --gate, both sets")
	fs.StringVar(&f.whileActive, "while-active", "", `while another rollout runs: "queue" (start when it ends; the default) or "supersede" (stop it once its in-flight nodes settle)`)
}

// strategy is the Strategy the flags set (nil for the defaults), or a usage
// error naming every flag whose value the strategy rules reject. The
// configurator checks the same rules; checking here first needs no server.
func (f *strategyFlags) strategy(fs *pflag.FlagSet) (*sluicev1.Strategy, error) {
	st := &sluicev1.Strategy{MaxParallel: f.maxParallel, FirstWave: f.firstWave, WaveGrowth: f.waveGrowth,
		FailureDomain: f.failureDomain, FailureBudget: f.failureBudget, RetryInvalid: f.retryInvalid, WhileActive: f.whileActive,
		SkipIncompatible: f.skipIncompatible, Windows: f.windows, MaxUnprovenDomains: f.maxUnprovenDomains, BakeChecks: f.bakeChecks}
	if f.gatesFile != "" {
		b, err := os.ReadFile(f.gatesFile)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--gates-file: %w", err)}
		}
		gates, err := intent.ParseGates(f.gatesFile, b)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--gates-file %w", err)}
		}
		st.Gates = append(st.Gates, gates...)
	}
	for _, spec := range f.gates {
		g, err := contract.ParseGate(spec)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--gate %q: %w", spec, err)}
		}
		st.Gates = append(st.Gates, g)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		dst  **durationpb.Duration
	}{{"bake-time", f.bake, &st.BakeTime}, {"bake-check-interval", f.bakeCheckEvery, &st.BakeCheckInterval}, {"apply-deadline", f.apply, &st.ApplyDeadline},
		{"pickup-deadline", f.pickup, &st.PickupDeadline}, {"progress-deadline", f.progress, &st.ProgressDeadline}} {
		if fs.Changed(d.flag) {
			*d.dst = durationpb.New(d.v)
		}
	}
	if err := strategyUsageError(intent.ValidateStrategy(st)); err != nil {
		return nil, err
	}
	if proto.Equal(st, &sluicev1.Strategy{}) {
		return nil, nil
	}
	return st, nil
}

// checkMaxParallel accepts "", a positive count or a percentage in 1..100.
func checkMaxParallel(s string) error {
	return strategyUsageError(intent.ValidateStrategy(&sluicev1.Strategy{MaxParallel: s}))
}

// strategyField matches a strategy field name in a validation message.
var strategyField = regexp.MustCompile(`strategy\.[a-zA-Z]+`)

// strategyUsageError turns strategy validation errors into one usage error
// that speaks of flags: "--bake-time: ... set --first-wave or --failure-domain".
func strategyUsageError(errs []*sluicev1.FieldError) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(errs))
	for _, fe := range errs {
		msgs = append(msgs, flagOf(fe.GetField())+": "+strategyField.ReplaceAllStringFunc(fe.GetRule(), flagOf))
	}
	if len(msgs) == 1 {
		return &ExitError{Code: ExitUsage, Err: errors.New(msgs[0])}
	}
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%d strategy flags are wrong:\n  %s", len(msgs), strings.Join(msgs, "\n  "))}
}

// flagOf is the flag of a strategy field: "strategy.bakeTime" is "--bake-time"
// (and strategy.windows, one per flag, is --window).
func flagOf(field string) string {
	if strings.TrimPrefix(field, "strategy.") == "windows" || strings.HasPrefix(field, "strategy.windows[") {
		return "--window"
	}
	if strings.TrimPrefix(field, "strategy.") == "gates" || strings.HasPrefix(field, "strategy.gates[") {
		return "--gate"
	}
	var b strings.Builder
	b.WriteString("--")
	for _, r := range strings.TrimPrefix(field, "strategy.") {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
