// Package agent is sluice's node agent: one runs on every node and is the
// single writer of that node's status.
//
// It registers the node's presence (a heartbeat lease in the nodes bucket),
// learns of the node's desired config from the core-NATS subject the
// nodeconfigs bucket republishes to, plus a Get on start, on Resync and every
// ResyncInterval — never through a JetStream consumer, so a fleet of agents
// costs the server one plain subscription each. It applies the desired config
// through an Applier, one at a time and newest first, keeps what it applied
// on disk as last-good, and reports Provisioning, Provisioned or Invalid with
// the reason. Entry point: New(cfg).Run(ctx).
//
// Before applying it marks the apply in progress on disk; after applying
// it runs the health checks, and on an apply error or a failed check
// restores last-good through the Applier. A marker found at start means the
// last run stopped mid-apply: last-good is restored before anything else.
//
// It never applies a desired config written under a lower leader epoch
// than one it already accepted (a deposed coordinator's) — unless the store
// itself was replaced since (control/store.id changed: storeid.go) — nor one that does
// not decode strictly or is not well-formed for its key (it names another
// node, or its fingerprint does not match its config: pkg/contract/
// wellformed); and it overwrites its own status key if that does not decode
// (docs/agent.md, "Fencing" and "Unreadable values").
//
// While the control plane is paused the worker starts no apply and the
// agent acknowledges the pause in its presence once idle (pause.go).
//
// Files: intake.go (subscription, Get, strict decoding and fingerprint
// check, coalescing mailbox, epoch fence), storeid.go (a replaced store),
// incompatible.go (configs needing features this agent lacks), pause.go,
// presence.go (heartbeat lease), provision.go (the apply flow, its pure
// plan, and emit and describe: the events that name a config),
// operation.go (the operation's deadline, cancel and progress), steps.go
// (validate, apply, check, each with its bound), restore.go (marker,
// restore of last-good), bake.go (re-running the checks while a config
// bakes), check.go (health checks), status.go (compare-and-set status
// writes), metrics.go, applier.go, appliers.go (Validator, several
// appliers as one), exec.go and lastgood.go (appliers and atomic files on
// disk).
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/health"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Component is the agent's name in logs and events.
const Component = "agent"

// Event types the agent emits (kind node, id the node).
const (
	EventNodeRegistered = "NodeRegistered"
	// EventNodeLabelsChanged: the node's labels changed (LabelUpdates) and
	// its presence carries the new ones; the reason names both.
	EventNodeLabelsChanged = "NodeLabelsChanged"
	// EventNodeLeft: the node left the fleet outside sluice (Departures:
	// on Kubernetes, its Node was deleted); the agent withdrew its presence.
	EventNodeLeft         = "NodeLeft"
	EventNodeProvisioning = "NodeProvisioning"
	EventNodeProvisioned  = "NodeProvisioned"
	EventNodeInvalid      = "NodeInvalid"
	// EventNodeRestored: last-good (or an empty config) was put back in
	// force after a failed apply or check, or after an interrupted apply.
	EventNodeRestored = "NodeRestored"
	// EventNodeRestoreFailed: putting last-good back failed; the node's
	// config is unknown.
	EventNodeRestoreFailed = "NodeRestoreFailed"
	// EventStaleDesiredIgnored: a desired config carries a leader epoch
	// lower than one already seen (a deposed coordinator wrote it); the
	// node keeps the config in force. The reason names both epochs.
	EventStaleDesiredIgnored = "StaleDesiredIgnored"
	// EventNodeBakeCheckPassed: a re-run of the checks passed while the
	// node bakes (DesiredConfig.bake_checks); the status counts them.
	EventNodeBakeCheckPassed = "NodeBakeCheckPassed"
	// EventNodeStoreReplaced: a desired config that looked stale (a lower
	// leader epoch or nodeconfigs revision than already seen) came from
	// another store (control/store.id changed: the store was lost and
	// started afresh): the agent forgot the old store's epoch and revision
	// and took it. The reason names both ids.
	EventNodeStoreReplaced = "NodeStoreReplaced"
)

