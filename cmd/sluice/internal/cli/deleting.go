package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
)

// reaperAsk bounds the wait for the reaper's status endpoint.
const reaperAsk = 2 * time.Second

// mostDeletingNamed is how many intents one reason's line names.
const mostDeletingNamed = 3

// reaperStatus asks the reaper's status endpoint (contract.ReaperStatus).
func reaperStatus(ctx context.Context, nc *nats.Conn) (*contract.ReaperStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, reaperAsk)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, contract.SubjectReaperStatus, nil)
	if err != nil {
		return nil, err
	}
	var st contract.ReaperStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return nil, fmt.Errorf("the reaper's status: %w", err)
	}
	return &st, nil
}

// deletingLines says why each intent of l shown deleting is still there:
// the reaper decides, and its status (st; asked says why there is none)
// carries the reason of its last look at them, which is shown as it is, by
// reason, with when the reaper looks again. Nothing when none is deleting.
func deletingLines(l intentList, st *contract.ReaperStatus, asked error, now time.Time) []string {
	var deleting []string // keys
	name := map[string]string{}
	names := l.names() // kind/name, as -o name prints them
	for i, si := range l {
		if si.GetMarkedForDeletion() {
			k := intent.Key(si.GetIntent())
			deleting = append(deleting, k)
			name[k] = names[i]
		}
	}
	if len(deleting) == 0 {
		return nil
	}
	if st == nil {
		return []string{fmt.Sprintf("%s intent(s) deleting; the reaper, which deletes them once nothing references them, did not answer (%v): none is deleted while no reaper runs",
			contract.Thousands(len(deleting)), asked)}
	}
	next := "at its next pass"
	if !st.NextPass.IsZero() {
		next = fmt.Sprintf("at its next pass, by %s (in %s)", st.NextPass.Local().Format(time.TimeOnly), humanDuration(st.NextPass.Sub(now)))
	}
	why := map[string]string{}
	for _, g := range st.Kept {
		for _, k := range g.Intents {
			why[k] = g.Reason
		}
	}
	// By reason, in the order the reasons first come in the listing.
	var order []string
	byWhy := map[string][]string{}
	for _, k := range deleting {
		w := why[k]
		if w == "" {
			w = "not looked at yet by the reaper: marked since its last look"
		}
		if byWhy[w] == nil {
			order = append(order, w)
		}
		byWhy[w] = append(byWhy[w], name[k])
	}
	head := fmt.Sprintf("%s intent(s) deleting, kept by the reaper", contract.Thousands(len(deleting)))
	if !st.KeptAt.IsZero() {
		head += fmt.Sprintf(" as of its look at %s (%s ago)", st.KeptAt.Local().Format(time.TimeOnly), humanDuration(now.Sub(st.KeptAt)))
	}
	lines := []string{head + "; it looks again " + next + ":"}
	for _, w := range order {
		names := byWhy[w]
		shown := strings.Join(names[:min(len(names), mostDeletingNamed)], ", ")
		if more := len(names) - mostDeletingNamed; more > 0 {
			shown += fmt.Sprintf(" and %s more", contract.Thousands(more))
		}
		lines = append(lines, fmt.Sprintf("  %s: %s", shown, w))
	}
	return lines
}
