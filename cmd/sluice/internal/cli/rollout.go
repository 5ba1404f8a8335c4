package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) rolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Follow, list, abort, undo and retry rollouts",
	}
	cmd.AddCommand(a.rolloutStatusCommand(), a.rolloutHistoryCommand(), a.rolloutAbortCommand(), a.rolloutUndoCommand(), a.rolloutRetryCommand(),
		a.rolloutPauseCommand(), a.rolloutResumeCommand())
	return cmd
}

func (a *app) rolloutStatusCommand() *cobra.Command {
	var watch bool
	var output string
	cmd := &cobra.Command{
		Use:   "status [ROLLOUT-ID] [--watch] [-o wide|json|yaml]",
		Short: "Show a rollout's progress; --watch follows it to the end",
		Long: fmt.Sprintf(`Show a rollout's strategy, phase, wave or failure domain, counts, and a table
of the nodes that did not simply succeed: failed, timed out, refused and
skipped ones from the rollout's record and, without --watch, the nodes still
on their way or reverted, read from their desired config and status. Without
an id it shows the active rollout, else the newest one. If the head
revision's rollout has not started yet, --watch waits for it. When the head
is queued behind a running rollout (apply --while-active queue), that one is
shown with a line saying so, and --watch follows it to its end and then the
head's rollout to its own (the exit code is the head's).

With --watch the status is redrawn on every change until the rollout ends; when
the output is not a terminal, a line is printed each time the phase or the
counts change. Either way the last line states the outcome, or where the
rollout is, and why.

On a terminal a failure's message and its check's output are cut to fit (…);
-o wide, or output that is not a terminal, prints them whole (with --watch
too).

-o json and -o yaml print the rollout's record as 'sluice get rollouts' does:
{"items": [record], "unreadable": [...]} (no items while the head's rollout
has not started). They print it once, so they do not go with --watch.

Exit codes (so scripts can gate on a rollout):
  %[1]d    succeeded (without --watch: also still progressing or reverting, or the
       head's rollout has not started yet)
  %[2]d    the status could not be read, or its phase is unknown
  %[7]d    a usage error (a bad flag or argument): nothing was read
  %[4]d    rolled back: failures beyond the budget; touched nodes were reverted
  %[5]d    aborted: stopped by an operator (sluice rollout abort), superseded by a
       newer revision, refused before touching any node (a target fingerprint
       is recorded invalid), past its progress deadline, or its revision was
       deleted
  %[3]d    partially failed: some nodes failed, within the failure budget
  %[6]d  interrupted while watching`,
			ExitSucceeded, ExitUnreadable, ExitPartiallyFailed, ExitRolledBack, ExitAborted, exitInterrupted, ExitUsage),
		Example: "  sluice rollout status\n  sluice rollout status --watch && echo rolled out\n  sluice rollout status -o json",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.MaximumNArgs(1)(cmd, args); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, formatTable, formatWide, formatJSON, formatYAML); err != nil {
				return err
			}
			if watch && output != formatTable && output != formatWide {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("-o %s prints the record once: leave out --watch, or -o to follow the rollout", output)}
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return a.rolloutStatus(cmd.Context(), id, watch, output)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it ends")
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, wide (a failure's whole text on a terminal too), json or yaml")
	return cmd
}

// rolloutTarget is the rollout `rollout status` shows: a known id, or the
// first rollout of at least generation waitGen (the head's, not started yet).
// Both are set when the head is queued behind the running rollout id: that
// one is shown, and --watch follows the head's once it ends.
type rolloutTarget struct {
	id      string
	waitGen uint64
	head    *sluicev1.Head
	behind  bool // the head's rollout waits for rollout id
}

// queued says whether the head's rollout waits for the running one, id.
func (t rolloutTarget) queued() bool { return t.behind }

// queuedLine says that the head waits for the rollout shown.
func queuedLine(head *sluicev1.Head) string {
	return fmt.Sprintf("queued    revision %s (generation %d) is the head: its rollout starts when this one ends",
		short(head.GetRevision()), head.GetGeneration())
}

func (a *app) rolloutStatus(ctx context.Context, id string, watch bool, output string) error {
	sn, err := a.bind(ctx, contract.BucketRollouts)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, kv := sn.js, sn.kv[contract.BucketRollouts]
	if id == "" {
		// A lost store holds no rollout record: say why, not "apply first"
		// (an apply is refused until an operator recovers).
		if loss, err := readLoss(ctx, js); err == nil && loss != nil {
			return &ExitError{Code: ExitUnreadable, Err: errors.New(lossNote(loss))}
		}
	}
	rollouts := store.New(kv, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	target, bad, err := pickRollout(ctx, js, rollouts, id)
	if err != nil {
		return err
	}
	// A terminal gets the node table's cells cut to fit, unless -o wide.
	widths := widthsFor(a.streams.TTY && output != formatWide)
	if output == formatWide {
		output = formatTable
	}
	if watch {
		return a.watchRollout(ctx, js, rollouts, target, widths)
	}
	if target.id == "" {
		// A listing on stdout stays parseable: the news goes to stderr.
		w := a.streams.Out
		if output != formatTable {
			w = a.streams.Err
		}
		fmt.Fprintf(w, "revision %s (generation %d) is the head; its rollout has not started yet (is the rollout-coordinator running?)\n",
			short(target.head.GetRevision()), target.head.GetGeneration())
		if output == formatTable {
			return nil
		}
		return printListing(a.streams.Out, rolloutList{}, bad, output, a.now())
	}
	e, err := rollouts.Get(ctx, target.id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("rollout %s not found: list rollouts with `sluice get rollouts`", target.id)
	}
	if undecodable(err) {
		return fmt.Errorf("the record of rollout %s does not decode (%w): look at it with `nats kv get %s %s`",
			target.id, err, contract.BucketRollouts, target.id)
	}
	if err != nil {
		return err
	}
	if output != formatTable {
		if err := printListing(a.streams.Out, rolloutList{items: []*sluicev1.Rollout{e.Value}}, bad, output, a.now()); err != nil {
			return err
		}
		// The record stays parseable on stdout: the news goes to stderr.
		if note := a.noLeaderNote(ctx, js, e.Value); note != "" {
			fmt.Fprintln(a.streams.Err, note)
		}
		if target.queued() {
			fmt.Fprintln(a.streams.Err, queuedLine(target.head))
		}
		return exitFor(e.Value.GetPhase())
	}
	live, badLive, err := liveNodes(ctx, js, target.id)
	if err != nil {
		return err
	}
	lines := rolloutBlock(e.Value, live, a.now(), widths)
	if req, _, err := getOne(ctx, js, contract.BucketControl, contract.KeyPause, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} }); err == nil &&
		req.GetPaused() && !contract.Terminal(e.Value.GetPhase()) {
		// Before the outcome, which stays the last line.
		lines = append(lines[:len(lines)-1:len(lines)-1], "paused    the control plane is "+contract.DescribePause(req)+
			": no node operation starts until 'sluice resume' (sluice get pause shows who has stopped)", lines[len(lines)-1])
	}
	if note := a.noLeaderNote(ctx, js, e.Value); note != "" {
		lines = append(lines[:len(lines)-1:len(lines)-1], "leader    "+note, lines[len(lines)-1])
	}
	if target.queued() {
		lines = append(lines[:len(lines)-1:len(lines)-1], queuedLine(target.head), lines[len(lines)-1])
	}
	writeLines(a.streams.Out, lines)
	if bad = append(bad, badLive...); len(bad) > 0 {
		fmt.Fprintln(a.streams.Err, unreadableHint(len(bad)))
		for _, u := range bad {
			fmt.Fprintln(a.streams.Err, "  "+u.Cell())
		}
	}
	return exitFor(e.Value.GetPhase())
}

