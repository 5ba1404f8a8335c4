// Package coordinator is the rollout-coordinator: the leader-elected service
// that rolls the head revision out across the nodes a few at a time. It owns
// the rollouts bucket and the nodeconfigs bucket (each node's desired config
// and its backup). Its decisions are made by the pure function
// rollout.Decide (internal/rollout, whose doc.go states the loop's
// contract); the loop (loop.go) reads state, feeds Decide events and
// performs the actions it returns. Entry point: New(cfg).Run(ctx).
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/pause"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// Component is the coordinator's name in logs, events and leases.
const Component = "rollout-coordinator"

// Config configures the coordinator.
type Config struct {
	Conn     *nats.Conn
	Settings contract.Settings
	Log      zerolog.Logger
	Now      func() time.Time // nil = time.Now
	// Instance names this coordinator in the leader lease (default host-pid).
	Instance string
	// Writers is how many node configs are written at once (default 128).
	Writers int
	// SaveInterval bounds how often progress is written to the rollout record (default 250ms).
	SaveInterval time.Duration
	// TickInterval is how often deadlines and bake times are checked (default 1s).
	TickInterval time.Duration
	// VerifyInterval is how often the leader compares the desired configs
	// it believes in the bucket with the bucket's keys, and configures afresh
	// a node whose key was deleted without its hearing of it (default 1m).
	VerifyInterval time.Duration
	// InvalidExpiry, when positive, forgives a fingerprint recorded invalid
	// that long ago, as an operator's `fingerprint forgive` would, with
	// "expiry" as who (default 0: records never expire).
	InvalidExpiry time.Duration
	// Retention is how many ended rollout records are kept; older ones are
	// deleted when a rollout finishes (default 100; negative keeps all).
	Retention int
	// BeforeWrite, when set, runs before every write a leader makes. Tests
	// block in it to play a leader whose process is paused (SIGSTOP).
	BeforeWrite func(ctx context.Context)
	// Version is the build version, announced in the instance presence and
	// the micro service (default "dev").
	Version string
	// Metrics, when set, records the role, the rollout and the nodes (metrics.go).
	Metrics *Metrics
	// GateTimeout bounds each request to Prometheus for a rollout's gates
	// (default 10s).
	GateTimeout time.Duration
	// GateHTTP is the HTTP client of those requests (nil: http.DefaultClient):
	// a proxy, a private CA, or a harness's in-process transport.
	GateHTTP *http.Client
}

// Service is a rollout-coordinator instance.
type Service struct {
	cfg Config
	log zerolog.Logger
	cur atomic.Pointer[loop] // the running term's loop, nil while not leading

	// The control plane's pause as this instance acknowledges it: a
	// standby starts nothing, so it reaches every generation at once; the
	// leader's loop decides when it has (rollout.AckPause).
	beacon *pause.Beacon
	ackMu  sync.Mutex
	req    *sluicev1.PauseRequest // newest control/pause seen
	ack    *sluicev1.PauseAck     // last announced
	em     *events.Emitter

	// roles is who leads as this instance knows it: readiness, metrics and
	// the micro service (role.go).
	roles *roles
}

// Ready reports whether this instance is ready, and why in one line:
// leading ("ready: leading term 7") or standing by ("ready: standing by,
// lease held by coord-a since …"); not while it binds its buckets or
// cannot read the lease.
func (s *Service) Ready() (bool, string) { return s.roles.ready.Get() }

