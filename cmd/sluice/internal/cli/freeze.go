package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Events the CLI publishes about freezes (kind freeze, id the freeze's).
const (
	EventFreezeAdded   = "FreezeAdded"
	EventFreezeRemoved = "FreezeRemoved"
)

func (a *app) freezeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "freeze",
		Short: "Add and remove freezes: periods in which no rollout starts a wave",
		Long: `A freeze is a period in which no wave of any rollout starts (a wave in flight
finishes; the next waits until the freeze ends or is removed). Freezes are
stored in the control bucket (control/freeze.<id>); adding and removing one
is recorded as an event (sluice events --kind freeze) naming who did it.
'sluice get freezes' lists them; 'rollout status' says when a rollout waits
for one ("frozen until …").`,
	}
	var from, to, reason, id string
	var length time.Duration
	add := &cobra.Command{
		Use:   "add --to TIME|--for DURATION --reason TEXT [--from TIME] [--id ID]",
		Short: "Add a freeze (from now, or --from, until --to or for --for)",
		Example: `  sluice freeze add --for 2h --reason "core router maintenance"
  sluice freeze add --from 2026-12-23T18:00:00Z --to 2027-01-04T08:00:00Z --reason "holidays" --id holidays`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := freezeOf(id, from, to, length, reason, a.now())
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			return a.freezeAdd(cmd.Context(), f)
		},
	}
	add.Flags().StringVar(&from, "from", "", "when it starts, RFC 3339 (2026-12-23T18:00:00Z); default now")
	add.Flags().StringVar(&to, "to", "", "when it ends, RFC 3339")
	add.Flags().DurationVar(&length, "for", 0, "how long it lasts from --from, instead of --to (e.g. 2h)")
	add.Flags().StringVar(&reason, "reason", "", "why (required): shown wherever a rollout waits for it")
	add.Flags().StringVar(&id, "id", "", "its name (letters, digits, - and _); default: from its start time")
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a freeze: waves may start again (within the strategies' windows)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := contract.ValidName(args[0]); err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("freeze id %q: %w", args[0], err)}
			}
			return a.freezeRemove(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(add, remove)
	return cmd
}

// freezeOf is the freeze the flags of freeze add describe, or a usage
// error naming the flag.
func freezeOf(id, from, to string, length time.Duration, reason string, now time.Time) (*sluicev1.Freeze, error) {
	start := now
	if from != "" {
		t, err := time.Parse(time.RFC3339, from)
		if err != nil {
			return nil, fmt.Errorf("--from %q: want RFC 3339, e.g. 2026-12-23T18:00:00Z", from)
		}
		start = t
	}
	var end time.Time
	switch {
	case to != "" && length != 0:
		return nil, errors.New("--to and --for both say when the freeze ends: give one")
	case to != "":
		t, err := time.Parse(time.RFC3339, to)
		if err != nil {
			return nil, fmt.Errorf("--to %q: want RFC 3339, e.g. 2027-01-04T08:00:00Z", to)
		}
		end = t
	case length > 0:
		end = start.Add(length)
	case length < 0:
		return nil, fmt.Errorf("--for %s: want a positive duration", length)
	default:
		return nil, errors.New("say when the freeze ends: --to TIME or --for DURATION")
	}
	if !end.After(start) {
		return nil, fmt.Errorf("the freeze ends (%s) before it starts (%s)", end.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339))
	}
	if !end.After(now) {
		return nil, fmt.Errorf("the freeze ended already (%s): nothing to hold", end.UTC().Format(time.RFC3339))
	}
	if strings.TrimSpace(reason) == "" {
		return nil, errors.New("--reason is required: say why nothing may start")
	}
	if id == "" {
		id = "freeze-" + start.UTC().Format("20060102-1504")
	}
	if err := contract.ValidName(id); err != nil {
		return nil, fmt.Errorf("--id %q: %w", id, err)
	}
	return &sluicev1.Freeze{Id: id, From: timestamppb.New(start), To: timestamppb.New(end), Reason: reason, By: operator(),
		CreatedAt: timestamppb.New(now)}, nil
}

