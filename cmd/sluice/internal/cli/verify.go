package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) verifyCommand() *cobra.Command {
	var files []string
	var sf strategyFlags
	var live bool
	cmd := &cobra.Command{
		Use:   "verify -f FILE|DIR [-f ...] [--live] [strategy flags]",
		Short: "Check intent files as a whole fleet's set, storing nothing",
		Long: `Verify takes the files as the whole intent set (as a directory registry
holds it) and checks it as the configurator checks an apply before it cuts a
revision: every intent's own rules, the values that must be unique on a node,
and the fleet verifier's rules over the whole set (docs/intents.md, "Fleet
rules"): a VNI is one network everywhere, a VRF named once is a likely typo,
and so on. It needs no server.

With --live it reads the present nodes from the control plane too, so that
findings name example nodes and the strategy flags are checked against the
fleet (a --failure-domain no node carries is an error).

Every problem is printed, one a line. Exit codes: 0 when nothing was found,
1 when something was (an error or a warning), 2 for usage errors.`,
		Example: "  sluice verify -f examples/\n  sluice verify -f intents/ --live --failure-domain zone",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("nothing to verify: name intent files or directories with -f")}
			}
			strategy, err := sf.strategy(cmd.Flags())
			if err != nil {
				return err
			}
			intents, at, err := intent.ParseFilesWhere(files...)
			if err != nil {
				fmt.Fprintln(a.streams.Err, err)
				return silentExit(1)
			}
			if errs := intent.Validate(intents); len(errs) > 0 {
				printFieldErrors(a.streams.Err, errs, at)
				return silentExit(1)
			}
			var nodes []verify.Node
			if live {
				sn, err := a.bind(cmd.Context(), contract.BucketNodes)
				if err != nil {
					return err
				}
				defer sn.Close()
				entries, err := store.New(sn.kv[contract.BucketNodes], func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(cmd.Context(), ">")
				if err != nil {
					return fmt.Errorf("read the nodes: %w", err)
				}
				for _, e := range entries {
					if e.Err == nil && !contract.IsControlKey(e.Key) {
						nodes = append(nodes, verify.Node{Name: e.Key, Labels: e.Value.GetLabels()})
					}
				}
			}
			fs := verify.Verify(verify.Input{Intents: intents, Nodes: nodes, Strategy: strategy})
			printFindings(a.streams.Out, fs)
			where := "no nodes (without --live)"
			if live {
				where = fmt.Sprintf("%d present nodes", len(nodes))
			}
			if len(fs) == 0 {
				fmt.Fprintf(a.streams.Out, "verified: %d intents on %s, nothing found\n", len(intents), where)
				return nil
			}
			fmt.Fprintf(a.streams.Out, "%s, %s in %d intents on %s\n", countOf(verify.Errors(fs), "error"), countOf(len(fs)-verify.Errors(fs), "warning"), len(intents), where)
			return silentExit(1)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "intent file or directory (repeatable)")
	cmd.Flags().BoolVar(&live, "live", false, "read the present nodes from the control plane and check the strategy flags against them")
	sf.register(cmd.Flags())
	return cmd
}

// countOf is "1 error", "2 errors".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
