package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) eventsCommand() *cobra.Command {
	var follow bool
	var kind, output string
	var last int
	cmd := &cobra.Command{
		Use:   "events [--follow] [--kind KIND] [--last N] [-o json|yaml]",
		Short: "Show the state transitions of every service, with their reasons",
		Long: `Events prints the last events of the SLUICE_EVENTS stream, one per line,
oldest first by the time each event happened:

  TIME COMPONENT TYPE KIND/ID reason (node=… revision=… rollout=…)

KIND is what the event is about: node, rollout, revision, intent, fingerprint,
leader, registry, instance, freeze, gate (a rollout's gate, id <rollout>.<gate>), or quarantine (a stored value refused at intake:
ValueUnreadable and ValueRewritten, id <bucket>.<key>). Services publish events without waiting, so the stream may hold
them out of time order: --last N takes the last N the stream stored, then
sorts them by time (an event without a time by when the stream stored it).
Without --follow it stops once it has printed the stored events; with
--follow, events stored after that are printed as they arrive.

-o json and -o yaml print {"items": [...], "unreadable": [...]} as 'sluice get'
does: items are the events (protojson field names), unreadable the messages
that do not decode, each {bucket: SLUICE_EVENTS, key: its stream sequence,
reason}. They print the stored events once, so they do not go with --follow.`,
		Example: "  sluice events --last 20\n  sluice events --follow --kind rollout\n  sluice events --kind node -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != "" && !slices.Contains(contract.EventKinds, kind) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--kind %q: want one of %s", kind, strings.Join(contract.EventKinds, ", "))}
			}
			if last < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--last %d: want 0 or more", last)}
			}
			if err := checkFormat(output); err != nil {
				return err
			}
			if follow && output != formatTable {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("-o %s prints the stored events once: leave out --follow, or -o to follow them as lines", output)}
			}
			return a.events(cmd.Context(), kind, last, follow, output)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	cmd.Flags().StringVar(&kind, "kind", "", "only events about this kind (node, rollout, revision, intent, fingerprint, leader, registry, instance, freeze, gate, quarantine)")
	cmd.Flags().IntVarP(&last, "last", "n", 50, "how many stored events to print first")
	outputFlag(cmd.Flags(), &output)
	return cmd
}

func (a *app) events(ctx context.Context, kind string, last int, follow bool, output string) error {
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	stream, err := js.Stream(ctx, contract.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s does not exist: no sluice service has started on this server yet (start them, or run `sluice dev`)", contract.StreamEvents)
	}
	if err != nil {
		return fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if kind != "" {
		cfg.FilterSubjects = []string{contract.EventsSubjectPrefix + "." + kind + ".>"}
	} else {
		// Without a filter the stream's sequence numbers say where the last
		// N events start; with one, the ring below keeps the last N.
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", contract.StreamEvents, err)
		}
		if lastSeq := info.State.LastSeq; lastSeq >= uint64(last) {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, lastSeq-uint64(last)+1
		}
	}
	return a.printEvents(ctx, stream, cfg, last, follow, output)
}

// printEvents prints the last events cfg selects from stream and, with
// follow, every one after them until ctx ends.
func (a *app) printEvents(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig, last int, follow bool, output string) error {
	it, info, err := view.EventMessages(ctx, stream, cfg)
	if err != nil {
		return err
	}
	defer it.Stop()

	p := &eventPrinter{w: a.streams.Out, format: output, last: last, now: a.now()}
	if info != nil && info.NumPending == 0 {
		if err := p.caughtUp(); err != nil || !follow {
			return err
		}
	}
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return p.caughtUp()
			}
			return fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
		}
		p.add(newStreamEvent(msg.Data(), meta))
		if meta.NumPending == 0 && !p.live {
			if err := p.caughtUp(); err != nil || !follow {
				return err
			}
		}
	}
}

// streamEvent is one message of the events stream: its event, or why it
// does not decode.
type streamEvent struct {
	ev  *sluicev1.Event
	bad *unreadableKey
	seq uint64
	// at orders events: the event's time or, without one, when the
	// stream stored it.
	at time.Time
}