// Defaults of Config, in one place; each knob's meaning is documented at
// its Config field.
const (
	// DefaultResyncInterval bounds how late a missed republished message
	// (the desired config, the pause) is read: two Gets per agent per
	// interval, 1,667/s at 100,000 nodes (30 s was 6,667/s, four times the
	// heartbeats). The agent also reads both on start and on reconnect.
	DefaultResyncInterval   = 2 * time.Minute
	DefaultProgressInterval = time.Second
	DefaultApplierTimeout   = 2 * time.Minute
	DefaultValidateTimeout  = 2 * time.Minute
	DefaultCheckTimeout     = 10 * time.Second // CheckSpec.Timeout
	DefaultCheckPause       = time.Second
	DefaultCheckDeadline    = 2 * time.Minute
)

// Config configures an agent.
type Config struct {
	Conn     *nats.Conn // required; the agent never sets handlers on it, so many agents may share it
	Settings contract.Settings
	Log      zerolog.Logger
	Now      func() time.Time // nil = time.Now

	// Node is the node's name (contract.ValidNodeName).
	Node string
	// Labels are the node's labels, published with its presence.
	Labels map[string]string
	// LabelUpdates, when set, delivers the node's labels whenever they
	// change (on Kubernetes: its Node object's, see pkg/kubenode); each
	// replaces Labels and is published at once.
	LabelUpdates <-chan map[string]string
	// Departures, when set, says when the node leaves the fleet outside
	// sluice (on Kubernetes: its Node object is deleted, see pkg/kubenode)
	// and when it is back. Gone, the agent withdraws its presence and
	// writes none: the coordinator takes the node as left, and the reaper
	// collects its keys after its grace (never while the active rollout
	// references it). Back, it registers again.
	Departures <-chan Departure
	// StateDir is where the agent keeps last-good.json; "" keeps nothing on
	// disk (benchmarks with a simulated applier only).
	StateDir string
	// Applier puts a desired config in force; required.
	Applier Applier
	// Version is the agent's version, published with its presence.
	Version string
	// Features are the config features this agent reads
	// (contract.ConfigFeatures, docs/deploy.md "Version skew"); nil means
	// all of them. A test sets fewer (an empty, non-nil list: none) to play
	// an agent of an earlier release: a desired config needing one it lacks
	// is reported INCOMPATIBLE, not applied.
	Features []string
	// Checks run, in order, after every apply and after every restore; the
	// first that fails makes the config Invalid and last-good is restored.
	Checks []CheckSpec
	// ValidateCmd, if set, runs (/bin/sh -c) before each apply, after the
	// Applier's own Validate if it is a Validator, with
	// SLUICE_CONFIG naming the desired config; a non-zero exit makes it
	// Invalid with failed_check "validate" and nothing is applied.
	ValidateCmd string

	// The agent's own bounds on the steps of an operation (steps.go). The
	// operation's deadline, which bounds validate, apply and checks
	// together, is not the agent's: the coordinator sets it in the desired
	// config (DesiredConfig.deadline, contract.OperationDeadline). Each
	// default is in the Defaults block above.

	// ApplierTimeout bounds one call of the Applier: its Validate (if it is
	// a Validator), its Apply of a desired config, and its Apply of
	// last-good in a restore.
	ApplierTimeout time.Duration
	// ValidateTimeout bounds one run of ValidateCmd.
	ValidateTimeout time.Duration
	// CheckDeadline bounds all checks of one apply or restore, retries and
	// pauses included; each attempt has its own CheckSpec.Timeout.
	CheckDeadline time.Duration
	// CheckPause is the wait between attempts of a failing check.
	CheckPause time.Duration
	// ProgressInterval is how long a step of an operation (validating,
	// applying, one check) runs before it is written to the status as its
	// progress.
	ProgressInterval time.Duration
	// ResyncInterval is how often the desired config is fetched with a Get
	// in case a republished message was missed (jittered ±10%).
	ResyncInterval time.Duration

	// JetStream and Buckets, when set, are shared by many agents on one
	// connection (the benchmark runs thousands in one process). Run then
	// uses them instead of making its own; with Buckets set it also skips
	// buckets.Ensure, which whoever opened them has done.
	JetStream jetstream.JetStream
	Buckets   *buckets.Set

	// Metrics, when set, times applies and health checks (metrics.go).
	Metrics *Metrics
}

