package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) rolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Follow rollouts",
	}
	cmd.AddCommand(a.rolloutStatusCommand())
	return cmd
}

func (a *app) rolloutStatusCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status [ROLLOUT-ID]",
		Short: "Show a rollout's progress; --watch follows it to the end",
		Long: fmt.Sprintf(`Show a rollout's strategy, phase, wave or failure domain, counts, and a table
of the nodes that did not simply succeed: failed, timed out, refused and
skipped ones from the rollout's record and, without --watch, the nodes still
on their way or reverted, read from their desired config and status. Without
an id it shows the active rollout, else the newest one. If the head
revision's rollout has not started yet, --watch waits for it.

With --watch the status is redrawn on every change until the rollout ends.
Either way the last line states the outcome, or where the rollout is, and why.

Exit codes (so scripts can gate on a rollout):
  %d  succeeded (without --watch: also still progressing or reverting)
  %d  the status could not be read
  %d  partially failed: some nodes failed, within the failure budget
  %d  rolled back: failures beyond the budget; touched nodes were reverted
  %d  aborted: stopped by an operator or superseded by a newer revision`,
			ExitSucceeded, ExitUnreadable, ExitPartiallyFailed, ExitRolledBack, ExitAborted),
		Example: "  sluice rollout status\n  sluice rollout status --watch && echo rolled out",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return a.rolloutStatus(cmd.Context(), id, watch)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it ends")
	return cmd
}

// rolloutTarget is the rollout `rollout status` shows: a known id, or the
// first rollout of at least generation waitGen (the head's, not started yet).
type rolloutTarget struct {
	id      string
	waitGen uint64
	head    *sluicev1.Head
}

func (a *app) rolloutStatus(ctx context.Context, id string, watch bool) error {
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := bucket(ctx, js, contract.BucketRollouts)
	if err != nil {
		return err
	}
	rollouts := store.New(kv, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	target, err := pickRollout(ctx, js, rollouts, id)
	if err != nil {
		return err
	}
	if !watch {
		if target.id == "" {
			fmt.Fprintf(a.streams.Out, "revision %s (generation %d) is the head; its rollout has not started yet (is the rollout-coordinator running?)\n",
				short(target.head.GetRevision()), target.head.GetGeneration())
			return nil
		}
		e, err := rollouts.Get(ctx, target.id)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("rollout %s not found: list rollouts with `sluice get rollouts`", target.id)
		}
		if err != nil {
			return err
		}
		live, err := liveNodes(ctx, js, target.id)
		if err != nil {
			return err
		}
		writeLines(a.streams.Out, rolloutLines(e.Value, live, a.now()))
		return exitFor(e.Value.GetPhase())
	}
	return a.watchRollout(ctx, rollouts, target)
}

// pickRollout chooses the rollout to show: id when given, else the active
// one, else the newest; and when the head is newer than that, its rollout
// once it starts.
func pickRollout(ctx context.Context, js jetstream.KeyValueManager, rollouts *store.Store[*sluicev1.Rollout], id string) (rolloutTarget, error) {
	if id != "" {
		return rolloutTarget{id: id}, nil
	}
	var t rolloutTarget
	var gen uint64
	active, err := getRolloutRef(ctx, js, contract.KeyActive)
	if err != nil {
		return t, err
	}
	if active != nil {
		t.id, gen = active.GetRollout(), active.GetGeneration()
	} else {
		all, err := rollouts.List(ctx, ">")
		if err != nil {
			return t, err
		}
		var rs []*sluicev1.Rollout
		for _, e := range all {
			if e.Key != contract.KeyActive && e.Key != contract.KeyLastApplied {
				rs = append(rs, e.Value)
			}
		}
		sortRollouts(rs)
		if len(rs) > 0 {
			t.id, gen = rs[0].GetId(), rs[0].GetGeneration()
		}
	}
	head, err := getHead(ctx, js)
	if err != nil {
		return t, err
	}
	if head != nil && head.GetGeneration() > gen {
		// The head moved after the rollout we found started: the operator
		// wants the head's rollout, which the coordinator is about to start.
		return rolloutTarget{waitGen: head.GetGeneration(), head: head}, nil
	}
	if t.id == "" {
		return t, errors.New("there are no rollouts yet: apply intents first (sluice apply -f examples/)")
	}
	return t, nil
}