func newStreamEvent(data []byte, meta *jetstream.MsgMetadata) streamEvent {
	e := streamEvent{ev: &sluicev1.Event{}, seq: meta.Sequence.Stream, at: meta.Timestamp}
	if err := store.Unmarshal(data, e.ev); err != nil {
		u := newUnreadable(contract.StreamEvents, strconv.FormatUint(e.seq, 10), err)
		e.ev, e.bad = nil, &u
		return e
	}
	if t := e.ev.GetTime(); t != nil {
		e.at = t.AsTime()
	}
	return e
}

// sortEvents orders events by time; the stream's order breaks ties.
func sortEvents(es []streamEvent) {
	slices.SortStableFunc(es, func(a, b streamEvent) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.seq, b.seq))
	})
}

// eventPrinter holds the last N stored events until the stored ones are
// all read, prints them in time order, then prints every event as it comes.
type eventPrinter struct {
	w      io.Writer
	format string
	last   int
	now    time.Time
	ring   []streamEvent
	live   bool
}

func (p *eventPrinter) add(e streamEvent) {
	if p.live {
		if e.bad != nil {
			fmt.Fprintln(p.w, e.bad.Cell())
		} else {
			fmt.Fprintln(p.w, eventLine(e.ev))
		}
		return
	}
	if p.last == 0 {
		return
	}
	if len(p.ring) == p.last {
		p.ring = p.ring[1:]
	}
	p.ring = append(p.ring, e)
}

// caughtUp prints the stored events held, once.
func (p *eventPrinter) caughtUp() error {
	if p.live {
		return nil
	}
	p.live = true
	sortEvents(p.ring)
	l := eventList(p.ring)
	p.ring = nil
	return printListing(p.w, l, l.unreadable(), p.format, p.now)
}

// eventList is stored messages in the order printed; those that do not
// decode are left out of the listing and printed apart as unreadable.
type eventList []streamEvent

// table is one line per event, no header: a line is already laid out.
func (l eventList) table(time.Time) [][]string {
	rows := make([][]string, 0, len(l))
	for _, e := range l {
		if e.ev != nil {
			rows = append(rows, []string{eventLine(e.ev)})
		}
	}
	return rows
}

func (l eventList) objects() ([]json.RawMessage, error) {
	evs := make([]*sluicev1.Event, 0, len(l))
	for _, e := range l {
		if e.ev != nil {
			evs = append(evs, e.ev)
		}
	}
	return protoObjects(evs)
}

func (l eventList) unreadable() []unreadableKey {
	var bad []unreadableKey
	for _, e := range l {
		if e.bad != nil {
			bad = append(bad, *e.bad)
		}
	}
	return bad
}

// eventLine prints an event as TIME COMPONENT TYPE KIND/ID reason (refs).
func eventLine(ev *sluicev1.Event) string {
	t := none
	if ev.GetTime() != nil {
		t = ev.GetTime().AsTime().Local().Format("2006-01-02 15:04:05.000")
	}
	id := ev.GetId()
	switch ev.GetKind() {
	case "revision", "fingerprint": // hashes: the short form is enough to tell them apart
		id = shortN(id, 12)
	}
	line := fmt.Sprintf("%-23s  %-19s  %-24s  %-26s  %s", t, orNone(ev.GetComponent()), orNone(ev.GetType()),
		orNone(ev.GetKind())+"/"+orNone(id), strings.Join(strings.Fields(ev.GetReason()), " ")) // one line, whatever a check printed
	var refs []string
	for _, r := range []struct{ kind, val, shown string }{
		{"node", ev.GetNode(), ev.GetNode()},
		{"revision", ev.GetRevision(), short(ev.GetRevision())},
		{"rollout", ev.GetRollout(), ev.GetRollout()},
		{"fingerprint", ev.GetFingerprint(), shortN(ev.GetFingerprint(), 12)},
	} {
		// Leave out what KIND/ID already says.
		if r.val == "" || (ev.GetKind() == r.kind && ev.GetId() == r.val) {
			continue
		}
		refs = append(refs, r.kind+"="+r.shown)
	}
	if len(refs) > 0 {
		line += " (" + strings.Join(refs, " ") + ")"
	}
	return strings.TrimRight(line, " ")
}
