package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) eventsCommand() *cobra.Command {
	var follow bool
	var kind string
	var last int
	cmd := &cobra.Command{
		Use:   "events [--follow] [--kind KIND] [--last N]",
		Short: "Show the state transitions of every service, with their reasons",
		Long: `Events prints the last events of the SLUICE_EVENTS stream, one per line:

  TIME COMPONENT TYPE KIND/ID reason (node=… revision=… rollout=…)

KIND is what the event is about: node, rollout, revision, intent, fingerprint
or leader. Without --follow it stops once it has printed the stored events.`,
		Example: "  sluice events --last 20\n  sluice events --follow --kind rollout",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.ContainsAny(kind, ".*> ") {
				return &ExitError{Code: 2, Err: fmt.Errorf("--kind %q: want one word such as node or rollout", kind)}
			}
			if last < 0 {
				return &ExitError{Code: 2, Err: fmt.Errorf("--last %d: want 0 or more", last)}
			}
			return a.events(cmd.Context(), kind, last, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	cmd.Flags().StringVar(&kind, "kind", "", "only events about this kind (node, rollout, revision, intent, fingerprint, leader)")
	cmd.Flags().IntVarP(&last, "last", "n", 50, "how many stored events to print first")
	return cmd
}

func (a *app) events(ctx context.Context, kind string, last int, follow bool) error {
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
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
	}
	defer it.Stop()
	go func() {
		<-ctx.Done()
		it.Stop()
	}()

	p := &eventPrinter{w: a.streams.Out, last: last}
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		if !follow {
			return nil
		}
		p.caughtUp()
	}
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				p.caughtUp()
				return nil
			}
			return fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
		}
		ev := &sluicev1.Event{}
		if err := store.Unmarshal(msg.Data(), ev); err != nil {
			ev = &sluicev1.Event{Type: "Undecodable", Reason: err.Error()}
		}
		p.add(ev)
		meta, err := msg.Metadata()
		if err == nil && meta.NumPending == 0 && !p.live {
			p.caughtUp()
			if !follow {
				return nil
			}
		}
	}
}

// eventPrinter holds the last N stored events until the stored ones are
// all read, then prints every event as it comes.
type eventPrinter struct {
	w    io.Writer
	last int
	ring []*sluicev1.Event
	live bool
}

func (p *eventPrinter) add(ev *sluicev1.Event) {
	if p.live {
		fmt.Fprintln(p.w, eventLine(ev))
		return
	}
	if p.last == 0 {
		return
	}
	if len(p.ring) == p.last {
		p.ring = p.ring[1:]
	}
	p.ring = append(p.ring, ev)
}

func (p *eventPrinter) caughtUp() {
	if p.live {
		return
	}
	p.live = true
	for _, ev := range p.ring {
		fmt.Fprintln(p.w, eventLine(ev))
	}
	p.ring = nil
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
