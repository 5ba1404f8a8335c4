package configurator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// After a merged sync of a registry that writes back (registry.Reporter:
// the Kubernetes registry), each document is told what became of it: the
// head that carries it and the revision in force, or why it was refused.
// The write-back never fails or delays the sync beyond its own timeouts:
// its failures are the registry's to log and to note on its status.

// outcomes is what a merged sync did with each document of snap (pure):
// refused with its field errors or conflict, else carried by head, with
// the note of a field that was read but not carried, and whether the
// revision in force (its Intents) holds the document's intents as declared.
func outcomes(snap registry.Snapshot, plan syncPlan, head, inForce registry.Revision) []registry.Outcome {
	held := make(map[string]*sluicev1.Intent, len(inForce.Intents))
	for _, in := range inForce.Intents {
		held[intent.ID(in)] = in
	}
	byIntent := map[string][]string{}
	for _, fe := range plan.invalid {
		byIntent[fe.GetIntent()] = append(byIntent[fe.GetIntent()], intent.FormatFieldError(fe))
	}
	for _, c := range plan.conflicts {
		byIntent[c.GetIntent()] = append(byIntent[c.GetIntent()],
			fmt.Sprintf("%s is owned by %s: its version stays, this one is ignored until one of them drops it", c.GetIntent(), c.GetOwner()))
	}
	out := make([]registry.Outcome, 0, len(snap.Documents))
	for _, doc := range snap.Documents {
		o := registry.Outcome{Origin: doc.Origin, Head: head, InForce: inForce}
		var refused []string
		switch {
		case doc.Err != nil && errors.Is(doc.Err, registry.ErrUnmapped) && len(doc.Intents) > 0:
			o.Note = doc.Err.Error()
		case doc.Err != nil:
			refused = append(refused, doc.Err.Error())
		}
		for _, in := range doc.Intents {
			refused = append(refused, byIntent[intent.ID(in)]...)
		}
		o.Refused = strings.Join(refused, "; ")
		o.InForceHolds = len(doc.Intents) > 0 && !slices.ContainsFunc(doc.Intents, func(in *sluicev1.Intent) bool {
			return !proto.Equal(held[intent.ID(in)], in)
		})
		out = append(out, o)
	}
	return out
}

// report hands a Reporter the outcomes of a merged sync.
func (r *registries) report(ctx context.Context, reg registry.Registry, snap registry.Snapshot, plan syncPlan, log zerolog.Logger) {
	rep, ok := reg.(registry.Reporter)
	if !ok || r.cfg.revisions == nil {
		return
	}
	head, inForce, err := r.cfg.revisions(ctx)
	if err != nil {
		log.Debug().Err(err).Msg("read the head and the revision in force: the write-back waits for the next sync")
		return
	}
	// One budget for all the writes, so that a slow API server delays the
	// next sync by at most a fetch timeout.
	rctx, cancel := context.WithTimeout(ctx, r.cfg.fetchTimeout)
	defer cancel()
	if n, _ := rep.Report(rctx, outcomes(snap, plan, head, inForce), r.cfg.now()); n > 0 {
		log.Info().Int("written", n).Str("revision", head.ID).Msg("registry status written back to its documents")
	}
}

// revisions reads the head and the revision in force (rollouts/last-applied;
// zero when no rollout finished yet) with its intents.
func (s *Service) revisions(ctx context.Context) (head, inForce registry.Revision, err error) {
	h, err := s.st.head.Get(ctx, contract.KeyHead)
	if err != nil {
		return head, inForce, fmt.Errorf("read the head: %w", err)
	}
	head = registry.Revision{ID: h.Value.GetRevision(), Generation: h.Value.GetGeneration()}
	last, err := s.st.refs.Get(ctx, contract.KeyLastApplied)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return head, inForce, nil
	case err != nil:
		return head, inForce, fmt.Errorf("read the revision in force: %w", err)
	}
	rev, err := s.st.revisions.Get(ctx, last.Value.GetRevision())
	if err != nil {
		return head, inForce, fmt.Errorf("read revision %s in force: %w", last.Value.GetRevision(), err)
	}
	return head, registry.Revision{ID: last.Value.GetRevision(), Generation: last.Value.GetGeneration(), Intents: rev.Value.GetIntents()}, nil
}
