package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// getKind is a kind `sluice get` lists.
type getKind struct {
	name    string // plural, as shown in help
	aliases []string
	load    func(ctx context.Context, js jetstream.KeyValueManager) (listing, error)
}

var getKinds = []getKind{
	{"intents", []string{"intent"}, loadIntents},
	{"revisions", []string{"revision", "rev", "revs"}, loadRevisions},
	{"nodes", []string{"node"}, loadNodes},
	{"rollouts", []string{"rollout"}, loadRollouts},
	{"fingerprints", []string{"fingerprint", "fp"}, loadFingerprints},
}

func findGetKind(s string) (getKind, error) {
	s = strings.ToLower(s)
	names := make([]string, 0, len(getKinds))
	for _, k := range getKinds {
		if s == k.name || slices.Contains(k.aliases, s) {
			return k, nil
		}
		names = append(names, k.name)
	}
	return getKind{}, fmt.Errorf("cannot get %q: use one of %s", s, strings.Join(names, ", "))
}

func (a *app) getCommand() *cobra.Command {
	var output string
	names := make([]string, 0, len(getKinds))
	for _, k := range getKinds {
		names = append(names, k.name)
	}
	cmd := &cobra.Command{
		Use:   "get intents|revisions|nodes|rollouts|fingerprints",
		Short: "List intents, revisions, nodes, rollouts or invalid fingerprints",
		Long: `List what the control plane stores, read straight from its buckets.

  intents        KIND NAME STATUS SOURCE UPDATED
  revisions      ID INTENTS CREATED HEAD (newest first; * marks the head)
  nodes          NODE PRESENT LABELS PHASE FINGERPRINT REVISION MESSAGE LAST-UPDATE
                 (every node with a presence lease or a status)
  rollouts       ID REVISION PHASE PROVISIONED/TOTAL FAILED SKIPPED REVERTED STARTED
                 DURATION REASON (newest first; the active one is marked;
                 FAILED counts invalid and timed-out nodes)
  fingerprints   FINGERPRINT REVISION ROLLOUT NODE CHECK TIME OUTPUT
                 (configs recorded invalid, newest first; a rollout to one is
                 refused unless applied with --retry-invalid)

-o json and -o yaml print a list of the stored objects (protojson field names).`,
		Example:   "  sluice get nodes\n  sluice get rollouts -o yaml",
		Args:      cobra.ExactArgs(1),
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := findGetKind(args[0])
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if !slices.Contains(formats, output) {
				return &ExitError{Code: 2, Err: fmt.Errorf("unknown output format %q: use one of %s", output, strings.Join(formats, ", "))}
			}
			nc, js, err := a.jetStream()
			if err != nil {
				return err
			}
			defer nc.Close()
			l, err := kind.load(cmd.Context(), js)
			if err != nil {
				return err
			}
			return printListing(a.streams.Out, l, output, a.now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", formatTable, "output format: table, json or yaml")
	return cmd
}

// list reads every live entry of a bucket that decodes as T, skipping the keys in skip.
func list[T proto.Message](ctx context.Context, js jetstream.KeyValueManager, name string, newT func() T, skip ...string) ([]T, error) {
	kv, err := bucket(ctx, js, name)
	if err != nil {
		return nil, err
	}
	entries, err := store.New(kv, newT).List(ctx, ">")
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(entries))
	for _, e := range entries {
		if !slices.Contains(skip, e.Key) {
			out = append(out, e.Value)
		}
	}
	return out, nil
}

func loadIntents(ctx context.Context, js jetstream.KeyValueManager) (listing, error) {
	items, err := list(ctx, js, contract.BucketIntents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	return intentList(items), err
}

func loadRevisions(ctx context.Context, js jetstream.KeyValueManager) (listing, error) {
	items, err := list(ctx, js, contract.BucketRevisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }, contract.KeyHead)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(items, func(a, b *sluicev1.Revision) int {
		if c := b.GetCreatedAt().AsTime().Compare(a.GetCreatedAt().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetId(), b.GetId())
	})
	head, err := getHead(ctx, js)
	if err != nil {
		return nil, err
	}
	return revisionList{items: items, head: head}, nil
}

// getHead returns revisions/head, or nil when nothing was applied yet.
func getHead(ctx context.Context, js jetstream.KeyValueManager) (*sluicev1.Head, error) {
	kv, err := bucket(ctx, js, contract.BucketRevisions)
	if err != nil {
		return nil, err
	}
	e, err := store.New(kv, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return e.Value, err
}

func loadNodes(ctx context.Context, js jetstream.KeyValueManager) (listing, error) {
	presences, err := list(ctx, js, contract.BucketNodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if err != nil {
		return nil, err
	}
	statuses, err := list(ctx, js, contract.BucketStatus, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if err != nil {
		return nil, err
	}
	return mergeNodes(presences, statuses), nil
}

func loadRollouts(ctx context.Context, js jetstream.KeyValueManager) (listing, error) {
	items, err := list(ctx, js, contract.BucketRollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, contract.KeyActive, contract.KeyLastApplied)
	if err != nil {
		return nil, err
	}
	sortRollouts(items)
	active, err := getRolloutRef(ctx, js, contract.KeyActive)
	if err != nil {
		return nil, err
	}
	return rolloutList{items: items, active: active.GetRollout()}, nil
}

// getRolloutRef returns rollouts/<key>, or nil when it does not exist.
func getRolloutRef(ctx context.Context, js jetstream.KeyValueManager, key string) (*sluicev1.RolloutRef, error) {
	kv, err := bucket(ctx, js, contract.BucketRollouts)
	if err != nil {
		return nil, err
	}
	e, err := store.New(kv, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return e.Value, err
}

func loadFingerprints(ctx context.Context, js jetstream.KeyValueManager) (listing, error) {
	items, err := list(ctx, js, contract.BucketFingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(items, func(a, b *sluicev1.InvalidFingerprint) int {
		if c := b.GetTime().AsTime().Compare(a.GetTime().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetFingerprint(), b.GetFingerprint())
	})
	return fingerprintList(items), nil
}
