// Package configurator is the configurator service: the single writer of
// intents and revisions. It serves the API (a NATS micro service, api.go;
// one file a verb: apply.go, delete.go, undo.go, retry.go, and sync.go for
// a registry's answer), validates every batch against the whole effective set of
// intents and verifies that set on the present nodes (the fleet rules,
// verify.go), and when that set changes writes an immutable, content-addressed
// revision and moves the head to it (commit.go). Entry point: New(cfg).Run(ctx).
//
// State, all in the revisions and intents buckets:
//
//	intents/<kind>.<name>  StoredIntent (marked_for_deletion instead of deleting)
//	revisions/<id>         Revision, never changed once written
//	revisions/head         Head: the revision to roll out, with a generation
//	revisions/pending      ApplyJournal: the apply in progress, with what it overwrites
//
// A batch is all or nothing, even across a crash: every check (validation,
// and that each value fits in one message) comes before the first write;
// the journal is written before the first intent, and whoever finds it —
// the apply itself, the next apply, or Run at start — completes it, or
// rolls it back when it cannot complete (journal.go). Run also reconciles
// level-triggered at start and on every reconnect: if the stored intents
// differ from the head revision, it cuts a revision and moves the head. A
// stored value refused at intake is reported (events.Quarantine) and skipped;
// nothing stored stops the configurator from starting.
package configurator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/ctxlock"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/health"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/pause"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Component is the configurator's name in logs and events.
const Component = "configurator"

// DefaultSource names where intents came from when an apply names none.
const DefaultSource = contract.SourceAPI

// requestTimeout bounds the handling of one API request.
const requestTimeout = 30 * time.Second

// reconcileRetry is how long Run waits first to reconcile again after a
// failure (and to follow the registry specs again).
const reconcileRetry = 5 * time.Second

// reconcileAgain: reconcileRetry (5 s) to 1 min: a reconcile reads every intent; while JetStream fails it is asked less often.
var reconcileAgain = backoff.Policy{Base: reconcileRetry, Cap: time.Minute}

// Config configures the configurator.
type Config struct {
	Conn     *nats.Conn
	Settings contract.Settings
	Log      zerolog.Logger
	Now      func() time.Time // nil = time.Now
	// Source names where applied intents came from when a request names none
	// (default "api").
	Source string
	// Instance names this configurator in the instances bucket (default host-pid).
	Instance string
	// FetchTimeout bounds one read of a registry (default 30s).
	FetchTimeout time.Duration
	// GitCache is the directory under which a git registry of a server
	// (an https:// URL) keeps its bare clone, one directory per registry;
	// "" keeps each clone in memory, cloned anew at each start.
	GitCache string
	// DeleteAfter is how long an intent must be missing from every answer
	// of its registry before it is marked for deletion (settle.go); 0 marks
	// it at the first answer without it. nil: per registry twice its sync
	// interval, at least 30s.
	DeleteAfter *time.Duration
	// LossCheck is how often the configurator asks whether the store is
	// lost besides every change it is asked for (storeloss.go; default 30s).
	LossCheck time.Duration
	// Metrics, when set, records each registry's sync state (metrics.go).
	Metrics *Metrics
	// StrictVerify makes the fleet verifier's warnings refuse an apply as
	// its errors do (verify.go), for every request.
	StrictVerify bool
	// Version is the build version, announced in the micro service and the
	// instances bucket (default "dev").
	Version string
}

// Service is a configurator.
type Service struct {
	cfg Config
	log zerolog.Logger

	// mu serializes every state change: applies, deletes and reconciles; a
	// request waiting for it gives up at its own deadline.
	mu *ctxlock.Mutex
	// Set by Run before the API is served.
	st     *state
	events *events.Emitter
	// gate holds requests and reconciles while the control plane is paused (pause.go).
	gate    *pause.Gate
	resumed chan struct{} // the pause was lifted: reconcile (capacity 1)
	// ready is closed once every registry had its first sync attempt:
	// requests wait for it (whenReady).
	ready chan struct{}

	// lastHead is the head this process last wrote (nil: none yet), so
	// that an unreadable head is written again as it was (repairHead).
	lastHead atomic.Pointer[sluicev1.Head]
	// unreadableHead is the revision of the newest unreadable head the
	// watch delivered (0: none pending), so that a read answered by a
	// replica still behind it is not taken for "readable again"
	// (planHeadRepair).
	unreadableHead atomic.Uint64

	// quarantine reports stored values refused at intake (they do not
	// decode, or are not well-formed for their key), once per revision.
	quarantine *events.Quarantine

	// readiness is what Ready reports.
	readiness health.State

	// lost: the store was last found lost (storeloss.go), so StoreLost is
	// emitted once until it is not.
	lost atomic.Bool
}

