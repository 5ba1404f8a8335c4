// Package reaper is sluice's garbage collector. It owns deleting what no
// longer has an owner: the keys of departed nodes (pass.go, with the sets
// it compares in fleet.go), intents marked for deletion once nothing
// references them (intents.go, which also records why it keeps each one it
// does not delete), and revisions past their retention (revisions.go). All
// three delete nothing while the store is lost (storeloss.go). This file
// holds the Run loop, its timers and its watches.
//
// A node has departed when its presence (its agent's heartbeat lease in the
// nodes bucket) has been absent for longer than Grace. The reaper then
// deletes the node's desired and backup configs and its status, each with
// compare-and-set on the revision it read, after checking once more with a
// Get that the node has not come back. It is level-triggered: every pass
// (each Interval, soon after the nodes-bucket watcher reports a delete or
// expiry, and when an absence it timed passes Grace) lists the nodes that
// own keys and compares them with the nodes present.
//
// Absence is timed from when this reaper process first observed it, in
// memory: a restarted reaper starts every timer again, which can only delay
// a reap, never hasten one. A node that comes back clears its timer.
//
// It never deletes what is referenced or what it cannot read: a departed
// node whose desired config belongs to the active rollout (rollouts/active),
// a revert included, keeps its keys until that rollout ends; so does a node
// with a key refused at intake, and every node with a desired config
// while rollouts/active itself is refused. Each wait is logged and
// published once (ReapPostponed, ValueUnreadable). Control keys ("_"
// prefix, e.g. the coordinator's "_fence") are never a node's. A delete that
// loses its compare-and-set race is not an error: the next pass looks again.
// docs/reaper.md says the same for operators. While the control plane is
// paused (sluice pause) Run starts no pass, and acknowledges the pause in
// its instance presence once the pass in progress ended.
//
// Entry point: New(cfg).Run(ctx); Pass runs one pass.
package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/health"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/pause"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Component is the reaper's name in logs and events.
const Component = "reaper"

// Event types the reaper emits (kind node, id the node).
const (
	// EventNodeReaped: a departed node's keys were deleted.
	EventNodeReaped = "NodeReaped"
	// EventReapPostponed: a departed node's keys are kept because the
	// active rollout still references them (or the reaper cannot tell);
	// emitted once per node and reason.
	EventReapPostponed = "ReapPostponed"
	// EventReapHeld: more of the fleet departed at once than the guard
	// allows; their keys are kept until they come back or an operator
	// confirms (sluice reaper confirm). Kind instance, id reaper.<instance>;
	// emitted once per held set.
	EventReapHeld = "ReapHeld"
)

// Defaults.
const (
	DefaultGrace    = 5 * time.Minute
	DefaultInterval = 30 * time.Second
	// DefaultHoldShare: more than half of the nodes departing at once is
	// held for an operator (see Config.HoldShare).
	DefaultHoldShare = 0.5
)

// passDelay is how long after a presence delete or expiry the next pass
// runs, so that many nodes leaving together cost one pass.
const passDelay = time.Second

// Config configures the reaper.
type Config struct {
	Conn     *nats.Conn // required
	Settings contract.Settings
	Log      zerolog.Logger
	Now      func() time.Time // nil = time.Now

	// Grace is how long a node's presence must be absent before its keys
	// are deleted (default 5m).
	Grace time.Duration
	// Interval is how often a pass runs (default 30s).
	Interval time.Duration
	// Instance names this reaper in the instances bucket (default host-pid).
	Instance string
	// RevisionRetention is how many revisions are kept besides the
	// referenced ones (default 50; negative keeps all).
	RevisionRetention int
	// HoldShare guards against mass deletion: when at least two departed
	// nodes are due and they are more than this share of the nodes that own
	// keys (a control-plane or network outage looks like that), none is
	// reaped until it comes back or an operator confirms it (control
	// reaper.confirm). Default 0.5; 1 or more turns the guard off.
	HoldShare float64
	// Version is the build version, announced in the micro service (default "dev").
	Version string
	// Metrics, when set, counts deletions (metrics.go).
	Metrics *Metrics
}