// pickRollout chooses the rollout to show: id when given, else the active
// one, else the newest; and when the head is newer than that, its rollout
// once it starts. Values it skipped because they do not decode are
// returned, to be mentioned.
func pickRollout(ctx context.Context, js jetstream.KeyValueManager, rollouts *store.Store[*sluicev1.Rollout], id string) (rolloutTarget, []unreadableKey, error) {
	if id != "" {
		return rolloutTarget{id: id}, nil, nil
	}
	var t rolloutTarget
	var gen uint64
	active, bad, err := getOne(ctx, js, contract.BucketRollouts, contract.KeyActive, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if err != nil {
		return t, nil, err
	}
	if active != nil {
		t.id, gen = active.GetRollout(), active.GetGeneration()
	} else {
		all, err := rollouts.List(ctx, ">")
		if err != nil {
			return t, nil, err
		}
		var rs []*sluicev1.Rollout
		for _, e := range all {
			switch {
			case e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied || contract.IsControlKey(e.Key):
			case e.Err != nil:
				bad = append(bad, newUnreadable(contract.BucketRollouts, e.Key, e.Err))
			default:
				rs = append(rs, e.Value)
			}
		}
		sortRollouts(rs)
		if len(rs) > 0 {
			t.id, gen = rs[0].GetId(), rs[0].GetGeneration()
		}
	}
	// An unreadable head only means the head's rollout cannot be waited for.
	head, badHead, err := getOne(ctx, js, contract.BucketRevisions, contract.KeyHead, func() *sluicev1.Head { return &sluicev1.Head{} })
	if err != nil {
		return t, nil, err
	}
	bad = append(bad, badHead...)
	if head != nil && head.GetGeneration() > gen {
		if active != nil {
			// A rollout runs and the head queues behind it: show the one
			// running; --watch then follows the head's.
			t.waitGen, t.head, t.behind = head.GetGeneration(), head, true
			return t, bad, nil
		}
		// The head moved after the rollout we found started: the operator
		// wants the head's rollout, which the coordinator is about to start.
		return rolloutTarget{waitGen: head.GetGeneration(), head: head}, bad, nil
	}
	if t.id == "" && len(bad) > 0 {
		return t, nil, fmt.Errorf("no readable rollout: %s (%s); name a rollout to show: sluice rollout status ID", bad[0].Cell(), unreadableHint(len(bad)))
	}
	if t.id == "" {
		return t, nil, errors.New("there are no rollouts yet: apply intents first (sluice apply -f examples/)")
	}
	return t, bad, nil
}

// liveNodes reads the nodes whose desired config (or revert) belongs to the
// rollout id, with their agents' status. A desired config that does not
// decode may belong to it: that node is listed as unreadable, as is a node
// whose status does not decode; both are also returned apart.
func liveNodes(ctx context.Context, js jetstream.KeyValueManager, id string) ([]liveNode, []unreadableKey, error) {
	kv, err := bucket(ctx, js, contract.BucketNodeConfigs)
	if err != nil {
		return nil, nil, err
	}
	// Node names may hold dots, so the keys are matched whole, not by a "*.desired" filter.
	configs, err := store.New(kv, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, ">")
	if err != nil {
		return nil, nil, err
	}
	var live []liveNode
	var bad []unreadableKey
	for _, e := range configs {
		node, _, ok := contract.NodeOfConfigKey(e.Key)
		if !ok || contract.IsControlKey(e.Key) || e.Key != contract.DesiredKey(node) {
			continue
		}
		switch {
		case e.Err != nil:
			u := newUnreadable(contract.BucketNodeConfigs, e.Key, e.Err)
			bad = append(bad, u)
			live = append(live, liveNode{desired: &sluicev1.DesiredConfig{Node: node}, unreadable: u.Cell()})
		case e.Value.GetRollout() == id:
			live = append(live, liveNode{desired: e.Value})
		}
	}
	if len(live) == 0 {
		return nil, bad, nil
	}
	statuses, badStatus, err := list(ctx, js, contract.BucketStatus, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if err != nil {
		return nil, nil, err
	}
	byNode := make(map[string]*sluicev1.NodeStatus, len(statuses))
	for _, st := range statuses {
		byNode[st.GetNode()] = st
	}
	unreadableStatus := make(map[string]unreadableKey, len(badStatus))
	for _, u := range badStatus {
		unreadableStatus[u.Key] = u
	}
	for i := range live {
		n := live[i].desired.GetNode()
		live[i].status = byNode[n]
		if u, ok := unreadableStatus[n]; ok && live[i].unreadable == "" {
			live[i].unreadable = u.Cell()
			bad = append(bad, u)
		}
	}
	return live, bad, nil
}

func writeLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