// Agent is the agent of one node.
type Agent struct {
	cfg     Config
	log     zerolog.Logger
	resync  chan struct{} // Resync's trigger, capacity 1
	box     mailbox       // desired configs waiting for the worker
	running atomic.Bool

	// reconnected is cancelled (and replaced) by Reconnected: a request in
	// flight when the connection dropped is never answered, so the status
	// writes of the old connection give up at once instead of waiting out
	// store.AttemptTimeout while the node's deadline runs.
	reconnMu      sync.Mutex
	reconnected   context.Context
	endConnection context.CancelFunc

	// retry spaces the resyncs after failed control-plane calls
	// (resyncSoon), from the Run loop and the worker alike.
	retry *backoff.Backoff

	// Set up by Run before any goroutine starts.
	em *events.Emitter
	// quarantine reports stored values refused at intake (the desired
	// config, the pause request) once per revision, and rewrites of the
	// agent's own keys that held one.
	quarantine *events.Quarantine
	js         jetstream.JetStream // for the node lease in force (adoptLease)
	nodes      *store.Store[*sluicev1.NodePresence]
	statuses   *store.Store[*sluicev1.NodeStatus]
	configs    rawGetter // the nodeconfigs bucket, read raw (intake.go)
	pauses     *store.Store[*sluicev1.PauseRequest]
	storeIDs   *store.Store[*sluicev1.StoreID] // control/store.id (storeid.go)
	pz         pausing
	run        running // the operation the worker runs

	// inForce is the worker's last-good, for the presence to carry
	// (presence.go): written by the worker, read by Run's loop.
	inForce atomic.Pointer[sluicev1.DesiredConfig]
	// labels are the node's labels in force, for every status to carry
	// (writeStatus): written by Run's loop (setLabels), read by the worker.
	// The map is replaced on a change, never modified.
	labels atomic.Pointer[map[string]string]

	pres   presence  // touched by Run's loop only
	in     intake    // touched by Run's loop only
	worker workState // touched by the worker only (after Run's setup)

	readiness health.State // what Ready reports
}

// New checks cfg and fills in defaults. It does no I/O.
func New(cfg Config) (*Agent, error) {
	if cfg.Conn == nil {
		return nil, errors.New("agent: Conn is required")
	}
	if err := contract.ValidNodeName(cfg.Node); err != nil {
		return nil, fmt.Errorf("agent: node name: %w", err)
	}
	if cfg.Applier == nil {
		return nil, errors.New("agent: Applier is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Settings.NodeLease <= 0 {
		cfg.Settings = contract.DefaultSettings()
	}
	if cfg.ApplierTimeout <= 0 {
		cfg.ApplierTimeout = DefaultApplierTimeout
	}
	if cfg.ValidateTimeout <= 0 {
		cfg.ValidateTimeout = DefaultValidateTimeout
	}
	if cfg.CheckDeadline <= 0 {
		cfg.CheckDeadline = DefaultCheckDeadline
	}
	if cfg.CheckPause <= 0 {
		cfg.CheckPause = DefaultCheckPause
	}
	for i, c := range cfg.Checks {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("agent: Checks[%d]: %w", i, err)
		}
	}
	cfg.Checks = slices.Clone(cfg.Checks)
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if errs := contract.CheckLabels("the node", cfg.Labels, contract.MaxNodeLabels); len(errs) > 0 {
		return nil, fmt.Errorf("agent: labels: %w", errors.Join(errs...))
	}
	cfg.Labels = maps.Clone(cfg.Labels)
	if cfg.Features == nil {
		cfg.Features = contract.ConfigFeatures
	}
	cfg.Features = slices.Clone(cfg.Features)
	log := cfg.Log.With().Str(logging.FieldComponent, Component).Str(logging.FieldNode, cfg.Node).Logger()
	reconnected, endConnection := context.WithCancel(context.Background())
	a := &Agent{
		cfg:           cfg,
		reconnected:   reconnected,
		endConnection: endConnection,
		log:           log,
		resync:        make(chan struct{}, 1),
		box:           mailbox{wake: make(chan struct{}, 1)},
		retry:         backoff.New(controlRetry),
		pz:            newPausing(),
	}
	labels := cfg.Labels
	a.labels.Store(&labels)
	return a, nil
}

