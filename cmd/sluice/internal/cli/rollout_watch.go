package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

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
