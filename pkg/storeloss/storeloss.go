// Package storeloss is the one home of the rule "the store is lost": the
// control plane's store (JetStream) holds no rollout record and none of the
// revisions that live nodes say they run (their presence names it, from
// the agent's last-good on disk), and no operator has confirmed that
// starting from nothing is wanted. It is what a wiped or replaced store
// looks like while the fleet keeps its configs; a first install looks
// different (its nodes run nothing yet).
//
// While the store is lost nothing is started: the configurator cuts no
// revision (an apply or a registry sync is refused, naming the situation
// and the way out), the coordinator starts no rollout, the reaper deletes
// nothing, and `sluice dev` loads no examples. The way out is
// `sluice recover --confirm-empty` (StoreConfirm in the control bucket),
// after `sluice recover --from-nodes` rebuilt the intents from the nodes'
// last-good configs when wanted, or `sluice restore FILE` of a
// `sluice backup FILE` taken earlier.
//
// Judge is the rule, pure; Read gathers its Evidence from the buckets. A
// read that fails is an error, and every caller holds on an error as it
// does on a loss: an answer the control plane could not get is no proof
// that the store is whole.
package storeloss

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// WayOut is what an operator does about a lost store.
const WayOut = "if starting from nothing is what you want, run 'sluice recover --confirm-empty' (the next revision then reconfigures those nodes; " +
	"'sluice recover --from-nodes --out DIR' first rebuilds the intents the nodes run, to review and apply); " +
	"else restore a backup taken earlier with 'sluice restore FILE'; docs/operations.md, \"Disaster recovery\""

// Node is what one live node says it runs.
type Node struct {
	Node, Revision, Fingerprint string
}

// Evidence is what the rule looks at.
type Evidence struct {
	// Rollouts: the store records a rollout (rollouts/last-applied, or any
	// rollout record): it has a history the nodes' configs come from.
	Rollouts bool
	// Confirmed is the operator's confirmation, nil when there is none.
	Confirmed *sluicev1.StoreConfirm
	// Nodes are the live nodes that name a config they run.
	Nodes []Node
	// Held are the revisions, of those the nodes name, the store holds.
	Held map[string]bool
}

// RevisionCount is how many nodes run configs of one revision.
type RevisionCount struct {
	Revision string
	Nodes    int
}

// Loss is a lost store: the live nodes that run configs of revisions the
// store does not hold.
type Loss struct {
	Nodes     int
	Revisions []RevisionCount // most nodes first, then by id
}

// Judge is the rule. It returns nil when the store is not lost: it records
// a rollout, an operator confirmed, or no live node runs a config of a
// revision the store does not hold.
func Judge(e Evidence) *Loss {
	running := map[string]int{}
	for _, node := range e.Nodes {
		// A node naming no revision runs nothing of a revision (an empty
		// config it reverted to): it is no evidence of one.
		if node.Revision != "" {
			running[node.Revision]++
		}
	}
	return JudgeCounts(e.Rollouts || e.Confirmed != nil, running, e.Held)
}

// JudgeCounts is the rule for a caller that keeps, instead of every node,
// how many live nodes run configs of each revision (the dashboard, from
// its watch of the nodes bucket): settled is a recorded rollout or an
// operator's confirmation.
func JudgeCounts(settled bool, running map[string]int, held map[string]bool) *Loss {
	if settled {
		return nil
	}
	l := &Loss{}
	for rev, c := range running {
		if rev == "" || c <= 0 || held[rev] {
			continue
		}
		l.Nodes += c
		l.Revisions = append(l.Revisions, RevisionCount{Revision: rev, Nodes: c})
	}
	if l.Nodes == 0 {
		return nil
	}
	slices.SortFunc(l.Revisions, func(a, b RevisionCount) int {
		return cmp.Or(cmp.Compare(b.Nodes, a.Nodes), strings.Compare(a.Revision, b.Revision))
	})
	return l
}

