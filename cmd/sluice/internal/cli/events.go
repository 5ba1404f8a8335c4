package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) eventsCommand() *cobra.Command {
	var follow bool
	var kind, output string
	var last int
	var f eventFilter
	cmd := &cobra.Command{
		Use:   "events [--follow] [--kind KIND] [--rollout ID] [--node NAME] [--type TYPE,…] [--last N] [-o wide|json|yaml]",
		Short: "Show the state transitions of every service, with their reasons",
		Long: `Events prints the last events of the SLUICE_EVENTS stream, one per line,
oldest first by the time each event happened:

  TIME COMPONENT TYPE KIND/ID reason (node=… revision=… rollout=…)

TIME is the time of day for today's events, else month-day and time;
revision ids and fingerprints are cut to 12 characters, in the reason too;
a reference the reason already names is not repeated in the parentheses.
On a terminal each line is cut at 120 characters (…); -o wide, or output to
a pipe or file, prints whole lines.

KIND is what the event is about: node, rollout, revision, intent, fingerprint,
leader, registry, instance, freeze, gate (a rollout's gate, id <rollout>.<gate>),
control (a control run from the dashboard), or quarantine (a stored value refused at intake:
ValueUnreadable and ValueRewritten, id <bucket>.<key>). Services publish events without waiting, so the stream may hold
them out of time order: --last N takes the last N the stream stored, then
sorts them by time (an event without a time by when the stream stored it).
Without --follow it stops once it has printed the stored events; with
--follow, events stored after that are printed as they arrive.

--rollout, --node and --type keep the events about or naming that rollout,
that node, of those types (comma-separated, any case; Rollout* takes every
type starting with Rollout); --last counts the events kept.

A message is shown as unreadable, <unreadable: SLUICE_EVENTS/<seq> reason>,
when it does not decode or is not an event its subject's publishers may
send: what it is about comes from its subject, and its type must be one the
role of the component it names may publish there (docs/security.md, "Who
may say what"), so a node cannot pass off a rollout's or another node's event.

-o json and -o yaml print {"items": [...], "unreadable": [...]} as 'sluice get'
does: items are the events (protojson field names), unreadable the messages
shown as unreadable, each {bucket: SLUICE_EVENTS, key: its stream sequence,
reason}. They print the stored events once, so they do not go with --follow.`,
		Example: "  sluice events --last 20\n  sluice events --follow --kind rollout\n  sluice events --kind node -o json\n" +
			"  sluice events --rollout 3-ab12cd34ef56 --type 'NodeInvalid,Rollout*'\n  sluice events --node node-03 -o wide",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != "" && !slices.Contains(contract.EventKinds, kind) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--kind %q: want one of %s", kind, strings.Join(contract.EventKinds, ", "))}
			}
			if last < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--last %d: want 0 or more", last)}
			}
			if err := checkFormat(output, formatTable, formatWide, formatJSON, formatYAML); err != nil {
				return err
			}
			if follow && output != formatTable && output != formatWide {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("-o %s prints the stored events once: leave out --follow, or -o to follow them as lines", output)}
			}
			return a.events(cmd.Context(), kind, f, last, follow, output)
		},
	}
	cmd.Flags().StringVar(&f.rollout, "rollout", "", "only events about or naming this rollout")
	cmd.Flags().StringVar(&f.node, "node", "", "only events about or naming this node")
	cmd.Flags().StringSliceVar(&f.types, "type", nil, "only events of these types, comma-separated (NodeInvalid,Rollout*)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	cmd.Flags().StringVar(&kind, "kind", "", "only events about this kind (node, rollout, revision, intent, fingerprint, leader, registry, instance, freeze, gate, control, quarantine)")
	cmd.Flags().IntVarP(&last, "last", "n", 50, "how many stored events to print first")
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, wide (whole lines on a terminal), json or yaml")
	return cmd
}

// eventFilter keeps the events --rollout, --node and --type select.
type eventFilter struct {
	rollout, node string
	types         []string
}

func (f eventFilter) empty() bool { return f.rollout == "" && f.node == "" && len(f.types) == 0 }

// keeps reports whether ev passes every filter set.
func (f eventFilter) keeps(ev *sluicev1.Event) bool {
	about := func(kind, val, field string) bool {
		return val == "" || field == val || (ev.GetKind() == kind && ev.GetId() == val)
	}
	if !about(contract.KindRollout, f.rollout, ev.GetRollout()) || !about(contract.KindNode, f.node, ev.GetNode()) {
		return false
	}
	if len(f.types) == 0 {
		return true
	}
	for _, t := range f.types {
		if prefix, ok := strings.CutSuffix(t, "*"); ok {
			if len(ev.GetType()) >= len(prefix) && strings.EqualFold(ev.GetType()[:len(prefix)], prefix) {
				return true
			}
		} else if strings.EqualFold(ev.GetType(), t) {
			return true
		}
	}
	return false
}

func (a *app) events(ctx context.Context, kind string, f eventFilter, last int, follow bool, output string) error {
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
	switch {
	case kind != "":
		cfg.FilterSubjects = contract.EventFilterSubjects(kind, ">")
	case !f.empty():
		// The filters are the CLI's: read everything, the ring keeps the last N kept.
	default:
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
	return a.printEvents(ctx, stream, cfg, f, last, follow, output)
}

// printEvents prints the last events cfg selects from stream and, with
// follow, every one after them until ctx ends.
func (a *app) printEvents(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig, f eventFilter, last int, follow bool, output string) error {
	it, info, err := view.EventMessages(ctx, stream, cfg)
	if err != nil {
		return err
	}
	defer it.Stop()

	width := 0 // whole lines
	if a.streams.TTY && output == formatTable {
		width = eventsWidth
	}
	p := &eventPrinter{w: a.streams.Out, format: output, last: last, now: a.now(), filter: f, width: width}
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
		p.add(newStreamEvent(msg.Subject(), msg.Data(), meta))
		if meta.NumPending == 0 && !p.live {
			if err := p.caughtUp(); err != nil || !follow {
				return err
			}
		}
	}
}