// Resync asks the agent to fetch its desired config now. It never blocks;
// wire it to the connection's reconnect handler.
func (a *Agent) Resync() {
	select {
	case a.resync <- struct{}{}:
	default:
	}
}

// Reconnected is what the connection's reconnect handler calls: the agent
// fetches its desired config now, and once more a second later, because a
// republished config sent while it was away is lost, and right after a
// server restart the replica that answers the first read may not have
// caught up yet (a direct get may be served by a follower). It never blocks.
func (a *Agent) Reconnected() {
	a.reconnMu.Lock()
	a.endConnection()
	a.reconnected, a.endConnection = context.WithCancel(context.Background())
	a.reconnMu.Unlock()
	a.Resync()
	time.AfterFunc(retryDelay, a.Resync)
}

// statusWriteContext is ctx bounded by timeout and also cancelled by the
// next Reconnected: for a request that the connection it was sent on will
// never answer. One context and no goroutine per write (every node's
// change writes two statuses).
func (a *Agent) statusWriteContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	a.reconnMu.Lock()
	gone := a.reconnected
	a.reconnMu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	unhook := context.AfterFunc(gone, cancel)
	return wctx, func() {
		unhook()
		cancel()
	}
}

// retryDelay is how soon a failed control-plane call is retried first: a
// NATS outage must not leave an outcome unreported until the periodic resync.
const retryDelay = time.Second

// controlRetry: retryDelay (1 s) to 5 s: a failed fetch or status write is tried again soon, less often while JetStream stays slow; deadlines are minutes.
var controlRetry = backoff.Policy{Base: retryDelay, Cap: 5 * time.Second}

// resyncSoon triggers a resync after the next delay of a.retry (1 s,
// growing while calls keep failing; a success resets it), unless ctx ends
// first.
func (a *Agent) resyncSoon(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	time.AfterFunc(a.retry.Next(), a.Resync) // harmless after Run returns: Resync never blocks
}

