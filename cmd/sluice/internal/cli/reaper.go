package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) reaperCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reaper",
		Short: "Act on the reaper's holds",
	}
	cmd.AddCommand(a.reaperConfirmCommand())
	return cmd
}

func (a *app) reaperConfirmCommand() *cobra.Command {
	var reason string
	var nodes []string
	cmd := &cobra.Command{
		Use:   "confirm [--node NAME]...",
		Short: "Let the reaper delete the keys of departed nodes it holds",
		Long: `When more of the fleet departs at once than the reaper's guard allows (more
than --hold-share of the nodes with keys, at least two), the reaper deletes
nothing and says so (event ReapHeld): a control-plane or network outage
looks like that. If the nodes are really gone, confirm it: the reaper then
deletes their keys (desired, backup, status) once their grace passed.

Without --node every node that has keys but no presence now is confirmed.
The confirmation is stored in sluice-control/reaper.confirm; the reaper
removes it once every node it names is reaped or back. Exit 0 when stored,
1 when no node is departed.`,
		Example: "  sluice reaper confirm --reason 'rack 4 decommissioned'\n  sluice reaper confirm --node node-07 --node node-08",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.reaperConfirm(cmd.Context(), nodes, reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the confirmation")
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "a departed node to confirm (repeatable; default: every departed node)")
	return cmd
}

func (a *app) reaperConfirm(ctx context.Context, nodes []string, reason string) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, controlKV := sn.js, sn.kv[contract.BucketControl]
	departed, err := departedNodes(ctx, js)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		nodes = departed
	}
	for _, n := range nodes {
		if !slices.Contains(departed, n) {
			return &ExitError{Code: 1, Err: fmt.Errorf("node %s has no keys or is present: nothing to confirm (departed now: %s)", n, orNone(strings.Join(departed, ", ")))}
		}
	}
	if len(nodes) == 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("no node is departed (every node with keys is present): nothing to confirm")}
	}
	req := &sluicev1.ReapConfirm{Nodes: nodes, By: operator(), At: timestamppb.New(a.now()), Reason: reason}
	if err := putRequest(ctx, store.New(controlKV, func() *sluicev1.ReapConfirm { return &sluicev1.ReapConfirm{} }), contract.KeyReapConfirm, req); err != nil {
		return err
	}
	fmt.Fprintf(a.streams.Out, "confirmed %d departed node(s): %s; the reaper deletes their keys once their grace passed (events NodeReaped)\n",
		len(nodes), strings.Join(nodes, ", "))
	return nil
}

// departedNodes lists the nodes that have a status or a desired/backup
// config but no presence, sorted.
func departedNodes(ctx context.Context, js jetstream.KeyValueManager) ([]string, error) {
	keysOf := func(name string) ([]string, error) {
		kv, err := bucket(ctx, js, name)
		if err != nil {
			return nil, err
		}
		keys, err := store.New(kv, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Keys(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", name, err)
		}
		return keys, nil
	}
	present, err := keysOf(contract.BucketNodes)
	if err != nil {
		return nil, err
	}
	statuses, err := keysOf(contract.BucketStatus)
	if err != nil {
		return nil, err
	}
	configs, err := keysOf(contract.BucketNodeConfigs)
	if err != nil {
		return nil, err
	}
	owners := contract.NodesWithKeys(statuses, configs)
	var out []string
	for n := range owners {
		if !slices.Contains(present, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