// Leading reports whether this instance leads with its term's state loaded,
// and how many desired-config writes it has decided but not yet landed
// (writes the control plane refuses are retried and stay pending).
func (s *Service) Leading() (leading bool, pendingWrites int) {
	lp := s.cur.Load()
	if lp == nil || !lp.loaded.Load() {
		return false, 0
	}
	return true, int(lp.pending.Load())
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New("coordinator: Conn is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 128
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = time.Second
	}
	if cfg.GateTimeout <= 0 {
		cfg.GateTimeout = 10 * time.Second
	}
	if cfg.VerifyInterval <= 0 {
		cfg.VerifyInterval = time.Minute
	}
	if cfg.Retention == 0 {
		cfg.Retention = rollout.DefaultRetention
	}
	if cfg.SaveInterval <= 0 {
		cfg.SaveInterval = 250 * time.Millisecond
	}
	if cfg.Settings.LeaderLease <= 0 {
		cfg.Settings = contract.DefaultSettings()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	log := cfg.Log.With().Str(logging.FieldComponent, Component).Logger()
	return &Service{cfg: cfg, log: log, roles: newRoles(cfg.Conn, cfg.Instance, cfg.Version, log, cfg.Metrics)}, nil
}

// Run campaigns for leadership and, while leader, runs rollouts. It returns
// nil when ctx ends.
func (s *Service) Run(ctx context.Context) error {
	js, b, err := buckets.Open(ctx, s.cfg.Conn, s.cfg.Settings, contract.ComponentCoordinator, buckets.WithLog(s.log))
	if err != nil {
		return err
	}
	s.roles.bound()
	defer s.roles.stop()
	em := events.NewEmitter(js, s.cfg.Log, Component, s.cfg.Now)
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		em.Flush(fctx)
	}()
	s.em = em
	s.beacon = pause.NewBeacon(b.Instances, Component, s.cfg.Instance, s.cfg.Version, s.cfg.Settings.InstanceInterval(), s.log, s.cfg.Now)
	s.beacon.Set(nil, RoleStandby)
	var bg sync.WaitGroup
	defer bg.Wait()
	bgCtx, stopBg := context.WithCancel(ctx)
	defer stopBg()
	bg.Go(func() { s.beacon.Run(bgCtx) })
	pauses := store.New(b.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	bg.Go(func() {
		pause.Follow(bgCtx, pauses, s.pauseSeen, func(err error) {
			s.log.Warn().Err(err).Msg("watch control/pause; retrying")
		})
	})
	// After a reconnect the watchers may have missed changes (and may take
	// a while to notice): a reconnect ends the term, which reloads everything.
	reconnected := s.cfg.Conn.StatusChanged(nats.CONNECTED)
	defer s.cfg.Conn.RemoveStatusListener(reconnected)
	el := newElection(b.Leases, b.LeaderLease, s.cfg, s.log, em, s.roles)
	spacing := newTermSpacing(el.settings().RenewInterval())
	for {
		campaigned := time.Now() // standing by counts: a long stand-by is no failing term
		l, err := el.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		termCtx, cancel := context.WithCancel(ctx)
		err = s.term(termCtx, cancel, el, l, b, em, reconnected)
		cancel()
		el.release(l)
		s.roles.termEnded(l.epoch)
		if ctx.Err() != nil {
			return nil
		}
		// A term ended by a reconnect takes the lease (still ours) again and
		// reloads at once: the client's reconnects are spaced already.
		var wait time.Duration
		if !errors.Is(err, errReconnected) {
			wait = spacing.after(time.Since(campaigned))
		}
		s.log.Warn().Err(err).Uint64("term", l.epoch).Dur("campaign_in", wait).Msg("leadership term ended; campaigning again")
		if backoff.Sleep(ctx, wait, nil) != nil {
			return nil
		}
	}
}

// termRetryCap bounds the wait before an instance campaigns again after a
// term that ended in an error: a term starts by loading the whole fleet's
// state, so terms that keep failing at once must not reload it every renew
// interval (at 100,000 nodes a load reads some 300,000 messages).
const termRetryCap = 15 * time.Second

// termSpacing spaces an instance's terms: after a term that ended in an
// error the wait grows (from renew, doubling, jittered, at most
// termRetryCap) while terms keep ending within termRetryCap of the
// campaign that won them; a campaign and term that lasted that long
// (standing by included) start the sequence again. The wait comes only
// between a term's end and the next campaign: an instance standing by
// still takes a released or expired lease at once.
type termSpacing struct{ b *backoff.Backoff }

func newTermSpacing(renew time.Duration) *termSpacing {
	return &termSpacing{b: backoff.New(backoff.Policy{Base: renew, Cap: termRetryCap})}
}

// after is the wait before campaigning again after a term that ended
// lasted after its campaign began.
func (t *termSpacing) after(lasted time.Duration) time.Duration {
	if lasted >= termRetryCap {
		t.b.Reset()
	}
	return t.b.Next()
}

// term runs one leadership term: it fences the buckets, publishes the
// term's epoch in the lease, keeps renewing it and runs the loop.
func (s *Service) term(ctx context.Context, cancel context.CancelFunc, el *election, l *lease, b *buckets.Set,
	em *events.Emitter, reconnected <-chan nats.Status) error {
	t, err := startTerm(ctx, s.cfg.Conn, b, l, s.cfg.Instance, s.cfg.Now())
	if err != nil {
		return err
	}
	l.epoch = t.epoch
	if err := el.announce(ctx, l); err != nil {
		return fmt.Errorf("publish term %d in the lease: %w", t.epoch, err)
	}
	s.log.Info().Uint64("term", t.epoch).Str("instance", s.cfg.Instance).Msg("leading: buckets fenced for this term")
	s.roles.leading(t.epoch, l.acquired.AsTime())
	s.cfg.Metrics.termStarted()
	go el.keep(ctx, l, cancel)
	lp := newLoop(b, s.cfg, s.log, em, t)
	lp.reconnected = reconnected
	lp.acked = func(a *sluicev1.PauseAck) { s.announce(a, RoleLeader) }
	s.beacon.Set(nil, RoleLeader)
	s.cur.Store(lp)
	defer func() {
		s.cur.Store(nil)
		s.standBy()
	}()
	return lp.run(ctx)
}

// Roles in the instance presence.
const (
	RoleLeader  = "leader"
	RoleStandby = "standby"
)

// pauseSeen takes a change of control/pause: a standby reaches it at once,
// a leader's loop decides (it watches the key itself).
func (s *Service) pauseSeen(r *sluicev1.PauseRequest) {
	s.ackMu.Lock()
	if r.GetGeneration() >= s.req.GetGeneration() {
		s.req = r
	}
	s.ackMu.Unlock()
	if s.cur.Load() == nil {
		s.standBy()
	}
}

// standBy announces what a standby reaches: the newest pause, at once.
func (s *Service) standBy() {
	s.ackMu.Lock()
	req := s.req
	s.ackMu.Unlock()
	s.announce(contract.NextAck(s.currentAck(), req, "", s.cfg.Now()), RoleStandby)
}

func (s *Service) currentAck() *sluicev1.PauseAck {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return s.ack
}

// announce puts ack and role in the instance presence, with an event and a
// log line when ack reached a new generation (pause.Announce).
func (s *Service) announce(ack *sluicev1.PauseAck, role string) {
	s.ackMu.Lock()
	prev := s.ack
	s.ack = ack
	s.ackMu.Unlock()
	s.beacon.Set(ack, role)
	pause.Announce(s.log.With().Str("role", role).Logger(), s.em.Emit, Component, s.cfg.Instance, prev, ack)
}

// Strategy defaults, documented in docs/rollouts.md.
const (
	DefaultWaveGrowth       = rollout.DefaultWaveGrowth
	DefaultApplyDeadline    = rollout.DefaultApplyDeadline
	DefaultPickupDeadline   = rollout.DefaultPickupDeadline
	DefaultProgressDeadline = rollout.DefaultProgressDeadline
	// DefaultRetention is how many ended rollout records are kept.
	DefaultRetention = rollout.DefaultRetention
)