// watchRollout redraws the target rollout on every change until it ends.
func (a *app) watchRollout(ctx context.Context, rollouts *store.Store[*sluicev1.Rollout], t rolloutTarget) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	filter := t.id
	if filter == "" {
		filter = ">"
		fmt.Fprintf(a.streams.Out, "waiting for the rollout of revision %s (generation %d) to start…\n",
			short(t.head.GetRevision()), t.head.GetGeneration())
	}
	updates, err := rollouts.Watch(ctx, filter)
	if err != nil {
		return err
	}
	d := &drawer{w: a.streams.Out, tty: a.streams.TTY}
	seen := false
	for {
		var e store.Entry[*sluicev1.Rollout]
		var ok bool
		select {
		case <-ctx.Done():
			return silentExit(130)
		case e, ok = <-updates:
		}
		switch {
		case !ok:
			if ctx.Err() != nil {
				return silentExit(130)
			}
			return errors.New("watch of the rollouts bucket ended: the connection to NATS was lost")
		case e.Key == "": // caught up with the stored values
			if t.id != "" && !seen {
				return fmt.Errorf("rollout %s not found: list rollouts with `sluice get rollouts`", t.id)
			}
			continue
		case e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied:
			continue
		case e.Err != nil:
			return e.Err
		case e.Deleted:
			if e.Key == t.id {
				return fmt.Errorf("rollout %s was deleted while watching it (retention removed it)", t.id)
			}
			continue
		}
		if t.id == "" && e.Value.GetGeneration() >= t.waitGen {
			t.id = e.Key
		}
		if e.Key != t.id {
			continue
		}
		seen = true
		r := e.Value
		d.draw(r, a.now())
		if terminal(r.GetPhase()) {
			d.finish(r, a.now())
			return exitFor(r.GetPhase())
		}
	}
}

// exitFor ends the command with the exit code of phase.
func exitFor(p sluicev1.RolloutPhase) error {
	if code := rolloutExitCode(p); code != 0 {
		return silentExit(code)
	}
	return nil
}

// drawer shows successive states of a rollout: on a terminal it redraws the
// block in place; otherwise it prints one line per change.
type drawer struct {
	w     io.Writer
	tty   bool
	lines int // lines of the last block drawn on the terminal
}

func (d *drawer) draw(r *sluicev1.Rollout, now time.Time) {
	if !d.tty {
		fmt.Fprintln(d.w, progressLine(r, now))
		return
	}
	var b strings.Builder
	if d.lines > 0 {
		// Back to the start of the last block, then clear to the end of the screen.
		fmt.Fprintf(&b, "\x1b[%dF\x1b[J", d.lines)
	}
	lines := rolloutLines(r, nil, now)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	d.lines = len(lines)
	_, _ = io.WriteString(d.w, b.String())
}

// finish prints what the last draw left out, so the outcome is the last line.
func (d *drawer) finish(r *sluicev1.Rollout, now time.Time) {
	if d.tty {
		return // the block ends with the outcome
	}
	writeLines(d.w, append(nodeLines(r, nil, now), outcomeLine(r)))
}

// liveNodes reads the nodes whose desired config (or revert) belongs to the
// rollout id, with their agents' status.
func liveNodes(ctx context.Context, js jetstream.KeyValueManager, id string) ([]liveNode, error) {
	kv, err := bucket(ctx, js, contract.BucketNodeConfigs)
	if err != nil {
		return nil, err
	}
	// Node names may hold dots, so the keys are matched whole, not by a "*.desired" filter.
	configs, err := store.New(kv, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, ">")
	if err != nil {
		return nil, err
	}
	var live []liveNode
	for _, e := range configs {
		if node, _, ok := contract.NodeOfConfigKey(e.Key); ok && e.Key == contract.DesiredKey(node) && e.Value.GetRollout() == id {
			live = append(live, liveNode{desired: e.Value})
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	statuses, err := list(ctx, js, contract.BucketStatus, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if err != nil {
		return nil, err
	}
	byNode := make(map[string]*sluicev1.NodeStatus, len(statuses))
	for _, st := range statuses {
		byNode[st.GetNode()] = st
	}
	for i := range live {
		live[i].status = byNode[live[i].desired.GetNode()]
	}
	return live, nil
}

func writeLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