// Reaper deletes what departed nodes left behind.
type Reaper struct {
	cfg Config
	log zerolog.Logger

	mu     sync.Mutex           // serializes passes; guards the fields below
	absent map[string]time.Time // node → when this process first saw it absent
	held   map[string]string    // node → why its reap is postponed, as last reported
	// holding is the set of nodes the mass-deletion guard holds, as last
	// reported ("" = none).
	holding string
	// lost is the store loss as last reported ("" = the store is whole),
	// so a pass held by it says so once (storeloss.go).
	lost   string
	h      *handles // opened on first use
	view   *watched // the fleet as Run's watches see it (fleet.go); nil outside Run
	passes int      // passes so far (every relistEvery-th lists)
	// listings counts the passes that listed the buckets' keys (fleet.go).
	listings atomic.Uint64

	// gate holds passes while the control plane is paused: the reaper
	// acknowledges a pause once no pass runs (Run only; Pass ignores it).
	gate *pause.Gate

	readiness health.State
	statusMu  sync.Mutex
	deleted   map[string]uint64 // by kind (KindNodes, …): the status endpoint's counts
	lastPass  time.Time
	// kept is why the last look at the intents marked for deletion kept
	// each one it did not delete (intents.go), keptAt when.
	kept   []contract.KeptIntents
	keptAt time.Time
}

// Ready reports whether Run has bound its buckets and passes, and why in one line.
func (r *Reaper) Ready() (bool, string) { return r.readiness.Get() }

// deletedSome counts n deletions of kind, in the metrics and the status.
func (r *Reaper) deletedSome(kind string, n int) {
	r.statusMu.Lock()
	r.deleted[kind] += uint64(n)
	r.statusMu.Unlock()
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.deletions.WithLabelValues(kind).Add(float64(n))
	}
}

// passEnded records when a pass ended.
func (r *Reaper) passEnded(at time.Time) {
	r.statusMu.Lock()
	r.lastPass = at
	r.statusMu.Unlock()
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.lastPass.Set(float64(at.UnixMilli()) / 1000)
	}
}

// Status is what the status endpoint of the reaper's micro service answers.
func (r *Reaper) Status() contract.ReaperStatus {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	st := contract.ReaperStatus{Instance: r.cfg.Instance, Version: r.cfg.Version, LastPass: r.lastPass, Deleted: maps.Clone(r.deleted),
		Kept: r.kept, KeptAt: r.keptAt}
	if !r.lastPass.IsZero() {
		st.NextPass = r.lastPass.Add(r.cfg.Interval)
	}
	return st
}

// handles are the buckets and emitter, opened once.
type handles struct {
	em *events.Emitter
	// quarantine reports values refused at intake (a value the reaper
	// needed is left alone, with the key and the node it belongs to), once
	// per revision, not every pass.
	quarantine *events.Quarantine
	nodes      *store.Store[*sluicev1.NodePresence]
	configs    *store.Store[*sluicev1.DesiredConfig]
	status     *store.Store[*sluicev1.NodeStatus]
	rollouts   *store.Store[*sluicev1.RolloutRef]  // only rollouts/active is read
	confirms   *store.Store[*sluicev1.ReapConfirm] // control/reaper.confirm
	intents    *store.Store[*sluicev1.StoredIntent]
	revs       *store.Store[*sluicev1.Revision]
	heads      *store.Store[*sluicev1.Head]
	// revisions reads revisions/pending (an ApplyJournal), existence only.
	revisions *store.Store[*sluicev1.ApplyJournal]
	records   *store.Store[*sluicev1.Rollout]
	set       *buckets.Set // whether the store is lost (storeloss.go)
}

