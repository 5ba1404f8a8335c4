package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
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

// leaderCheckEvery is how often a watch asks whether a coordinator leads
// while the rollout's record does not change: a rollout without a leader
// writes nothing, so its silence is what needs explaining.
const leaderCheckEvery = 5 * time.Second

// watchRollout redraws the target rollout on every change until it ends.
// Before it follows a rollout, and every leaderCheckEvery while that one
// runs, it says whether no coordinator leads (noLeaderNote): once when
// none does, and once when one leads again.
// On a terminal the node table's cells are cut to widths.
func (a *app) watchRollout(ctx context.Context, js jetstream.KeyValueManager, rollouts *store.Store[*sluicev1.Rollout], t rolloutTarget, widths cellWidths) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var current *sluicev1.Rollout // the target's newest record
	leaderless := ""              // the no-leader line said last, "" when one leads
	d := &drawer{w: a.streams.Out, tty: a.streams.TTY, widths: widths}
	say := func(line string) { d.note(line) }
	a.note.Store(&say)
	defer a.note.Store(nil)
	checkLeader := func() {
		if current == nil {
			return
		}
		note := a.noLeaderNote(ctx, js, current)
		switch {
		case note != "" && leaderless == "":
			d.note(a.now().Format(time.TimeOnly) + " " + note)
		case note == "" && leaderless != "" && contract.Active(current.GetPhase()):
			d.note(a.now().Format(time.TimeOnly) + " a coordinator leads again")
		}
		leaderless = note
	}
	if t.id != "" {
		// Said before following: without a leader it would follow a rollout that does not move.
		if e, err := rollouts.Get(ctx, t.id); err == nil {
			current = e.Value
			checkLeader()
		}
	}
	tick := time.NewTicker(leaderCheckEvery)
	defer tick.Stop()
	filter := t.id
	switch {
	case t.queued():
		filter = ">"
		fmt.Fprintln(a.streams.Out, queuedLine(t.head)+"; following this one first")
	case filter == "":
		filter = ">"
		fmt.Fprintf(a.streams.Out, "waiting for the rollout of revision %s (generation %d) to start…\n",
			short(t.head.GetRevision()), t.head.GetGeneration())
	}
	// next is the newest record of the head's rollout seen while following
	// the one it queues behind: it may start before that one's end arrives.
	var next *store.Entry[*sluicev1.Rollout]
	updates, err := rollouts.Watch(ctx, filter)
	if err != nil {
		return err
	}
	seen := false
	for {
		var e store.Entry[*sluicev1.Rollout]
		var ok bool
		select {
		case <-ctx.Done():
			return silentExit(exitInterrupted)
		case <-tick.C:
			checkLeader()
			continue
		case e, ok = <-updates:
		}
		switch {
		case !ok:
			if ctx.Err() != nil {
				return silentExit(exitInterrupted)
			}
			return errors.New("watch of the rollouts bucket ended: the connection to NATS was lost")
		case e.Key == "": // caught up with the stored values
			if t.id != "" && !seen {
				return fmt.Errorf("rollout %s not found: list rollouts with `sluice get rollouts`", t.id)
			}
			continue
		case e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied || contract.IsControlKey(e.Key):
			continue
		case e.Err != nil && e.Key == t.id:
			return fmt.Errorf("the record of rollout %s does not decode (%w): look at it with `nats kv get %s %s`",
				t.id, e.Err, contract.BucketRollouts, t.id)
		case e.Err != nil:
			continue // another rollout's record: not this watch's business
		case e.Deleted:
			if e.Key == t.id {
				return fmt.Errorf("rollout %s was deleted while watching it (retention removed it)", t.id)
			}
			continue
		}
		if t.id == "" && e.Value.GetGeneration() >= t.waitGen {
			t.id = e.Key
		}
		if t.queued() && e.Key != t.id && e.Value.GetGeneration() >= t.waitGen {
			next = &e
		}
		if e.Key != t.id {
			continue
		}
		seen = true
		r := e.Value
		current = r
		d.draw(r, a.now())
		if !contract.Terminal(r.GetPhase()) {
			continue
		}
		d.finish(r, a.now())
		if !t.queued() {
			return exitFor(r.GetPhase())
		}
		// The rollout the head queued behind ended: follow the head's.
		d.restart()
		d.note(fmt.Sprintf("\nwaiting for the rollout of revision %s (generation %d) to start…",
			short(t.head.GetRevision()), t.head.GetGeneration()))
		t.id, t.behind, current = "", false, nil
		if next != nil {
			t.id, current = next.Key, next.Value
			d.draw(next.Value, a.now())
			if contract.Terminal(next.Value.GetPhase()) {
				d.finish(next.Value, a.now())
				return exitFor(next.Value.GetPhase())
			}
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
// block in place; otherwise (a pipe, a CI log) it prints, after the time,
// each line of pipeLines that changed.
type drawer struct {
	w      io.Writer
	tty    bool
	widths cellWidths        // the node table's cuts on the terminal (-o wide: none)
	mu     sync.Mutex        // draw and note: a note may come from the connection's goroutine
	lines  int               // lines of the last block drawn on the terminal
	block  string            // that block
	last   map[string]string // pipeLines last printed when not on a terminal, by what each says
}

// restart makes d draw the next rollout from scratch, below what it drew.
func (d *drawer) restart() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines, d.block, d.last = 0, "", nil
}

// note writes line: in a pipe after what was printed, on a terminal above
// the block, which is drawn again below it (the next redraw in place
// would otherwise overwrite the note).
func (d *drawer) note(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty || d.lines == 0 {
		fmt.Fprintln(d.w, line)
		return
	}
	fmt.Fprintf(d.w, "\x1b[%dF\x1b[J%s\n%s", d.lines, line, d.block)
}

func (d *drawer) draw(r *sluicev1.Rollout, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty {
		// The record changes more often than these lines show (its leader
		// time, a failure's details): a line is printed only when it differs.
		if d.last == nil {
			d.last = map[string]string{}
		}
		for _, l := range pipeLines(r) {
			if l.text != d.last[l.what] {
				d.last[l.what] = l.text
				if l.text != "" {
					fmt.Fprintln(d.w, now.Format(time.TimeOnly)+" "+l.text)
				}
			}
		}
		return
	}
	var b strings.Builder
	lines := rolloutBlock(r, nil, now, d.widths)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	back := ""
	if d.lines > 0 {
		// Back to the start of the last block, then clear to the end of the screen.
		back = fmt.Sprintf("\x1b[%dF\x1b[J", d.lines)
	}
	d.lines, d.block = len(lines), b.String()
	_, _ = io.WriteString(d.w, back+d.block)
}

// pipeLine is one thing a watch that is not on a terminal says, and what
// it says now ("" for nothing).
type pipeLine struct{ what, text string }

// pipeLines is what a watch in a pipe prints of r, each line when it
// changes: the progress line, the leader's term, the stage (with the bake's
// end as a time, not a countdown that would change with every record),
// the pause, each gate's last verdict, what blocks the rollout, and each
// stage once it ended.
func pipeLines(r *sluicev1.Rollout) []pipeLine {
	lines := []pipeLine{{"progress", progress(r)}}
	if e := r.GetLeaderEpoch(); e > 0 {
		lines = append(lines, pipeLine{"term", fmt.Sprintf("  led by the coordinator of term %d", e)})
	}
	var stage []string
	if !contract.Terminal(r.GetPhase()) {
		if r.GetWave() > 0 {
			stage = append(stage, fmt.Sprintf("wave %d", r.GetWave()))
		}
		if ds := r.GetDomains(); len(ds) > 1 {
			stage = append(stage, domainsStage(r, ds))
		} else if dm := r.GetDomain(); dm != "" {
			stage = append(stage, domainStage(r, dm))
		}
		if held := bakeHeld(r); held != "" {
			stage = append(stage, held)
		} else if b := r.GetBakeUntil(); b != nil {
			bake := "baking until " + b.AsTime().Local().Format(time.TimeOnly)
			if want := r.GetStrategy().GetBakeChecks(); want > 0 {
				bake += fmt.Sprintf(", %d of %d checks passed on every node", r.GetBakeChecksPassed(), want)
			}
			stage = append(stage, bake)
		}
		if w := r.GetWaiting(); w != "" {
			if u := r.GetWaitingUntil(); u != nil {
				w += " (until " + u.AsTime().Local().Format(time.TimeOnly) + ")"
			}
			stage = append(stage, w)
		}
	}
	if len(stage) > 0 {
		lines = append(lines, pipeLine{"stage", "  stage " + strings.Join(stage, ", ")})
	} else {
		lines = append(lines, pipeLine{"stage", ""})
	}
	if p := pauseLine(r); p != "" {
		lines = append(lines, pipeLine{"pause", "  paused " + p})
	} else {
		lines = append(lines, pipeLine{"pause", ""})
	}
	for _, g := range r.GetGates() {
		what := g.GetVerdict()
		if b := g.GetBefore(); b != "" {
			what += " before " + b
		}
		lines = append(lines, pipeLine{"gate " + g.GetGate(), fmt.Sprintf("  gate %s (%s)", g.GetMessage(), what)})
	}
	if b := r.GetBlockedBy(); b != nil {
		lines = append(lines, pipeLine{"blocked", "  blocked by gate " + b.GetMessage()})
	}
	for _, st := range r.GetStages() {
		if st.GetEndedAt() == nil {
			continue
		}
		done := fmt.Sprintf("  %s done: %s", stageName(r, st), stageCounts(contract.StageTallyOf(r, st), ""))
		lines = append(lines, pipeLine{"ended " + stageName(r, st), done})
	}
	return lines
}

// finish prints what the last draw left out, so the outcome is the last line.
func (d *drawer) finish(r *sluicev1.Rollout, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tty {
		return // the block ends with the outcome
	}
	writeLines(d.w, append(nodeTable(r, nil, now, widthsFor(false)), outcomeLine(r)))
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
