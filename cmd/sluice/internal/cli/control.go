package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Operator requests go into the control bucket, where the leading
// coordinator acts on them (now, or when a coordinator next leads); the
// command then waits, up to --wait, until the coordinator's own records show
// it acted.

// defaultControlWait is how long abort and forgive wait for the coordinator.
const defaultControlWait = 15 * time.Second

func (a *app) rolloutAbortCommand() *cobra.Command {
	var noRevert bool
	var reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "abort [ROLLOUT-ID]",
		Short: "Stop the running rollout and revert the nodes it touched",
		Long: `Stop a running rollout (the active one without an id): it starts no more
nodes, every node it touched is put back on its backup with the strategy's
concurrency limit, and it ends ABORTED with your name and reason. With
--no-revert it ends once the nodes in flight have reported, and every node
keeps what it runs.

The request is stored in the control bucket and the leading coordinator acts
on it; the command waits up to --wait for that. Exit 0 once the coordinator
acted, 1 if it did not within --wait (the request stays stored and takes
effect when a coordinator leads) or there is nothing to abort.`,
		Example: "  sluice rollout abort --reason 'wrong VLAN'\n  sluice rollout abort 7-4ff435e62c9d --no-revert",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return a.rolloutAbort(cmd.Context(), id, noRevert, reason, wait)
		},
	}
	cmd.Flags().BoolVar(&noRevert, "no-revert", false, "leave touched nodes on what they run")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout and its events")
	cmd.Flags().DurationVar(&wait, "wait", defaultControlWait, "how long to wait for the coordinator to act")
	return cmd
}

func (a *app) rolloutAbort(ctx context.Context, id string, noRevert bool, reason string, wait time.Duration) error {
	sn, err := a.bind(ctx, contract.BucketRollouts, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	rolloutsKV, controlKV := sn.kv[contract.BucketRollouts], sn.kv[contract.BucketControl]
	records := store.New(rolloutsKV, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if id, err = runningRollout(ctx, rolloutsKV, id, "nothing to abort"); err != nil {
		return err
	}
	var r store.Entry[*sluicev1.Rollout]
	req := &sluicev1.AbortRequest{Rollout: id, NoRevert: noRevert, Reason: reason, By: a.operator(), At: timestamppb.New(a.now())}
	if err := putRequest(ctx, store.New(controlKV, func() *sluicev1.AbortRequest { return &sluicev1.AbortRequest{} }), contract.AbortKey(id), req); err != nil {
		return err
	}
	acted, err := waitFor(ctx, wait, func(ctx context.Context) (bool, error) {
		e, err := records.Get(ctx, id)
		if err != nil {
			return false, err
		}
		r = e
		return e.Value.GetAbortedBy() != nil || contract.Terminal(e.Value.GetPhase()), nil
	})
	if err != nil {
		return err
	}
	if !acted {
		return &ExitError{Code: 1, Err: fmt.Errorf("abort of rollout %s requested, but no coordinator acted on it within %s; "+
			"the request stays stored and takes effect when a coordinator leads (is one running?)", id, wait)}
	}
	fmt.Fprintln(a.streams.Out, abortLine(id, r.Value, noRevert))
	return nil
}

// abortLine is what 'rollout abort' says of rec once a coordinator acted on
// the abort, its counts contract.TallyOf's: the nodes in flight that
// finish, or every touched node its revert puts back (reverting, reverted
// and revert failed), and those that never start.
func abortLine(id string, rec *sluicev1.Rollout, noRevert bool) string {
	t := contract.TallyOf(rec)
	notStarted := ""
	if n := t.N(contract.CountPending) + t.N(contract.CountNotStarted); n > 0 {
		notStarted = fmt.Sprintf(", %d not started", n)
	}
	switch {
	case rec.GetAbortedBy() == nil:
		return fmt.Sprintf("rollout %s ended %s before the abort took effect: %s", id, rolloutPhase(rec.GetPhase()), rec.GetReason())
	case contract.Terminal(rec.GetPhase()):
		return fmt.Sprintf("rollout %s aborted: %s", id, rec.GetReason())
	case noRevert:
		return fmt.Sprintf("rollout %s is stopping: no more nodes start, %d in flight finish%s, nothing is reverted — watch with: sluice rollout status --watch",
			id, t.N(contract.CountInProgress), notStarted)
	}
	return fmt.Sprintf("rollout %s is aborting: reverting %d touched node(s)%s — watch with: sluice rollout status --watch",
		id, t.Touched, notStarted)
}

func (a *app) fingerprintCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fingerprint",
		Short: "Manage configs recorded invalid",
	}
	cmd.AddCommand(a.fingerprintForgiveCommand())
	return cmd
}