// New checks cfg and fills in defaults. It does no I/O.
func New(cfg Config) (*Reaper, error) {
	if cfg.Conn == nil {
		return nil, errors.New("reaper: Conn is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Settings.NodeLease <= 0 {
		cfg.Settings = contract.DefaultSettings()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.RevisionRetention == 0 {
		cfg.RevisionRetention = DefaultRevisionRetention
	}
	if cfg.HoldShare <= 0 {
		cfg.HoldShare = DefaultHoldShare
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	r := &Reaper{
		cfg:     cfg,
		log:     cfg.Log.With().Str(logging.FieldComponent, Component).Logger(),
		absent:  map[string]time.Time{},
		held:    map[string]string{},
		deleted: map[string]uint64{KindNodes: 0, KindIntents: 0, KindRevisions: 0},
	}
	r.readiness.Set(false, "binding the buckets")
	return r, nil
}

// Run ensures the buckets, then passes every Interval, soon after a node's
// presence disappears and when a node's absence passes Grace, until ctx
// ends. It returns nil when ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	js, err := jetstream.New(r.cfg.Conn)
	if err != nil {
		return fmt.Errorf("reaper: jetstream: %w", err)
	}
	if _, err := buckets.Prepare(ctx, js, r.cfg.Settings, contract.ComponentReaper, buckets.WithLog(r.log)); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reaper: %w", err)
	}
	r.mu.Lock()
	h, err := r.openWith(ctx, js)
	r.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		h.em.Flush(fctx)
	}()

	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reaper: %w", err)
	}
	gate, stopPause := pause.Start(ctx, pause.Service{
		Control: b.Control, Instances: b.Instances, Component: Component, Instance: r.cfg.Instance, Version: r.cfg.Version,
		What: "pass", Interval: r.cfg.Settings.InstanceInterval(), Log: r.log, Now: r.cfg.Now, Emit: h.em.Emit,
	})
	defer stopPause()
	r.gate = gate
	stopAPI, err := r.serveStatus()
	if err != nil {
		return err
	}
	defer stopAPI()
	r.readiness.Set(true, fmt.Sprintf("buckets bound; a pass every %s", r.cfg.Interval))

	r.mu.Lock()
	r.view = newWatched()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.view = nil
		r.mu.Unlock()
	}()
	watch := r.watchNodes(ctx, h)
	statusKeys := watchKeysOf(ctx, r, h.status, "node statuses")
	configKeys := watchKeysOf(ctx, r, h.configs, "node configs")
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	soon := newSoon()
	defer soon.timer.Stop()
	// After each pass, the next one comes when the first absence it timed
	// passes Grace, if that is before the interval's tick: a reap is due
	// then, not up to an Interval later.
	pass := func(why string) {
		r.pass(ctx, why)
		if due := r.nextDue(r.cfg.Now()); !due.IsZero() {
			soon.at(due.Sub(r.cfg.Now())+time.Millisecond, "absence past grace")
		}
	}
	pass("start")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if watch == nil {
				watch = r.watchNodes(ctx, h)
			}
			if statusKeys == nil {
				statusKeys = watchKeysOf(ctx, r, h.status, "node statuses")
			}
			if configKeys == nil {
				configKeys = watchKeysOf(ctx, r, h.configs, "node configs")
			}
			pass("interval")
		case <-soon.timer.C:
			pass(soon.fired())
		case e, ok := <-watch:
			if !ok {
				// The watcher ended; passes still run on the interval (and
				// list), and the next tick watches again.
				watch = nil
				r.ended(partPresence)
				continue
			}
			if r.observe(e) {
				soon.at(passDelay, "presence lost")
			}
		case e, ok := <-statusKeys:
			if !seeKey(r, partStatus, e, ok) {
				statusKeys = nil
			}
		case e, ok := <-configKeys:
			if !seeKey(r, partConfigs, e, ok) {
				configKeys = nil
			}
		}
	}
}

// soon is the timer of the next pass before the interval's tick, and why.
type soon struct {
	timer *time.Timer
	when  time.Time // zero while not armed
	why   string
}

func newSoon() *soon {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &soon{timer: t}
}

// at arms the timer for d from now, unless it is armed for sooner.
func (s *soon) at(d time.Duration, why string) {
	when := time.Now().Add(d)
	if !s.when.IsZero() && !when.Before(s.when) {
		return
	}
	s.timer.Reset(d)
	s.when, s.why = when, why
}

// fired disarms s, whose timer fired, and says why it was armed.
func (s *soon) fired() string {
	s.when = time.Time{}
	return s.why
}

// nextDue is when the first node whose absence is timed and not yet past
// Grace will be (zero: none is): a node already past it was reaped, or is
// held, and the interval looks at it again.
func (r *Reaper) nextDue(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	for _, since := range r.absent {
		if due := since.Add(r.cfg.Grace); !due.Before(now) && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next
}

// watchNodes watches which nodes are present (keys and deletes, not the
// heartbeats' values: a presence's content is not the reaper's business);
// nil (retried on the next tick) if it cannot.
func (r *Reaper) watchNodes(ctx context.Context, h *handles) <-chan store.Entry[*sluicev1.NodePresence] {
	return watchKeysOf(ctx, r, h.nodes, "node presence")
}

// watchKeysOf watches the keys of s (part of the fleet view: presence,
// statuses or node configs; what an earlier watch of it saw was forgotten
// when it ended); nil (retried on the next tick) if it cannot.
func watchKeysOf[T proto.Message](ctx context.Context, r *Reaper, s interface {
	WatchKeys(context.Context, string) (<-chan store.Entry[T], error)
}, what string) <-chan store.Entry[T] {
	w, err := s.WatchKeys(ctx, ">")
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("watch " + what + "; passes list them until the next interval watches again")
		}
		return nil
	}
	return w
}

