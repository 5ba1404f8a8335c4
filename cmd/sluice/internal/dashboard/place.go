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
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The map's cells are the rollout panel's categories: each node is placed
// by contract.Place in the rollout the page shows (the active one, else the
// newest), the same definition its counts (contract.TallyOf) have, and the
// stream sends each node's category (compactFleet.State). A node the
// rollout does not change counts provisioned; it is placed there too,
// because its status reports the fingerprint the rollout's revision
// renders for its labels: the dashboard reads that revision once per
// rollout and renders each node's target from it (render.NodeConfig, as the
// coordinator does), keeping the fingerprints until the revision or the
// node's labels change. Until the revision is read (or when it cannot be),
// a node is on the rollout's config when its status names its revision.
//
// A node whose config the rollout wrote is in progress in the record from
// that write, but its status names its old config until its agent
// acknowledges it. The dashboard watches the desired keys' metadata only
// (no values: a config is the node's whole config), and reads the desired
// config of a node it places pending, while the rollout runs, when its
// key is written no earlier than the rollout started: at most one read per
// node the rollout starts. One that holds the rollout's forward config is
// placed in progress, being written.

// placement is the state the placing keeps; the caller holds state.mu.
type placement struct {
	shown   *sluicev1.Rollout // the record the nodes are placed in
	placer  *contract.Placer
	rev     *sluicev1.Revision // the shown rollout's revision, once read
	want    string             // the revision to read
	targets map[string]string  // node → its fingerprint under rev ("": no labels)
	placed  map[string]string  // node → its category, as last sent
	wake    chan struct{}      // want changed
	// written is node → the rollout whose forward config its desired key
	// held when read; desiredAt when the key was last written (the
	// server's time); fetch the nodes whose desired config to read; read
	// the key's revision last read (never read twice).
	written   map[string]string
	desiredAt map[string]keyWrite
	fetch     map[string]bool
	read      map[string]uint64
	fetchWake chan struct{}
}

func newPlacement() placement {
	return placement{placer: contract.NewPlacer(nil), targets: map[string]string{}, placed: map[string]string{}, wake: make(chan struct{}, 1),
		written: map[string]string{}, desiredAt: map[string]keyWrite{}, fetch: map[string]bool{}, read: map[string]uint64{}, fetchWake: make(chan struct{}, 1)}
}

// shownRollout is the rollout the page shows: the active one, else the
// newest; the caller holds mu.
func (s *state) shownRollout() *sluicev1.Rollout {
	if r, ok := s.rollouts[s.active]; ok {
		return r
	}
	var newest *sluicev1.Rollout
	for _, r := range s.rollouts {
		if newest == nil || rolloutNewer(r, newest) {
			newest = r
		}
	}
	return newest
}

// rolloutNewer orders as view.SortRollouts: started later, then the higher generation.
func rolloutNewer(a, b *sluicev1.Rollout) bool {
	if c := a.GetStartedAt().AsTime().Compare(b.GetStartedAt().AsTime()); c != 0 {
		return c > 0
	}
	return a.GetGeneration() > b.GetGeneration()
}

// replaceAll places every node again when the shown rollout's record
// changed, noting each node whose category changed; the caller holds mu.
func (s *state) replaceAll() {
	r := s.shownRollout()
	if r == s.place.shown {
		return // a record applied is a new value: the same one changed nothing
	}
	newRollout := r.GetId() != s.place.shown.GetId()
	s.place.shown, s.place.placer = r, contract.NewPlacer(r)
	if id := r.GetRevision(); id != s.place.want {
		s.place.want, s.place.rev = id, nil
		clear(s.place.targets)
		select {
		case s.place.wake <- struct{}{}:
		default:
		}
	}
	s.placeEvery()
	if newRollout {
		// A rollout first seen running (this dashboard started during it):
		// the nodes written since it started may not be acknowledged yet.
		for name := range s.place.desiredAt {
			s.wantDesired(name)
		}
	}
}

// keyWrite is when a key was written (the server's time) and at which revision.
type keyWrite struct {
	at  time.Time
	rev uint64
}

// desiredWritten takes a change of the desired key of node (deleted: gone);
// the caller holds mu.
func (s *state) desiredWritten(node string, gone bool, w keyWrite) {
	switch {
	case gone:
		delete(s.place.written, node)
		delete(s.place.desiredAt, node)
		delete(s.place.read, node)
	case w.rev > s.place.read[node]: // not read yet (a read may have seen it before the watch)
		delete(s.place.written, node) // what was read is no longer what is there
		s.place.desiredAt[node] = w
		s.wantDesired(node)
	default:
		s.place.desiredAt[node] = w
	}
	s.placeNode(node, true)
}

// wantDesired asks readDesired to read node's desired config if the shown
// rollout runs, the key was written no earlier than it started (a second
// of margin for the clocks), and node is placed pending; the caller holds mu.
func (s *state) wantDesired(node string) {
	r := s.place.shown
	w, ok := s.place.desiredAt[node]
	if !ok || s.place.read[node] == w.rev || r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING ||
		w.at.Before(r.GetStartedAt().AsTime().Add(-time.Second)) || s.category(node) != contract.CountPending {
		return
	}
	s.place.fetch[node] = true
	select {
	case s.place.fetchWake <- struct{}{}:
	default:
	}
}

