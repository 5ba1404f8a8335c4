package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// update is one message of GET /api/v1/stream. A snapshot (reset true)
// carries everything; a later update only what changed since the one
// before, each key with its current value.
type update struct {
	Reset bool `json:"reset,omitempty"`
	// Fleet is the nodes that changed (a snapshot: every node), compact:
	// see compactFleet. GET /api/v1/nodes/{name} has a node's whole object.
	Fleet        *compactFleet     `json:"fleet,omitempty"`
	RemovedNodes []string          `json:"removedNodes,omitempty"` // neither presence nor status any more
	Rollouts     []json.RawMessage `json:"rollouts,omitempty"`     // as get rollouts -o json
	Timelines    []view.Timeline   `json:"timelines,omitempty"`    // of those rollouts: plan against actual
	Tallies      []tally           `json:"tallies,omitempty"`      // of those rollouts: their counts by category
	Active       *string           `json:"active,omitempty"`       // the active rollout's id, "" when none
	Applied      *string           `json:"applied,omitempty"`      // the last-applied rollout's id (its revision is in force), "" when none
	Head         *headView         `json:"head,omitempty"`         // sluice-revisions/head, as stored
	Fingerprints []json.RawMessage `json:"fingerprints,omitempty"` // as get fingerprints -o json
	Removed      []string          `json:"removedFingerprints,omitempty"`
	// Pause is as get pause -o json: the request, then the services'
	// instances (the agents are counted in PauseSummary).
	Pause        []json.RawMessage  `json:"pause,omitempty"`
	PauseSummary *pauseSummary      `json:"pauseSummary,omitempty"`
	Leader       json.RawMessage    `json:"leader,omitempty"` // the coordinator's lease; {} when none
	Coordinator  *coordinatorView   `json:"coordinator,omitempty"`
	Freezes      *[]json.RawMessage `json:"freezes,omitempty"`    // every freeze, as get freezes -o json
	Registries   *[]json.RawMessage `json:"registries,omitempty"` // every registry's status
	Events       []json.RawMessage  `json:"events,omitempty"`     // streamEvent, oldest first
	Unreadable   []view.Unreadable  `json:"unreadable,omitempty"`
	// StoreLoss is the lost store's banner (pkg/storeloss), "" once it is
	// not lost; absent when unchanged.
	StoreLoss *string `json:"storeLoss,omitempty"`
	// Storage is the storage trouble banner (JetStream refuses writes for
	// want of space, pkg/store.StorageError), "" once writes land; absent
	// when unchanged.
	Storage *string `json:"storage,omitempty"`
}

// snapshot is everything; the caller holds mu.
func (s *state) snapshot() (update, error) {
	loss, storage := s.storeLoss, s.storage
	u := update{Reset: true, Fleet: compact(s.fleet(), s.groupBy, s.category, s.departed), StoreLoss: &loss, Storage: &storage}
	var err error
	rs := s.rolloutsNewestFirst()
	if u.Rollouts, err = view.ProtoObjects(rs); err != nil {
		return u, err
	}
	u.Timelines = timelines(rs, time.Now())
	u.Tallies = tallies(rs)
	if u.Coordinator, err = s.coordinator(); err != nil {
		return u, err
	}
	if err = s.setFreezes(&u); err != nil {
		return u, err
	}
	if err = s.setRegistries(&u); err != nil {
		return u, err
	}
	active, applied := s.active, s.appliedRollout
	u.Active, u.Applied = &active, &applied
	if u.Fingerprints, err = view.ProtoObjects(s.fingerprints()); err != nil {
		return u, err
	}
	if u.Pause, u.PauseSummary, err = s.pauseView(); err != nil {
		return u, err
	}
	if u.Leader, err = s.leaderJSON(); err != nil {
		return u, err
	}
	if u.Head, err = s.headJSON(); err != nil {
		return u, err
	}
	u.Events = append([]json.RawMessage(nil), s.events...)
	u.Unreadable = s.unreadableList()
	return u, nil
}

