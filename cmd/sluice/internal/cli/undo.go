package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/apiclient"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) rolloutUndoCommand() *cobra.Command {
	var toRevision string
	var sf strategyFlags
	cmd := &cobra.Command{
		Use:   "undo [--to-revision R]",
		Short: "Make an earlier revision's intents the head again",
		Long: `Make an earlier revision's intents the stored set again — every intent of it
written back as it has it, every other intent marked for deletion — as one
change, rolled out as a new rollout under the same safety rules as any apply
(a config recorded invalid is refused at once).

Without --to-revision it goes back to the revision in force: after a rollout
rolled back or was aborted, that is the one-command way out of a bad head.
When the head itself is in force, it goes back to the revision in force
before it. --to-revision takes a revision id or a unique prefix of 6 or more
characters (sluice get revisions, sluice rollout history).`,
		Example: "  sluice rollout undo\n  sluice rollout undo --to-revision 0e48ce6126d2 --max-parallel 2",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			nc, err := a.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			resp, err := apiclient.Undo(cmd.Context(), nc, &sluicev1.UndoRequest{ToRevision: toRevision, Strategy: strategy})
			if err != nil {
				return a.rejected(err)
			}
			w := a.streams.Out
			for _, id := range resp.GetRestored() {
				fmt.Fprintf(w, "%s written back\n", id)
			}
			for _, id := range resp.GetMarked() {
				fmt.Fprintf(w, "%s marked for deletion\n", id)
			}
			fmt.Fprintf(w, "back from revision %s: ", short(resp.GetFromRevision()))
			printRevision(w, resp.GetRevision(), resp.GetGeneration(), true, resp.GetWaitsFor(), strategy)
			return nil
		},
	}
	cmd.Flags().StringVar(&toRevision, "to-revision", "", "the revision to go back to (default: the one in force, or the one before it)")
	sf.register(cmd.Flags())
	return cmd
}

func (a *app) rolloutRetryCommand() *cobra.Command {
	var sf strategyFlags
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Roll the head out again after it rolled back, was aborted or partially failed",
		Long: `Roll the head revision out again, as a new rollout, after its rollout rolled
back, was aborted or partially failed — on purpose: the fingerprints it
recorded invalid are forgiven first (as with --retry-invalid; each gets a
FingerprintForgiven event). Strategy flags replace the head's strategy;
without any, the head's own is used.`,
		Example: "  sluice rollout retry\n  sluice rollout retry --max-parallel 1 --failure-budget 1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			nc, err := a.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			resp, err := apiclient.Retry(cmd.Context(), nc, &sluicev1.RetryRequest{Strategy: strategy})
			if err != nil {
				return a.rejected(err)
			}
			if r := resp.GetRetries(); r != "" {
				fmt.Fprintf(a.streams.Out, "retrying rollout %s: ", r)
			}
			printRevision(a.streams.Out, resp.GetRevision(), resp.GetGeneration(), true, resp.GetWaitsFor(), strategy)
			return nil
		},
	}
	sf.register(cmd.Flags())
	return cmd
}