// Ready reports whether the configurator answers requests, and why in one
// line: once its buckets are bound, the start-up reconcile ran, the API is
// served and every registry had its first sync attempt.
func (s *Service) Ready() (bool, string) { return s.readiness.Get() }

// state is the configurator's typed view of its buckets.
type state struct {
	intents   *store.Store[*sluicev1.StoredIntent]
	revisions *store.Store[*sluicev1.Revision]
	head      *store.Store[*sluicev1.Head]
	journal   *store.Store[*sluicev1.ApplyJournal]
	rollouts  *store.Store[*sluicev1.Rollout]            // read only: whether the head is in force
	refs      *store.Store[*sluicev1.RolloutRef]         // read only: the running rollout
	invalid   *store.Store[*sluicev1.InvalidFingerprint] // read only: refusing known-bad revisions
	nodes     *store.Store[*sluicev1.NodePresence]       // read only: whom a revision would reach
	fleet     *store.View[*sluicev1.NodePresence]        // nodes, kept by a watch (fleet.go)
	specs     *store.Store[*sluicev1.RegistrySpec]       // read only: which registries own intents
	set       *buckets.Set                               // read only: whether the store is lost (storeloss.go)
}

// New checks cfg and fills in defaults; it does no I/O.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New("configurator: Conn is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DeleteAfter != nil {
		if err := CheckDeleteAfter(*cfg.DeleteAfter); err != nil {
			return nil, fmt.Errorf("configurator: DeleteAfter %s: %w", *cfg.DeleteAfter, err)
		}
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = fetchTimeout
	}
	if cfg.LossCheck <= 0 {
		cfg.LossCheck = lossEvery
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Settings.NodeLease <= 0 {
		cfg.Settings = contract.DefaultSettings()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	s := &Service{mu: ctxlock.New(), cfg: cfg, log: cfg.Log.With().Str(logging.FieldComponent, Component).Logger()}
	s.readiness.Set(false, "binding the buckets")
	return s, nil
}

// Run ensures the buckets, completes an interrupted apply, reconciles the
// head with the stored intents, then serves the API until ctx ends. It
// returns nil on a clean stop.
func (s *Service) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil {
		return nil // stopped, whatever it was doing
	}
	return err
}

// run is Run's steps: build the stores, reconcile once, serve the API,
// follow the registries, then watch until ctx ends.
func (s *Service) run(ctx context.Context) error {
	b, err := s.buildStores(ctx)
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.events.Flush(fctx)
	}()

	stopPause := s.startPause(ctx, b)
	defer stopPause()
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := make(chan struct{})
	go func() { defer close(fleetDone); s.st.fleet.Run(fctx) }()
	defer func() { stopFleet(); <-fleetDone }()
	// Listen before reconciling so that a reconnect during it is not missed.
	reconnected := s.cfg.Conn.StatusChanged(nats.CONNECTED)
	defer s.cfg.Conn.RemoveStatusListener(reconnected)

	// A failed reconcile is retried, never fatal: the API serves meanwhile,
	// and every apply finishes a leftover journal first anyway.
	retry := newRetrier(s.log)
	defer retry.timer.Stop()
	startErr := s.reconcile(ctx)
	if startErr != nil && ctx.Err() != nil {
		return nil
	}
	retry.after(ctx, startErr, "reconcile at start failed; serving the API and retrying")

	// Serve the API once the start-up reconcile ran (a leftover journal is
	// finished first), before the registries' first syncs: a request
	// arriving meanwhile waits for them (whenReady) rather than finding no
	// configurator, or racing a registry's first sync.
	s.ready = make(chan struct{})
	svc, err := s.serve(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	s.readiness.Set(false, "serving the API; waiting for the first sync of every registry")

	regs, regsDone := s.followRegistries(ctx, b)
	defer func() { <-regsDone }()
	return s.watch(ctx, regs, reconnected, retry)
}

// buildStores binds the buckets and makes the typed stores (s.st), the
// event emitter and the quarantine reporter on them.
func (s *Service) buildStores(ctx context.Context) (*buckets.Set, error) {
	js, b, err := buckets.Open(ctx, s.cfg.Conn, s.cfg.Settings, contract.ComponentConfigurator, buckets.WithLog(s.log))
	if err != nil {
		return nil, err
	}
	s.readiness.Set(false, "buckets bound; reconciling the stored intents with the head")
	s.st = &state{
		intents:   store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }),
		revisions: store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }),
		head:      store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }),
		journal:   store.New(b.Revisions, func() *sluicev1.ApplyJournal { return &sluicev1.ApplyJournal{} }),
		rollouts:  store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }),
		refs:      store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
		invalid:   store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }),
		nodes:     store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }),
		specs:     store.New(b.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }),
		set:       b,
	}
	s.st.fleet = newFleet(s.st.nodes)
	s.events = events.NewEmitter(js, s.cfg.Log, Component, s.cfg.Now)
	s.quarantine = events.NewQuarantine(s.events)
	return b, nil
}

