package chaos

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// inForceUnrenderable reports whether the revision in force (last-applied)
// still holds garbage the harness wrote, and is not the head's revision.
// The configurator rewrites only the head's revision (the intents it holds
// are stored nowhere else for an older one: docs/intents.md, "revisions/
// <id>"), so after a rollback the revision in force stays unreadable, and
// the coordinator cannot render the config in force for a node that comes
// back after its keys were reaped: that node waits, without a desired key,
// until the next change (docs/rollouts.md, "revision in force
// unreadable"). Seed 143 reached it once a gate rolled its change back.
// Its error is a read that failed.
func (s *system) inForceUnrenderable(ctx context.Context) (bool, error) {
	b := s.Env().Buckets
	ref, err := readRest(ctx, s, b.Rollouts, contract.KeyLastApplied, &sluicev1.RolloutRef{})
	if err != nil {
		return false, failed(err)
	}
	head, err := readProto(ctx, s, b.Revisions, contract.KeyHead, &sluicev1.Head{})
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, failed(err)
	}
	if err == nil && head.GetRevision() == ref.GetRevision() {
		return false, nil // the configurator repairs it
	}
	m, err := s.leaderMsg(ctx, b.Revisions, map[string]any{"last_by_subj": kvSubject(b.Revisions, ref.GetRevision())})
	if err != nil {
		return false, failed(err)
	}
	return !m.deleted && !wellFormed(b.Revisions.Bucket(), ref.GetRevision(), m.data) &&
		s.spoiled.at(b.Revisions.Bucket(), ref.GetRevision(), m.seq) != nil, nil
}