func (a *app) freezeAdd(ctx context.Context, f *sluicev1.Freeze) error {
	return a.changeFreeze(ctx, func(js jetstream.JetStream, freezes *store.Store[*sluicev1.Freeze]) error {
		if err := putRequest(ctx, freezes, contract.FreezeKey(f.GetId()), f); err != nil {
			return err
		}
		what := fmt.Sprintf("from %s to %s: %s", f.GetFrom().AsTime().UTC().Format(time.RFC3339), f.GetTo().AsTime().UTC().Format(time.RFC3339), f.GetReason())
		a.emitFreeze(ctx, js, f.GetId(), EventFreezeAdded, "added by "+f.GetBy()+": "+what)
		fmt.Fprintf(a.streams.Out, "freeze %s added: no wave starts %s\n", f.GetId(), what)
		return nil
	})
}

func (a *app) freezeRemove(ctx context.Context, id string) error {
	return a.changeFreeze(ctx, func(js jetstream.JetStream, freezes *store.Store[*sluicev1.Freeze]) error {
		key := contract.FreezeKey(id)
		e, err := freezes.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return &ExitError{Code: 1, Err: fmt.Errorf("no freeze %q (sluice get freezes lists them)", id)}
		} else if err != nil && !undecodable(err) { // an unreadable freeze is removed all the same
			return err
		}
		if err := freezes.Delete(ctx, key, e.Revision); err != nil {
			return err
		}
		a.emitFreeze(ctx, js, id, EventFreezeRemoved, "removed by "+operator())
		fmt.Fprintf(a.streams.Out, "freeze %s removed\n", id)
		return nil
	})
}

// changeFreeze connects and runs change on the control bucket's freezes.
func (a *app) changeFreeze(ctx context.Context, change func(jetstream.JetStream, *store.Store[*sluicev1.Freeze]) error) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, kv := sn.js, sn.kv[contract.BucketControl]
	return change(js, store.New(kv, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }))
}

// emitFreeze records a freeze added or removed (kind freeze): the audit trail.
func (a *app) emitFreeze(ctx context.Context, js jetstream.JetStream, id, typ, reason string) {
	em := events.NewEmitter(js, zerolog.Nop(), contract.ComponentCLI, a.now)
	em.Emit(&sluicev1.Event{Kind: contract.KindFreeze, Id: id, Type: typ, Reason: reason})
	em.Flush(ctx)
}

// loadFreezes reads every freeze of the control bucket, by start.
func loadFreezes(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	kv, err := bucket(ctx, js, contract.BucketControl)
	if err != nil {
		return nil, nil, err
	}
	entries, err := store.New(kv, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }).List(ctx, contract.FreezeKey(">"))
	if err != nil {
		return nil, nil, err
	}
	var out freezeList
	var bad []unreadableKey
	for _, e := range entries {
		if e.Err != nil {
			bad = append(bad, newUnreadable(contract.BucketControl, e.Key, e.Err))
			continue
		}
		out = append(out, e.Value)
	}
	slices.SortFunc(out, func(a, b *sluicev1.Freeze) int {
		return cmp.Or(a.GetFrom().AsTime().Compare(b.GetFrom().AsTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	return out, bad, nil
}

// freezeList is the freezes, by start.
type freezeList []*sluicev1.Freeze

func (l freezeList) table(now time.Time) [][]string {
	rows := [][]string{{"ID", "FROM", "TO", "STATE", "BY", "REASON"}}
	for _, f := range l {
		state := "upcoming"
		switch from, to := f.GetFrom().AsTime(), f.GetTo().AsTime(); {
		case !now.Before(to):
			state = "ended"
		case !now.Before(from):
			state = "in force (" + humanDuration(to.Sub(now)) + " left)"
		}
		rows = append(rows, []string{f.GetId(), f.GetFrom().AsTime().Local().Format(time.DateTime), f.GetTo().AsTime().Local().Format(time.DateTime),
			state, cmp.Or(f.GetBy(), none), oneLine(f.GetReason(), 60)})
	}
	return rows
}

func (l freezeList) objects() ([]json.RawMessage, error) { return view.ProtoObjects(l) }