// headView is sluice-revisions/head as the page shows it: the stored head
// (as nats kv get shows it), or why it does not decode; neither when none
// is stored (nothing was applied yet).
type headView struct {
	Head       json.RawMessage `json:"head,omitempty"`
	Unreadable string          `json:"unreadable,omitempty"`
}

// headJSON; the caller holds mu.
func (s *state) headJSON() (*headView, error) {
	v := &headView{Unreadable: s.headBad}
	if s.head != nil {
		b, err := view.JSON(s.head)
		if err != nil {
			return nil, err
		}
		v.Head = b
	}
	return v, nil
}

func (s *state) leaderJSON() (json.RawMessage, error) {
	if s.leader == nil {
		return json.RawMessage("{}"), nil
	}
	return view.JSON(s.leader)
}

// changed is the update of changes, each key once with its current value;
// the caller holds mu.
func (s *state) changed(changes []change) (update, error) {
	var u update
	seen := map[string]bool{}
	pause, coord, freezes, registries := false, false, false, false
	var nodes []view.Node
	var rs []*sluicev1.Rollout
	for _, c := range changes {
		if c.kind == kindEvent {
			u.Events = append(u.Events, c.event)
			continue
		}
		if seen[c.kind+"/"+c.key] {
			continue
		}
		seen[c.kind+"/"+c.key] = true
		var err error
		switch c.kind {
		case kindNode:
			n, ok := s.node(c.key)
			if !ok {
				u.RemovedNodes = append(u.RemovedNodes, c.key)
				break
			}
			nodes = append(nodes, n)
		case kindRollout:
			if r, ok := s.rollouts[c.key]; ok {
				b, err2 := view.JSON(r)
				u.Rollouts, err = append(u.Rollouts, b), err2
				rs = append(rs, r)
			}
		case kindActive:
			active := s.active
			u.Active = &active
		case kindApplied:
			applied := s.appliedRollout
			u.Applied = &applied
		case kindFingerprint:
			f, ok := s.fps[c.key]
			if !ok {
				u.Removed = append(u.Removed, c.key)
				break
			}
			b, err2 := view.JSON(f)
			u.Fingerprints, err = append(u.Fingerprints, b), err2
		case kindPause:
			pause = true
		case kindInstance:
			pause, coord = true, true
		case kindHead:
			u.Head, err = s.headJSON()
		case kindLeader:
			u.Leader, err = s.leaderJSON()
			coord = true
		case kindFreeze:
			freezes = true
		case kindRegistry:
			registries = true
		case kindStoreLoss:
			loss := s.storeLoss
			u.StoreLoss = &loss
		case kindStorage:
			storage := s.storage
			u.Storage = &storage
		}
		if err != nil {
			return u, err
		}
	}
	if pause {
		// The whole pause view: its acknowledgements are read together.
		var err error
		if u.Pause, u.PauseSummary, err = s.pauseView(); err != nil {
			return u, err
		}
	}
	if len(nodes) > 0 {
		u.Fleet = compact(nodes, s.groupBy, s.category, s.departed)
	}
	if len(rs) > 0 {
		u.Timelines = timelines(rs, time.Now())
		u.Tallies = tallies(rs)
	}
	var err error
	if coord {
		if u.Coordinator, err = s.coordinator(); err != nil {
			return u, err
		}
	}
	if freezes {
		if err = s.setFreezes(&u); err != nil {
			return u, err
		}
	}
	if registries {
		if err = s.setRegistries(&u); err != nil {
			return u, err
		}
	}
	if len(s.unreadable) > 0 {
		u.Unreadable = s.unreadableList()
	}
	return u, nil
}

func (s *state) setFreezes(u *update) error {
	fs, err := s.freezeList()
	u.Freezes = &fs
	return err
}