// ended notes that part's watch ended: passes list until it is made again.
func (r *Reaper) ended(part int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view.restart(part)
}

// seeKey records an entry of the status or nodeconfigs keys watch; false
// when the watch ended (ok false).
func seeKey[T proto.Message](r *Reaper, part int, e store.Entry[T], ok bool) bool {
	if !ok {
		r.ended(part)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view.see(part, e.Key, e.Deleted)
	return true
}

// observe notes a presence change seen by the watcher. It reports whether a
// presence was lost, so a pass should run soon.
func (r *Reaper) observe(e store.Entry[*sluicev1.NodePresence]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view.see(partPresence, e.Key, e.Deleted)
	if e.Key == "" { // caught up with the current values
		return false
	}
	if !e.Deleted {
		delete(r.absent, e.Key)
		delete(r.held, e.Key)
		return false
	}
	if _, ok := r.absent[e.Key]; !ok {
		r.absent[e.Key] = r.cfg.Now()
	}
	return true
}

func (r *Reaper) pass(ctx context.Context, why string) {
	end, held := r.gate.Begin()
	if held != nil {
		r.log.Debug().Str(logging.FieldReason, contract.DescribePause(held)).Msg("no pass while the control plane is paused")
		return
	}
	defer end()
	if err := r.CollectIntents(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str(logging.FieldReason, why).Msg("collect marked intents; retrying at the next pass")
	}
	if err := r.CollectRevisions(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str(logging.FieldReason, why).Msg("collect old revisions; retrying at the next pass")
	}
	if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str(logging.FieldReason, why).Msg("reaper pass; retrying at the next one")
	}
	r.passEnded(r.cfg.Now())
}

// serveStatus registers the micro service contract.ReaperService with a
// status endpoint (contract.ReaperStatus); the returned func unregisters it.
func (r *Reaper) serveStatus() (func(), error) {
	svc, err := micro.AddService(r.cfg.Conn, micro.Config{
		Name:        contract.ReaperService,
		Version:     contract.ServiceVersion(r.cfg.Version),
		Description: "sluice reaper: deletes what nothing references; the status endpoint counts what it deleted and says why it keeps the intents marked for deletion it has not deleted",
		Metadata:    map[string]string{"instance": r.cfg.Instance, "build": r.cfg.Version},
		// `nats micro stats` shows each instance's status.
		StatsHandler: func(*micro.Endpoint) any { return r.Status() },
	})
	if err != nil {
		return nil, fmt.Errorf("reaper: register micro service %s: %w", contract.ReaperService, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		b, _ := json.Marshal(r.Status())
		_ = req.Respond(b)
	}), micro.WithEndpointSubject(contract.SubjectReaperStatus))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("reaper: status endpoint: %w", err)
	}
	return func() { _ = svc.Stop() }, nil
}

// open opens the buckets once; r.mu must be held.
func (r *Reaper) open(ctx context.Context) (*handles, error) {
	if r.h != nil {
		return r.h, nil
	}
	js, err := jetstream.New(r.cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("reaper: jetstream: %w", err)
	}
	return r.openWith(ctx, js)
}

func (r *Reaper) openWith(ctx context.Context, js jetstream.JetStream) (*handles, error) {
	if r.h != nil {
		return r.h, nil
	}
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	em := events.NewEmitter(js, r.cfg.Log, Component, r.cfg.Now)
	r.h = &handles{
		em:         em,
		quarantine: events.NewQuarantine(em),
		nodes:      store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }),
		configs:    store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		status:     store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
		rollouts:   store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
		confirms:   store.New(b.Control, func() *sluicev1.ReapConfirm { return &sluicev1.ReapConfirm{} }),
		intents:    store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }),
		revs:       store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }),
		heads:      store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }),
		revisions:  store.New(b.Revisions, func() *sluicev1.ApplyJournal { return &sluicev1.ApplyJournal{} }),
		records:    store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }),
		set:        b,
	}
	return r.h, nil
}

// Instance is the name this reaper announces itself under.
func (r *Reaper) Instance() string { return r.cfg.Instance }