// streamEvent is one message of the events stream: its event, or why it is
// shown as unreadable (it does not decode, or it is not an event its
// subject's publishers may send: events.Read).
type streamEvent struct {
	ev  *sluicev1.Event
	bad *unreadableKey
	seq uint64
	// at orders events: the event's time or, without one, when the
	// stream stored it.
	at time.Time
}

func newStreamEvent(subject string, data []byte, meta *jetstream.MsgMetadata) streamEvent {
	e := streamEvent{seq: meta.Sequence.Stream, at: meta.Timestamp}
	ev, err := events.Read(subject, data)
	if err != nil {
		u := newUnreadable(contract.StreamEvents, strconv.FormatUint(e.seq, 10), err)
		e.bad = &u
		return e
	}
	e.ev = ev
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
	filter eventFilter
	width  int // cut lines at it; 0: whole lines
}

func (p *eventPrinter) add(e streamEvent) {
	if e.ev != nil && !p.filter.keeps(e.ev) {
		return
	}
	if p.live {
		if e.bad != nil {
			fmt.Fprintln(p.w, e.bad.Cell())
		} else {
			fmt.Fprintln(p.w, cutLine(eventLine(e.ev, p.now), p.width))
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
	l := eventList{events: p.ring, width: p.width}
	p.ring = nil
	format := p.format
	if format == formatWide {
		format = formatTable // the lines are laid out already: wide only does not cut them
	}
	return printListing(p.w, l, l.unreadable(), format, p.now)
}

// eventList is stored messages in the order printed; those that do not
// decode are left out of the listing and printed apart as unreadable.
type eventList struct {
	events []streamEvent
	width  int // cut lines at it; 0: whole lines
}

// table is one line per event, no header: a line is already laid out.
func (l eventList) table(now time.Time) [][]string {
	rows := make([][]string, 0, len(l.events))
	for _, e := range l.events {
		if e.ev != nil {
			rows = append(rows, []string{cutLine(eventLine(e.ev, now), l.width)})
		}
	}
	return rows
}

func (l eventList) objects() ([]json.RawMessage, error) {
	evs := make([]*sluicev1.Event, 0, len(l.events))
	for _, e := range l.events {
		if e.ev != nil {
			evs = append(evs, e.ev)
		}
	}
	return protoObjects(evs)
}

func (l eventList) unreadable() []unreadableKey {
	var bad []unreadableKey
	for _, e := range l.events {
		if e.bad != nil {
			bad = append(bad, *e.bad)
		}
	}
	return bad
}

// eventsWidth is where `sluice events` cuts a line on a terminal.
const eventsWidth = 120

// cutLine cuts s to width runes with an ellipsis; 0 keeps it whole.
func cutLine(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	return string([]rune(s)[:width-1]) + "…"
}

// longHex is a sha256 in hex (a revision id, a fingerprint) within text.
var longHex = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// shortHashes cuts every sha256 in s to its first 12 characters, as the
// tables show ids.
func shortHashes(s string) string {
	return longHex.ReplaceAllStringFunc(s, func(h string) string { return h[:12] })
}

// eventTime is an event's time of day when it is of now's day, else its
// month-day and time: the year and today's date are noise in a log read
// by hand.
func eventTime(t time.Time, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05.000")
	}
	if t.Year() == now.Year() {
		return t.Format("01-02 15:04:05")
	}
	return t.Format("2006-01-02 15:04")
}

// eventComponents are the short names of the components in an event line.
var eventComponents = map[string]string{"rollout-coordinator": "coordinator"}

// eventLine prints an event as TIME COMPONENT TYPE KIND/ID reason (refs),
// the columns taking 84 characters at most: ids and hashes short, the
// references the reason names left out.
func eventLine(ev *sluicev1.Event, now time.Time) string {
	t := none
	if ev.GetTime() != nil {
		t = eventTime(ev.GetTime().AsTime(), now)
	}
	id := ev.GetId()
	switch ev.GetKind() {
	case "revision", "fingerprint": // hashes: the short form is enough to tell them apart
		id = shortN(id, 12)
	}
	component := cmp.Or(eventComponents[ev.GetComponent()], ev.GetComponent())
	reason := shortHashes(strings.Join(strings.Fields(ev.GetReason()), " ")) // one line, whatever a check printed
	line := fmt.Sprintf("%-14s  %-12s  %-23s  %-24s  %s", t, orNone(component), orNone(ev.GetType()),
		orNone(ev.GetKind())+"/"+orNone(id), reason)
	var refs []string
	for _, r := range []struct{ kind, val, shown string }{
		{"node", ev.GetNode(), ev.GetNode()},
		{"revision", ev.GetRevision(), short(ev.GetRevision())},
		{"rollout", ev.GetRollout(), ev.GetRollout()},
		{"fingerprint", ev.GetFingerprint(), shortN(ev.GetFingerprint(), 12)},
	} {
		// Leave out what KIND/ID or the reason already says.
		if r.val == "" || (ev.GetKind() == r.kind && ev.GetId() == r.val) || strings.Contains(reason, r.shown) {
			continue
		}
		refs = append(refs, r.kind+"="+r.shown)
	}
	if len(refs) > 0 {
		line += " (" + strings.Join(refs, " ") + ")"
	}
	return strings.TrimRight(line, " ")
}