func (a *app) fingerprintForgiveCommand() *cobra.Command {
	var reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "forgive FINGERPRINT --reason TEXT",
		Short: "Take a fingerprint out of the invalid set, on purpose",
		Long: `Forgive a config recorded invalid, so that a rollout to it is no longer
refused (for example after fixing what made it fail). FINGERPRINT may be the
12-character prefix 'sluice get fingerprints' shows. The record stays, marked
with who forgave it, when and why; a FingerprintForgiven event says so. If the
config fails again, it is recorded invalid again.

The request is stored in the control bucket and the leading coordinator acts
on it; the command waits up to --wait for that (exit 1 if it did not).`,
		Example: "  sluice fingerprint forgive 8c158f2eaa0a --reason 'uplink replaced on node-03'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return &ExitError{Code: ExitUsage, Err: errors.New("--reason is required: say why the config may be tried again")}
			}
			return a.forgive(cmd.Context(), args[0], reason, wait)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it may be tried again (required)")
	cmd.Flags().DurationVar(&wait, "wait", defaultControlWait, "how long to wait for the coordinator to act")
	return cmd
}

func (a *app) forgive(ctx context.Context, prefix, reason string, wait time.Duration) error {
	sn, err := a.bind(ctx, contract.BucketFingerprints, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	fpKV, controlKV := sn.kv[contract.BucketFingerprints], sn.kv[contract.BucketControl]
	records := store.New(fpKV, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	fp, err := resolveFingerprint(ctx, records, prefix)
	if err != nil {
		return err
	}
	rec, err := records.Get(ctx, fp)
	if err != nil {
		return fmt.Errorf("read fingerprint %s: %w", fp, err)
	}
	if fg := rec.Value.GetForgiven(); fg != nil {
		fmt.Fprintf(a.streams.Out, "fingerprint %s was already forgiven by %s %s ago: %s\n", short(fp), fg.GetBy(),
			age(a.now(), fg.GetAt()), orNone(fg.GetReason()))
		return nil
	}
	req := &sluicev1.ForgiveRequest{Fingerprint: fp, Reason: reason, By: a.operator(), At: timestamppb.New(a.now()), RecordedAt: rec.Value.GetTime()}
	if err := putRequest(ctx, store.New(controlKV, func() *sluicev1.ForgiveRequest { return &sluicev1.ForgiveRequest{} }), contract.ForgiveKey(fp), req); err != nil {
		return err
	}
	acted, err := waitFor(ctx, wait, func(ctx context.Context) (bool, error) {
		e, err := records.Get(ctx, fp)
		if err != nil {
			return false, err
		}
		rec = e
		return e.Value.GetForgiven() != nil || !e.Value.GetTime().AsTime().Equal(req.GetRecordedAt().AsTime()), nil
	})
	if err != nil {
		return err
	}
	if !acted {
		return &ExitError{Code: 1, Err: fmt.Errorf("forgiving %s requested, but no coordinator acted on it within %s; "+
			"the request stays stored and takes effect when a coordinator leads (is one running?)", short(fp), wait)}
	}
	f := rec.Value
	if f.GetForgiven() == nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("fingerprint %s failed again meanwhile (%s on %s, check %s) and stays invalid",
			short(fp), f.GetCause(), f.GetNode(), f.GetCheck())}
	}
	fmt.Fprintf(a.streams.Out, "fingerprint %s forgiven: rollouts to it are no longer refused; it was recorded invalid (%s) on %s by check %s: %s\n",
		short(fp), orNone(f.GetCause()), orNone(f.GetNode()), orNone(f.GetCheck()), oneLine(f.GetOutput(), 120))
	return nil
}

// resolveFingerprint finds the one recorded fingerprint starting with prefix.
func resolveFingerprint(ctx context.Context, records *store.Store[*sluicev1.InvalidFingerprint], prefix string) (string, error) {
	if len(prefix) < 6 {
		return "", &ExitError{Code: ExitUsage, Err: fmt.Errorf("fingerprint %q: give at least 6 characters (sluice get fingerprints shows 12)", prefix)}
	}
	keys, err := records.Keys(ctx)
	if err != nil {
		return "", fmt.Errorf("list fingerprints: %w", err)
	}
	var match []string
	for _, k := range keys {
		if !contract.IsControlKey(k) && strings.HasPrefix(k, prefix) {
			match = append(match, k)
		}
	}
	sort.Strings(match)
	switch len(match) {
	case 0:
		return "", &ExitError{Code: 1, Err: fmt.Errorf("no recorded fingerprint starts with %s (sluice get fingerprints lists them)", prefix)}
	case 1:
		return match[0], nil
	}
	return "", &ExitError{Code: 1, Err: fmt.Errorf("%d fingerprints start with %s (%s): give more characters", len(match), prefix, strings.Join(match, ", "))}
}

// putRequest stores an operator's request (compare-and-set, replacing an
// earlier request for the same thing).
func putRequest[T proto.Message](ctx context.Context, st *store.Store[T], key string, req T) error {
	if _, err := st.Mutate(ctx, key, func(T) (T, error) { return req, nil }); err != nil {
		return fmt.Errorf("store the request in %s/%s: %w", contract.BucketControl, key, err)
	}
	return nil
}

// waitFor polls done until it says true, wait passes or ctx ends.
func waitFor(ctx context.Context, wait time.Duration, done func(context.Context) (bool, error)) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		ok, err := done(ctx)
		if err != nil || ok {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// operator names who asks: a.by, else this process's user@host.
func (a *app) operator() string {
	if a.by != "" {
		return a.by
	}
	return operator()
}

// operator names who asks: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		return name
	}
	return name + "@" + host
}