func (s *state) setRegistries(u *update) error {
	rs, err := s.registryList()
	u.Registries = &rs
	return err
}

// eventID names the state after a change: the dashboard's run, then the
// change's sequence. A Last-Event-ID of another run gets a snapshot.
func (srv *Server) eventID(seq uint64) string { return srv.run + "-" + strconv.FormatUint(seq, 10) }

// resumeFrom parses a Last-Event-ID: ok is false when it is not of this run.
func (srv *Server) resumeFrom(id string) (uint64, bool) {
	run, seq, found := strings.Cut(id, "-")
	if !found || run != srv.run {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

// handleStream is GET /api/v1/stream: Server-Sent Events, each an update
// with an id. A reconnect sends the id it last saw as Last-Event-ID (or
// ?lastEventId=, which a page that closed its EventSource while hidden
// uses): it then gets every change after it, without a gap, or a snapshot
// when the ring no longer holds them. Updates are sent at most every
// srv.interval, so that a busy rollout costs a viewer about four messages a
// second, whatever the fleet's size.
func (srv *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		httpError(w, http.StatusInternalServerError, "", "streaming is not supported by this connection")
		return
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("lastEventId")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	sent, resumable := srv.resumeFrom(last)
	send := func() error {
		srv.state.mu.Lock()
		var (
			u   update
			err error
		)
		seq := srv.state.seq
		changes, ok := srv.state.since(sent)
		switch {
		case !resumable || !ok:
			u, err = srv.state.snapshot()
			resumable = true
		case len(changes) == 0:
			srv.state.mu.Unlock()
			return nil
		default:
			u, err = srv.state.changed(changes)
		}
		srv.state.mu.Unlock()
		if err != nil {
			return err
		}
		b, err := json.Marshal(u)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %s\nevent: update\ndata: %s\n\n", srv.eventID(seq), b); err != nil {
			return err
		}
		flusher.Flush()
		sent = seq
		return nil
	}
	if err := send(); err != nil {
		return
	}
	tick := time.NewTicker(srv.interval)
	defer tick.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-srv.done:
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-tick.C:
			if err := send(); err != nil {
				return
			}
		}
	}
}

// pauseSummary says in `sluice get pause`'s words what the pause is and
// who has reached it.
type pauseSummary struct {
	Requested string   `json:"requested"` // as REQUESTED: says
	Paused    bool     `json:"paused"`
	Reached   int      `json:"reached"` // instances that acknowledged the requested generation
	Instances int      `json:"instances"`
	Waiting   []string `json:"waiting,omitempty"` // "component instance" of those that did not (at most 20)
}

// pauseView is the pause as get pause -o json prints it, and its summary;
// the caller holds mu.
func (s *state) pauseView() ([]json.RawMessage, *pauseSummary, error) {
	insts := s.instanceList()
	// The services' instances are listed; the agents (one per node) only
	// counted, and named while they have not reached the pause: at 100,000
	// nodes their records alone would be megabytes in every snapshot.
	services := make([]*sluicev1.Instance, 0, len(s.instances))
	for _, in := range insts {
		if in.GetComponent() != contract.ComponentAgent {
			services = append(services, in)
		}
	}
	objs, err := view.PauseObjects(s.pause, services)
	if err != nil {
		return nil, nil, err
	}
	sum := &pauseSummary{Requested: "running (never paused)", Instances: len(insts)}
	if s.pause != nil && s.pause.GetGeneration() > 0 {
		sum.Requested, sum.Paused = contract.DescribePause(s.pause), s.pause.GetPaused()
	}
	for _, in := range insts {
		if contract.PauseReached(in.GetPause(), s.pause.GetGeneration()) {
			sum.Reached++
		} else if len(sum.Waiting) < 20 {
			sum.Waiting = append(sum.Waiting, in.GetComponent()+" "+in.GetInstance())
		}
	}
	return objs, sum, nil
}
