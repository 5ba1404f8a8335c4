package dashboard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The revision in force. A node's revision on the page is the one `sluice
// get nodes` shows (view.Node.Revision): the last-applied rollout's
// revision when the node runs the config that revision gives it, else the
// revision its agent last applied a config from. A rollout does not
// write to a node whose config it leaves unchanged, so that node's status
// keeps naming the revision that last changed it; the revision in force is
// what it runs all the same.
//
// The watch of sluice-rollouts notes last-applied (noteApplied);
// followApplied reads its revision from sluice-revisions, one Get each time
// it changes, and the state renders it once per distinct label set
// (view.InForce) for the nodes it sends.

// noteApplied records rollouts/last-applied's value (nil: deleted) and
// wakes followApplied when the revision it names changed. A value that does
// not decode names none: the nodes' own revisions are shown, as `sluice
// get nodes` does. The caller holds mu.
func (s *state) noteApplied(data []byte) error {
	ref := &sluicev1.RolloutRef{}
	var err error
	if data != nil {
		if err = store.Unmarshal(data, ref); err != nil {
			ref = &sluicev1.RolloutRef{}
		}
	}
	s.appliedRollout = ref.GetRollout()
	if ref.GetRevision() != s.appliedID {
		s.appliedID = ref.GetRevision()
		select {
		case s.appliedWake <- struct{}{}:
		default:
		}
	}
	return err
}

// followApplied reads the revision last-applied names whenever it changes,
// until ctx ends, and puts it in force on the state; a read that fails is
// tried again after a growing pause (up to 5 s).
func (s *state) followApplied(ctx context.Context, js jetstream.JetStream, logf func(string, ...any)) {
	var revisions *store.Store[*sluicev1.Revision]
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.appliedWake:
		}
		for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			err := s.readApplied(ctx, js, &revisions)
			if err == nil || ctx.Err() != nil {
				break
			}
			logf("dashboard: the revision in force: %v (retrying in %s)", err, wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// readApplied reads the revision last-applied names, unless it is read
// already, and puts it in force.
func (s *state) readApplied(ctx context.Context, js jetstream.JetStream, revisions **store.Store[*sluicev1.Revision]) error {
	s.mu.Lock()
	id, read := s.appliedID, s.appliedRead
	s.mu.Unlock()
	if id == read {
		return nil
	}
	var rev *sluicev1.Revision
	if id != "" {
		if *revisions == nil {
			kv, err := js.KeyValue(ctx, contract.BucketRevisions)
			if err != nil {
				return fmt.Errorf("open bucket %s: %w", contract.BucketRevisions, err)
			}
			*revisions = store.New(kv, func() *sluicev1.Revision { return &sluicev1.Revision{} })
		}
		e, err := (*revisions).Get(ctx, id)
		switch {
		case err == nil:
			rev = e.Value
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
			// None to go by: the nodes' own revisions (as sluice get nodes).
		default:
			return fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, id, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appliedID == id {
		s.setApplied(id, rev)
	}
	return nil
}

// setApplied puts rev (read for last-applied's id; nil: none) in force and
// notes every node whose revision on the page changes with it; the caller
// holds mu.
func (s *state) setApplied(id string, rev *sluicev1.Revision) {
	was := s.applied
	s.applied, s.appliedRead = nil, id
	if rev != nil {
		s.applied = view.NewInForce(rev)
	}
	for _, name := range slices.Sorted(maps.Keys(s.presences)) {
		n := view.Node{Name: name, Presence: s.presences[name], Status: s.statuses[name]}
		if n.Status != nil && was.Of(n) != s.applied.Of(n) {
			s.note(kindNode, name, nil)
		}
	}
}

// withInForce sets each node's InForce, as `sluice get nodes` does; the
// caller holds mu.
func (s *state) withInForce(nodes []view.Node) []view.Node {
	for i := range nodes {
		nodes[i].InForce = s.applied.Of(nodes[i])
	}
	return nodes
}