// String says the situation: "the store is empty but 3 nodes run configs
// of revision 110b0b1c2d3e".
func (l *Loss) String() string {
	if l == nil {
		return ""
	}
	nodes := fmt.Sprintf("%d nodes run", l.Nodes)
	if l.Nodes == 1 {
		nodes = "1 node runs"
	}
	if len(l.Revisions) == 1 {
		return fmt.Sprintf("the store is empty but %s configs of revision %s", nodes, revName(l.Revisions[0].Revision))
	}
	parts := make([]string, len(l.Revisions))
	for i, r := range l.Revisions {
		parts[i] = fmt.Sprintf("%s (%d)", revName(r.Revision), r.Nodes)
	}
	return fmt.Sprintf("the store is empty but %s configs of revisions %s", nodes, strings.Join(parts, ", "))
}

// RevisionIDs are the revisions the nodes run, as in Revisions.
func (l *Loss) RevisionIDs() []string {
	out := make([]string, len(l.Revisions))
	for i, r := range l.Revisions {
		out[i] = r.Revision
	}
	return out
}

func revName(id string) string {
	return render.Short(id)
}

// ErrLost is matched (errors.Is) by the error Refusal returns.
var ErrLost = errors.New("the store is lost")

// Refusal is the error a refused change answers with: the situation, that
// nothing was done, and the way out.
func Refusal(l *Loss, what string) error {
	return fmt.Errorf("%w: %s; %s is refused and nothing was stored: %s", ErrLost, l, what, WayOut)
}

// Read gathers the evidence from b (which must hold the rollouts, control,
// nodes and revisions buckets) and judges it. The common case costs one
// Get: a store that records a finished rollout is not lost.
func Read(ctx context.Context, b *buckets.Set) (*Loss, Evidence, error) {
	nodes := store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	return ReadFrom(ctx, b, func(ctx context.Context) ([]store.Entry[*sluicev1.NodePresence], error) { return nodes.List(ctx, ">") })
}

// ReadFrom is Read with the nodes' presence from list, for a reader that
// keeps it already (the configurator's store.View): an answer as a listing
// of the nodes bucket made at the call would give.
func ReadFrom(ctx context.Context, b *buckets.Set, list func(context.Context) ([]store.Entry[*sluicev1.NodePresence], error)) (*Loss, Evidence, error) {
	var e Evidence
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	_, err := refs.Get(ctx, contract.KeyLastApplied)
	switch {
	case err == nil, errors.Is(err, store.ErrUndecodable): // a value is there: the store has a history
		e.Rollouts = true
		return nil, e, nil
	case !errors.Is(err, store.ErrNotFound):
		return nil, e, fmt.Errorf("read %s/%s: %w", contract.BucketRollouts, contract.KeyLastApplied, err)
	}
	// A young store: any rollout record at all (one running, one rolled back).
	keys, err := refs.Keys(ctx)
	if err != nil {
		return nil, e, fmt.Errorf("list %s: %w", contract.BucketRollouts, err)
	}
	if slices.ContainsFunc(keys, func(k string) bool { return !contract.IsControlKey(k) }) {
		e.Rollouts = true
		return nil, e, nil
	}
	c, err := store.New(b.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} }).Get(ctx, contract.KeyStoreConfirm)
	switch {
	case err == nil:
		e.Confirmed = c.Value
		return nil, e, nil
	case errors.Is(err, store.ErrUndecodable), errors.Is(err, store.ErrNotFound):
		// An unreadable confirmation confirms nothing.
	default:
		return nil, e, fmt.Errorf("read %s/%s: %w", contract.BucketControl, contract.KeyStoreConfirm, err)
	}
	nodes, err := list(ctx)
	if err != nil {
		return nil, e, fmt.Errorf("list %s: %w", contract.BucketNodes, err)
	}
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	e.Held = map[string]bool{}
	for _, n := range nodes {
		p := n.Value
		if n.Err != nil || contract.IsControlKey(n.Key) || p.GetInForceRevision() == "" {
			continue
		}
		e.Nodes = append(e.Nodes, Node{Node: n.Key, Revision: p.GetInForceRevision(), Fingerprint: p.GetInForceFingerprint()})
		id := p.GetInForceRevision()
		if _, seen := e.Held[id]; seen {
			continue
		}
		_, err := revs.Get(ctx, id)
		switch {
		case err == nil, errors.Is(err, store.ErrUndecodable):
			e.Held[id] = true
		case errors.Is(err, store.ErrNotFound):
			e.Held[id] = false
		default:
			return nil, e, fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, id, err)
		}
	}
	return Judge(e), e, nil
}