// readDesired reads the desired configs wantDesired asked for, until ctx
// ends, and places each node again with what it holds.
func (s *state) readDesired(ctx context.Context, js jetstream.JetStream, logf func(string, ...any)) {
	var configs *store.Store[*sluicev1.DesiredConfig]
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.place.fetchWake:
		}
		if configs == nil {
			kv, err := js.KeyValue(ctx, contract.BucketNodeConfigs)
			if err != nil {
				logf("dashboard: open bucket %s: %v (a node written is drawn pending until its agent acknowledges)", contract.BucketNodeConfigs, err)
				continue
			}
			configs = store.New(kv, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
		}
		s.mu.Lock()
		names := slices.Sorted(maps.Keys(s.place.fetch))
		clear(s.place.fetch)
		s.mu.Unlock()
		for _, name := range names {
			s.mu.Lock()
			still := s.category(name) == contract.CountPending // not acknowledged meanwhile
			s.mu.Unlock()
			if !still {
				continue
			}
			e, err := configs.Get(ctx, contract.DesiredKey(name))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, store.ErrNotFound) {
					logf("dashboard: read %s/%s: %v", contract.BucketNodeConfigs, contract.DesiredKey(name), err)
				}
				continue
			}
			s.mu.Lock()
			s.place.read[name] = e.Revision
			if d := e.Value; !d.GetRevert() && d.GetRollout() != "" && e.Revision >= s.place.desiredAt[name].rev {
				s.place.written[name] = d.GetRollout()
				s.placeNode(name, true)
			}
			s.mu.Unlock()
		}
	}
}

// placeEvery places every node, noting those whose category changed; the
// caller holds mu.
func (s *state) placeEvery() {
	seen := map[string]bool{}
	for name := range s.presences {
		seen[name] = true
		s.placeNode(name, true)
	}
	for name := range s.statuses {
		if !seen[name] {
			s.placeNode(name, true)
		}
	}
}

// placeNode places one node; note says to note it when its category
// changed. The caller holds mu.
func (s *state) placeNode(name string, note bool) string {
	p, st := s.presences[name], s.statuses[name]
	if p == nil && st == nil {
		delete(s.place.placed, name)
		delete(s.place.targets, name)
		return ""
	}
	written := s.place.shown != nil && s.place.written[name] == s.place.shown.GetId()
	k := s.place.placer.Place(name, p != nil, st, s.target(name), written)
	if old, ok := s.place.placed[name]; ok && old == k {
		return k
	}
	s.place.placed[name] = k
	if note {
		s.note(kindNode, name, nil)
	}
	if k == contract.CountPending {
		s.wantDesired(name) // its status or presence came after its desired key's write
	}
	return k
}

// target is name's fingerprint under the shown rollout's revision, "" when
// not known; the caller holds mu.
func (s *state) target(name string) string {
	if s.place.rev == nil {
		return ""
	}
	if fp, ok := s.place.targets[name]; ok {
		return fp
	}
	fp := ""
	if p := s.presences[name]; p != nil {
		fp = render.Fingerprint(render.NodeConfig(s.place.rev, p.GetLabels()))
	}
	s.place.targets[name] = fp
	return fp
}

// category is name's category as placed; the caller holds mu.
func (s *state) category(name string) string {
	if k, ok := s.place.placed[name]; ok {
		return k
	}
	return s.placeNode(name, false)
}

// readTargets reads the shown rollout's revision each time it changes,
// until ctx ends, then places every node again with its target.
func (s *state) readTargets(ctx context.Context, js jetstream.JetStream, logf func(string, ...any)) {
	var revs *store.Store[*sluicev1.Revision]
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.place.wake:
		}
		s.mu.Lock()
		id := s.place.want
		s.mu.Unlock()
		if id == "" {
			continue
		}
		if revs == nil {
			kv, err := js.KeyValue(ctx, contract.BucketRevisions)
			if err != nil {
				logf("dashboard: open bucket %s: %v (nodes the rollout does not change are placed by their revision)", contract.BucketRevisions, err)
				continue
			}
			revs = store.New(kv, func() *sluicev1.Revision { return &sluicev1.Revision{} })
		}
		rev, err := getRevision(ctx, revs, id)
		if err != nil {
			logf("dashboard: %v (nodes the rollout does not change are placed by their revision)", err)
			continue
		}
		s.mu.Lock()
		if s.place.want == id {
			s.place.rev = rev
			clear(s.place.targets)
			s.placeEvery()
		}
		s.mu.Unlock()
	}
}

// getRevision reads revision id, trying again for a while: a rollout's
// record may be seen before its revision is.
func getRevision(ctx context.Context, revs *store.Store[*sluicev1.Revision], id string) (*sluicev1.Revision, error) {
	wait := 100 * time.Millisecond
	for {
		e, err := revs.Get(ctx, id)
		if err == nil {
			return e.Value, nil
		}
		if !errors.Is(err, store.ErrNotFound) || wait > 2*time.Second {
			return nil, fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, id, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// tally is one rollout's counts by category (contract.TallyOf), as the
// rollout panel and the History panel draw them: the page adds nothing up
// itself.
type tally struct {
	Rollout string `json:"rollout"`
	contract.Tally
	// Other is the forward categories counting a node that the History
	// panel has no column for (view.HistoryCounts), as `sluice rollout
	// history` lists them under OTHER: with the columns they add up to
	// the total.
	Other []contract.Category `json:"other"`
}

func tallies(rs []*sluicev1.Rollout) []tally {
	out := make([]tally, 0, len(rs))
	for _, r := range rs {
		t := contract.TallyOf(r)
		out = append(out, tally{Rollout: r.GetId(), Tally: t, Other: t.Rest(view.HistoryCounts...)})
	}
	return out
}
