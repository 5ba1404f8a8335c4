package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) rolloutHistoryCommand() *cobra.Command {
	var output string
	var limit int
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List rollouts in the order they started, with their outcomes",
		Long: `List every stored rollout, oldest first (by head generation): its id,
revision, outcome, when it started and how long it ran, its node counts, and
why it ended. The counts are those of 'sluice rollout status': provisioned of
the total, failed, then under OTHER the rest that count a node (skipped,
stopped in flight, not started, ...), so that a row adds up to its total; and
reverted. "(in force)" marks the rollout whose revision is in force
(rollouts/last-applied), "(running)" the active one. Under the reason of a
rollout a registry's sync started, a line says where it came from: "from git
registry gitops commit 0123456789ab (Ada Admin: add tenant a)"; under that of
one that stopped with nodes in flight, a line names them: "stopped in flight:
node-04, node-07" (the record names the first 100 by name, "and N more").

On a terminal a reason is cut to 80 characters (…); -o wide, or output that
is not a terminal, prints it whole.

Per-node results (failed, timed-out, refused, skipped and reverted nodes,
with the failed check and its output) are in 'sluice rollout status ID', or
in the records that -o json and -o yaml print whole.`,
		Example: "  sluice rollout history\n  sluice rollout history --limit 5 -o yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output, formatTable, formatWide, formatJSON, formatYAML); err != nil {
				return err
			}
			if limit < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--limit %d: want 0 (all) or more", limit)}
			}
			nc, js, err := a.jetStream()
			if err != nil {
				return err
			}
			defer nc.Close()
			h, bad, err := loadHistory(cmd.Context(), js)
			if err != nil {
				return err
			}
			if a.streams.TTY && output != formatWide {
				h.reasonWidth = 80 // -o wide, or not a terminal: the whole reason
			}
			if limit > 0 && len(h.items) > limit {
				h.items = h.items[len(h.items)-limit:]
			}
			if len(bad) > 0 && (output == formatTable || output == formatWide) {
				fmt.Fprintln(a.streams.Err, unreadableHint(len(bad)))
			}
			return printListing(a.streams.Out, h, bad, output, a.now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, wide (each reason whole on a terminal too), json or yaml")
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the newest N rollouts (0: all)")
	return cmd
}

// history is the rollouts oldest first, with the active and in-force ones.
type history struct {
	items         []*sluicev1.Rollout
	active, force string
	reasonWidth   int // a reason's cut (0: whole, for output that is not a terminal)
}

func loadHistory(ctx context.Context, js jetstream.KeyValueManager) (history, []unreadableKey, error) {
	items, bad, err := list(ctx, js, contract.BucketRollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, contract.KeyActive, contract.KeyLastApplied)
	if err != nil {
		return history{}, nil, err
	}
	slices.SortStableFunc(items, func(a, b *sluicev1.Rollout) int {
		return cmp.Or(cmp.Compare(a.GetGeneration(), b.GetGeneration()), a.GetStartedAt().AsTime().Compare(b.GetStartedAt().AsTime()))
	})
	refs := func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }
	active, badA, err := getOne(ctx, js, contract.BucketRollouts, contract.KeyActive, refs)
	if err != nil {
		return history{}, nil, err
	}
	last, badL, err := getOne(ctx, js, contract.BucketRollouts, contract.KeyLastApplied, refs)
	if err != nil {
		return history{}, nil, err
	}
	return history{items: items, active: active.GetRollout(), force: last.GetRollout()}, append(append(badA, badL...), bad...), nil
}

func (h history) table(now time.Time) [][]string {
	rows := [][]string{{"GEN", "ROLLOUT", "REVISION", "OUTCOME", "STARTED", "DURATION", "PROVISIONED/TOTAL", "FAILED", otherColumn, "REVERTED", "REASON"}}
	for _, r := range h.items {
		outcome := rolloutPhase(r.GetPhase())
		switch r.GetId() {
		case h.active:
			outcome += " (running)"
		case h.force:
			outcome += " (in force)"
		}
		t := contract.TallyOf(r)
		rows = append(rows, []string{
			fmt.Sprint(r.GetGeneration()), r.GetId(), short(r.GetRevision()), outcome,
			age(now, r.GetStartedAt()), rolloutDuration(r, now), provisionedCell(t), countCell(t, contract.CountFailed),
			otherCell(t, view.HistoryCounts...), countCell(t, contract.CountReverted),
			oneLine(r.GetReason(), h.reasonWidth),
		})
		// Where its head came from, under its reason: a registry sync's
		// registry and git commit.
		if line := contract.SourceLine(r.GetSource()); line != "" {
			rows = append(rows, []string{"", "", "", "", "", "", "", "", "", "", "from " + line})
		}
		// The nodes it stopped in flight, by name (the record names them:
		// once reverted, nothing else does).
		for _, c := range t.Nodes {
			if named := c.Named(); named != "" {
				rows = append(rows, []string{"", "", "", "", "", "", "", "", "", "", oneLine(c.Words+": "+named, h.reasonWidth)})
			}
		}
		// One row per wave or failure-domain stage, under its rollout: its
		// nodes started by category (contract.StageTallyOf), adding up to
		// them.
		for _, st := range r.GetStages() {
			state, took := "ended", "-"
			if st.GetEndedAt() == nil {
				state = "running"
				if contract.Terminal(r.GetPhase()) {
					state = "stopped"
				}
			} else {
				took = stageTook(st.GetEndedAt().AsTime().Sub(st.GetStartedAt().AsTime()))
			}
			t := contract.StageTallyOf(r, st)
			rows = append(rows, []string{"", stageName(r, st), "", state, age(now, st.GetStartedAt()), took,
				provisionedCell(t), countCell(t, contract.CountFailed), otherCell(t, view.HistoryCounts...), "", ""})
		}
	}
	return rows
}

// stageTook is how long a stage ran, to the second: "<1s" rather than
// "0s" under half a second, and "-" (unknown) rather than a negative
// duration, when another coordinator's clock ended it before it started.
func stageTook(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second/2:
		return "<1s"
	}
	return d.Round(time.Second).String()
}

// stageName names a stage: "wave 2", "zone b", or both.
func stageName(r *sluicev1.Rollout, st *sluicev1.StageResult) string {
	var parts []string
	if st.GetWave() > 0 {
		parts = append(parts, fmt.Sprintf("wave %d", st.GetWave()))
	}
	if d := st.GetDomain(); d != "" {
		parts = append(parts, domainStage(r, d))
	}
	return strings.Join(parts, ", ")
}

func (h history) objects() ([]json.RawMessage, error) { return protoObjects(h.items) }
