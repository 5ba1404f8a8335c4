package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func (a *app) recoverCommand() *cobra.Command {
	var confirmEmpty, fromNodes bool
	var reason, out string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "recover (--confirm-empty [--reason TEXT] | --from-nodes [--out DIR] [--timeout D])",
		Short: "Say what to do about a lost store (nodes run configs the store does not hold)",
		Long: `When the store holds no rollout record and none of the revisions that live
nodes say they run (their presence names it, from the agent's last-good on
disk), the store was lost or wiped under a running fleet. The control plane
then starts nothing: no apply or registry sync cuts a revision, no rollout
starts, the reaper deletes nothing; 'sluice get nodes' and 'sluice rollout
status' say "the store is empty but N nodes run configs of revision X".

--from-nodes rebuilds the intents from what the nodes run, as a preview to
review: it asks every node with a live presence for its last-good config,
takes the union of their intents (the same kind and name with different
content on two nodes is a conflict: both are listed, neither written), gives
each intent a node selector made of the labels common to every node that
runs it, and checks that selector picks no node that answered without it
(if it would, the selector gets the label ` + EditLabel + `, which selects
nothing until you edit it). It writes the intents to --out DIR (a new or
empty directory, one file per intent), or to stdout with the summary on
stderr, and writes nothing to the store. Intents that selected no live node
are in no node's config and are not recovered; the revision id will differ.
Then: sluice recover --confirm-empty, and sluice apply -f DIR.

--confirm-empty says that starting from nothing is what you want: the nodes
keep what they run until the next revision reaches them, and that revision is
then their whole config (apply every intent you want them to keep). The
confirmation is stored in sluice-control/store.confirm with who and when, and
recorded as the event StoreLossConfirmed (kind store).

The other way out is 'sluice restore FILE' of a 'sluice backup FILE' taken
earlier (docs/operations.md, "Disaster recovery").

Exit codes: 0 done (--from-nodes: every node answered, no conflict, every
selector checked); 1 the store is not lost, or nothing could be asked or
written (nothing written); 2 usage; 7 (--from-nodes) the intents were
written but something needs you first: a conflict, a selector to edit, a
node that did not answer.`,
		Example: "  sluice recover --confirm-empty --reason 'store disk replaced; re-applying from git'\n" +
			"  sluice recover --from-nodes --out recovered/",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case confirmEmpty && fromNodes:
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--confirm-empty and --from-nodes are steps of their own: first --from-nodes (it writes files), then --confirm-empty, then sluice apply -f DIR")}
			case fromNodes:
				if timeout <= 0 {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--timeout %s: want a positive duration", timeout)}
				}
				return a.recoverFromNodes(cmd.Context(), out, timeout)
			case !confirmEmpty:
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("say what to recover with: --from-nodes (rebuild the intents from what the nodes run, to review) or --confirm-empty (start from nothing; the next revision reconfigures the nodes)")}
			case out != "":
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--out goes with --from-nodes")}
			}
			return a.confirmEmpty(cmd.Context(), reason)
		},
	}
	cmd.Flags().BoolVar(&confirmEmpty, "confirm-empty", false, "the empty store is what you want: start from nothing")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the confirmation")
	cmd.Flags().BoolVar(&fromNodes, "from-nodes", false, "rebuild the intents from the nodes' last-good configs, to review (writes nothing to the store)")
	cmd.Flags().StringVar(&out, "out", "", "with --from-nodes: write one file per intent to this new or empty directory (default: stdout)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "with --from-nodes: how long to wait for each node's answer")
	return cmd
}

func (a *app) confirmEmpty(ctx context.Context, reason string) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	loss, err := requireLoss(ctx, sn.js, "nothing to confirm")
	if err != nil {
		return err
	}
	by, now := a.operator(), a.now()
	c := &sluicev1.StoreConfirm{By: by, At: timestamppb.New(now), Reason: reason, Nodes: uint32(loss.Nodes), Revisions: loss.RevisionIDs()}
	if err := putRequest(ctx, store.New(sn.kv[contract.BucketControl], func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} }), contract.KeyStoreConfirm, c); err != nil {
		return err
	}
	why := ""
	if reason != "" {
		why = " (" + reason + ")"
	}
	em := events.NewEmitter(sn.js, zerolog.Nop(), contract.ComponentCLI, a.now)
	em.Emit(&sluicev1.Event{Kind: contract.KindStore, Id: contract.IDStore, Type: contract.EventStoreLossConfirmed, Revision: loss.Revisions[0].Revision,
		Reason: fmt.Sprintf("%s confirmed starting from an empty store%s: %s; the next revision reconfigures them", by, why, loss)})
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	em.Flush(fctx)
	fmt.Fprintf(a.streams.Out, "confirmed: the control plane starts from an empty store (%s).\n"+
		"The nodes keep what they run until the next revision reaches them; that revision becomes their whole config,\n"+
		"so apply every intent you want them to keep (sluice apply -f DIR).\n", loss)
	return nil
}

// requireLoss is readLoss for a command that acts only on a lost store:
// a store that is not lost is exit 1, saying why and then what.
func requireLoss(ctx context.Context, js jetstream.KeyValueManager, then string) (*storeloss.Loss, error) {
	loss, err := readLoss(ctx, js)
	if err == nil && loss == nil {
		err = &ExitError{Code: 1, Err: fmt.Errorf("the store is not lost (it records a rollout, holds the revisions the nodes run, or the loss was confirmed): %s", then)}
	}
	return loss, err
}

// readLoss tells whether the store is lost (pkg/storeloss).
func readLoss(ctx context.Context, js jetstream.KeyValueManager) (*storeloss.Loss, error) {
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		return nil, err
	}
	loss, _, err := storeloss.Read(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("tell whether the store is lost: %w", err)
	}
	return loss, nil
}

// storeLossNote is the line that says the store is lost, "" when it is
// not; a store whose state cannot be told says that.
func storeLossNote(ctx context.Context, js jetstream.KeyValueManager) string {
	loss, err := readLoss(ctx, js)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot tell whether the store is lost (%v)", err)
	case loss == nil:
		return ""
	}
	return lossNote(loss)
}

// lossNote says what a lost store means and the way out.
func lossNote(loss *storeloss.Loss) string {
	return fmt.Sprintf("%s: nothing is started (no rollout, no deletion) until you recover; %s", loss, storeloss.WayOut)
}

// inForceLine names what a node runs by its presence (its agent's
// last-good), for a node with no status: "revision R, fingerprint F".
func inForceLine(p *sluicev1.NodePresence) string {
	if p.GetInForceRevision() == "" && p.GetInForceFingerprint() == "" {
		return ""
	}
	parts := []string{}
	if r := p.GetInForceRevision(); r != "" {
		parts = append(parts, "revision "+render.Short(r))
	}
	if fp := p.GetInForceFingerprint(); fp != "" {
		parts = append(parts, "fingerprint "+short(fp))
	}
	return strings.Join(parts, ", ")
}