// Run registers the node, then receives and applies its desired configs
// until ctx ends. It returns nil when ctx ends. On the way out it stops
// heartbeating but leaves its presence to expire with the lease, so a quick
// restart renews it.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run is already running")
	}
	defer a.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	a.readiness.Set(false, "binding the buckets")
	js, b, err := a.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	a.readiness.Set(true, "buckets bound; node "+a.cfg.Node)
	a.js = js
	a.adoptLease(b.NodeLease)
	a.em = events.NewEmitter(js, a.cfg.Log, Component, a.cfg.Now)
	a.quarantine = events.NewQuarantine(a.em)
	defer func() {
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer fcancel()
		a.em.Flush(fctx)
	}()
	// The agent's own keys are written directly (store.Direct): two status
	// writes per change of the node, a presence write per beat.
	a.nodes = store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Direct(js.Conn())
	a.statuses = store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Direct(js.Conn())
	a.configs = b.NodeConfigs
	a.pauses = store.New(b.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	a.storeIDs = store.New(b.Control, func() *sluicev1.StoreID { return &sluicev1.StoreID{} })
	// The store its fences count in (storeid.go).
	a.learnStoreID(ctx)

	if err := a.loadLastGood(); err != nil {
		return err
	}
	// Before anything else touches the node: undo an apply the last run
	// did not finish.
	a.recoverInterrupted(ctx)
	// Subscribe before the first Get so no write falls between the two.
	msgs := make(chan *nats.Msg, 16)
	sub, err := a.cfg.Conn.ChanSubscribe(contract.NodeConfigSubject(a.cfg.Node), msgs)
	if err != nil {
		return fmt.Errorf("agent %s: subscribe %s: %w", a.cfg.Node, contract.NodeConfigSubject(a.cfg.Node), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	pauseMsgs := make(chan *nats.Msg, 4)
	pauseSub, err := a.cfg.Conn.ChanSubscribe(contract.SubjectPause, pauseMsgs)
	if err != nil {
		return fmt.Errorf("agent %s: subscribe %s: %w", a.cfg.Node, contract.SubjectPause, err)
	}
	defer func() { _ = pauseSub.Unsubscribe() }()
	lastGoodAsks := make(chan *nats.Msg, 4)
	lgSub, err := a.cfg.Conn.ChanSubscribe(contract.LastGoodSubject(a.cfg.Node), lastGoodAsks)
	if err != nil {
		return fmt.Errorf("agent %s: subscribe %s: %w", a.cfg.Node, contract.LastGoodSubject(a.cfg.Node), err)
	}
	defer func() { _ = lgSub.Unsubscribe() }()
	// Subscribing only queues the interest: flush so the server holds it
	// before the first Get (which may go out on cfg.JetStream's own
	// connection), else a write in between is heard at the next resync.
	fctx, fcancel := context.WithTimeout(ctx, store.AttemptTimeout)
	if err := a.cfg.Conn.FlushWithContext(fctx); err != nil {
		a.warnUnlessDone(ctx, err, "flush the subscriptions; a write missed meanwhile is read at the next resync")
	}
	fcancel()
	// Before the worker starts: a paused control plane holds the first
	// desired config too.
	a.fetchPause(ctx, "start")

	a.pres = presence{started: a.cfg.Now()}
	a.heartbeat(ctx)
	a.readStatus(ctx)
	a.recordRestoreAtStart(ctx)

	var wg sync.WaitGroup
	wg.Go(func() { a.work(ctx) })
	defer wg.Wait() // after cancel: an apply in flight sees ctx end and returns

	a.fetchDesired(ctx, "start")
	beat := time.NewTimer(a.cfg.Settings.HeartbeatInterval())
	defer beat.Stop()
	resync := time.NewTimer(a.resyncDelay())
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			a.receive(m)
		case m := <-pauseMsgs:
			a.receivePause(m)
		case m := <-lastGoodAsks:
			a.answerLastGood(m)
		case <-a.pz.kick:
			a.heartbeat(ctx)
		case l := <-a.cfg.LabelUpdates:
			a.setLabels(ctx, l)
		case d := <-a.cfg.Departures:
			a.depart(ctx, d)
		case <-a.resync:
			a.fetchPause(ctx, "resync")
			a.fetchDesired(ctx, "resync")
		case <-resync.C:
			a.fetchPause(ctx, "periodic resync")
			a.fetchDesired(ctx, "periodic resync")
			resync.Reset(a.resyncDelay())
		case <-beat.C:
			beat.Reset(a.beatAfter(a.heartbeat(ctx)))
		}
	}
}

// open returns the JetStream context and buckets, shared ones if configured.
func (a *Agent) open(ctx context.Context) (jetstream.JetStream, *buckets.Set, error) {
	js := a.cfg.JetStream
	if js == nil {
		var err error
		if js, err = jetstream.New(a.cfg.Conn); err != nil {
			return nil, nil, fmt.Errorf("agent %s: jetstream: %w", a.cfg.Node, err)
		}
	}
	if a.cfg.Buckets != nil {
		return js, a.cfg.Buckets, nil
	}
	// Prepare binds the buckets an agent uses and reads the node lease in
	// force (the nodes bucket's TTL), which Run adopts.
	b, err := buckets.Prepare(ctx, js, a.cfg.Settings, contract.ComponentAgent, buckets.WithLog(a.log))
	if err != nil {
		return nil, nil, fmt.Errorf("agent %s: %w", a.cfg.Node, err)
	}
	return js, b, nil
}

// resyncDelay is ResyncInterval ±10%, so a fleet started together does not
// resync in lockstep.
func (a *Agent) resyncDelay() time.Duration {
	d := a.cfg.ResyncInterval
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