// followRegistries runs the registries' syncers until ctx ends (done is
// closed then); once every registry had its first sync attempt, requests
// are answered (s.ready) and the configurator is ready.
func (s *Service) followRegistries(ctx context.Context, b *buckets.Set) (regs *registries, done <-chan struct{}) {
	regs = s.newRegistries(b)
	regsDone := make(chan struct{})
	go func() {
		defer close(regsDone)
		regs.run(ctx, func(first <-chan struct{}) {
			go func() {
				select {
				case <-first:
					s.log.Info().Msg("first sync of every registry done: answering requests")
					s.readiness.Set(true, "serving the API")
					close(s.ready)
				case <-ctx.Done():
				}
			}()
		})
	}()
	return regs, regsDone
}

// watch acts until ctx ends on what asks for a repair or a reconcile: an
// unreadable head or revision, a reconnect, a resume, the retry of a
// failed reconcile, and the periodic check that the store is not lost.
func (s *Service) watch(ctx context.Context, regs *registries, reconnected <-chan nats.Status, retry *retrier) error {
	// The head is this configurator's key: one that turns unreadable is
	// written again at once (repairHead), or the coordinator, which skips
	// it, would never roll out what it names.
	heads, err := s.st.head.Watch(ctx, contract.KeyHead)
	if err != nil {
		return fmt.Errorf("watch %s/%s: %w", s.st.head.Bucket(), contract.KeyHead, err)
	}
	// So are the revisions, and the head's one above all: a coordinator
	// term that cannot read the revision in force renders no node's config
	// (chaos seed 143). Keys only: a revision is read when its key is
	// written after it was cut, which only a repair or garbage does.
	revKeys, err := s.st.revisions.WatchKeys(ctx, ">")
	if err != nil {
		return fmt.Errorf("watch %s: %w", s.st.revisions.Bucket(), err)
	}
	// Whether the store is lost is said when it becomes so, not only when
	// an apply is refused: the agents' presence, which is the evidence,
	// arrives a beat after a wipe (storeloss.go).
	lossCheck := time.NewTicker(s.cfg.LossCheck)
	defer lossCheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lossCheck.C:
			s.checkLost(ctx)
		case e, ok := <-heads:
			switch {
			case !ok:
				heads = nil // the watch ended with ctx
			case e.Err != nil:
				s.sawUnreadableHead(e.Revision)
				_, err := s.repairHead(ctx)
				retry.after(ctx, err, "repair the unreadable head")
			}
		case e, ok := <-revKeys:
			switch {
			case !ok:
				revKeys = nil // the watch ended with ctx
			case e.Key == "" || e.Deleted || e.Key == contract.KeyHead || e.Key == contract.KeyPending:
			default:
				retry.after(ctx, s.repairRevisionKey(ctx, e.Key), "repair an unreadable revision")
			}
		case <-reconnected:
			// Whatever happened while disconnected, act on the state as it is.
			retry.after(ctx, s.heal(ctx), "reconcile after reconnect")
		case <-s.resumed:
			regs.nudgeAll()
			retry.after(ctx, s.heal(ctx), "reconcile after resume")
		case <-retry.timer.C:
			retry.after(ctx, s.heal(ctx), "reconcile")
		}
	}
}

// retrier arms its timer after a failed reconcile or repair, backing off
// from reconcileRetry (reconcileAgain), and starts the back-off again after
// one that succeeded.
type retrier struct {
	timer *time.Timer // fires when it is time to heal again
	again *backoff.Backoff
	log   zerolog.Logger
}

func newRetrier(log zerolog.Logger) *retrier {
	t := time.NewTimer(time.Hour)
	t.Stop() // armed by a failure
	return &retrier{timer: t, again: backoff.New(reconcileAgain), log: log}
}

// after takes the outcome of what: a failure (unless ctx ended) is logged
// and tried again after the next back-off.
func (r *retrier) after(ctx context.Context, err error, what string) {
	switch {
	case err == nil:
		r.again.Reset()
	case ctx.Err() == nil:
		wait := r.again.Next()
		r.log.Error().Err(err).Dur("retry_in", wait).Msg(what)
		r.timer.Reset(wait)
	}
}
