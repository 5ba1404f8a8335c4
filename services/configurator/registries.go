package configurator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/pause"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Registries are declared by operators in the control bucket
// (registry.<name> → RegistrySpec, sluice registry add). The configurator
// follows those keys and runs one syncer per registry: it fetches the
// registry's whole content every sync interval, or sooner when the registry
// announces a change, merges it in place (sync.go) and writes the
// registry's status (registries/<name>, shown by sluice get registries).
//
// A fetch that fails changes nothing: the status says unreachable since
// when, with the error, and the syncer tries again with backoff (1 s,
// doubling, jittered, at most fetchAttempts times), then at the next sync
// interval.

// fetchAttempts is how many fetches in a row are retried with backoff
// before the syncer waits for the next sync interval.
const fetchAttempts = 5

// fetchRetry: 1 s to 8 s (fetchAttempts−1 doublings), never past the sync interval: a registry blip is mended soon, an outage waits for the interval.
var fetchRetry = backoff.Policy{Base: time.Second, Cap: time.Second << (fetchAttempts - 2)}

// fetchTimeout bounds one fetch of a registry (Config.FetchTimeout).
const fetchTimeout = 30 * time.Second

// bootstrapWait bounds how long a request waits for the first sync of
// every registry before it is answered "starting; retry".
const bootstrapWait = 20 * time.Second

// kindRegistry is the events' kind for a registry.
const kindRegistry = contract.KindRegistry

// registries follows the registry specs and runs their syncers. It is
// given what it needs of the service (newRegistries): it reaches nothing
// else of it.
type registries struct {
	log        zerolog.Logger
	cfg        registriesConfig
	events     *events.Emitter
	quarantine *events.Quarantine
	gate       *pause.Gate // a sync waits while the control plane is paused
	// sync merges an answer into the stored intents (Service.syncRegistry).
	sync func(ctx context.Context, spec *sluicev1.RegistrySpec, snap registry.Snapshot, confirm *sluicev1.RegistryConfirm, st settling) (syncPlan, error)

	specs    *store.Store[*sluicev1.RegistrySpec]
	confirms *store.Store[*sluicev1.RegistryConfirm]
	status   *store.Store[*sluicev1.RegistryStatus]

	// listSpecs lists the spec keys, delete markers included (the git
	// cache's pruner, gitcache.go).
	listSpecs func(ctx context.Context, filter string) ([]store.Entry[*sluicev1.RegistrySpec], error)
	prune     chan struct{} // look at the git cache (pruner)

	mu      sync.Mutex
	running map[string]*syncer
	retired []chan struct{} // the done of each syncer stopped since the last prune
	wg      sync.WaitGroup
}

// registriesConfig is what the syncers read of the service's Config.
type registriesConfig struct {
	now          func() time.Time
	metrics      *Metrics
	fetchTimeout time.Duration
	deleteAfter  func(*sluicev1.RegistrySpec) time.Duration
	gitCache     string
	// revisions reads the head and the revision in force, for the
	// write-back (report.go); nil: no write-back.
	revisions func(context.Context) (head, inForce registry.Revision, err error)
}

func (s *Service) newRegistries(b *buckets.Set) *registries {
	specs := store.New(b.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	return &registries{
		log: s.log, events: s.events, quarantine: s.quarantine, gate: s.gate, sync: s.syncRegistry,
		cfg:   registriesConfig{now: s.cfg.Now, metrics: s.cfg.Metrics, fetchTimeout: s.cfg.FetchTimeout, deleteAfter: s.cfg.deleteAfter, gitCache: s.cfg.GitCache, revisions: s.revisions},
		specs: specs, listSpecs: specs.ListWithDeleted, prune: make(chan struct{}, 1),
		confirms: store.New(b.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} }),
		status:   store.New(b.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }),
		running:  map[string]*syncer{},
	}
}

// run follows the specs until ctx ends. known is called once the specs
// present at start are known, with a channel closed when each of them has
// had its first sync attempt.
func (r *registries) run(ctx context.Context, known func(firstRound <-chan struct{})) {
	defer r.wg.Wait()
	defer r.stopAll()
	if r.cfg.gitCache != "" {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.pruner(ctx) }()
	}
	// One watch covers the specs and the confirmations (registry.>): a
	// confirmation's value is not a spec, only its key is used.
	var keys <-chan store.Entry[*sluicev1.RegistrySpec]
	retry := backoff.New(reconcileAgain)
	for {
		var err error
		if keys, err = r.specs.Watch(ctx, contract.RegistryKeyPrefix+">"); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		r.log.Error().Err(err).Dur("retry_in", wait).Msg("follow registry specs")
		if backoff.Sleep(ctx, wait, nil) != nil {
			return
		}
	}
	caughtUp := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-keys:
			if !ok {
				return
			}
			if e.Key == "" { // caught up: the registries present at start are running
				if !caughtUp {
					caughtUp = true
					known(r.firstRound())
					r.wantPrune()
				}
				continue
			}
			switch name, spec, ok := contract.RegistryOfKey(e.Key); {
			case !ok:
			case spec:
				r.specChanged(ctx, e)
				if caughtUp {
					r.wantPrune()
				}
			case !e.Deleted:
				r.nudge(name) // a confirmation: sync now
			}
		}
	}
}

// firstRound is closed once every running syncer's first attempt ended.
func (r *registries) firstRound() <-chan struct{} {
	r.mu.Lock()
	var firsts []chan struct{}
	for _, sy := range r.running {
		firsts = append(firsts, sy.first)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for _, f := range firsts {
			<-f
		}
		close(done)
	}()
	return done
}

// specChanged starts, restarts or stops the syncer of the spec in e.
func (r *registries) specChanged(ctx context.Context, e store.Entry[*sluicev1.RegistrySpec]) {
	name, isSpec, ok := contract.RegistryOfKey(e.Key)
	if !ok || !isSpec {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.running[name]
	switch {
	case e.Deleted:
		if cur != nil {
			r.retire(cur)
			delete(r.running, name)
			r.log.Info().Str("registry", name).Msg("registry removed: no longer synced; its intents stay stored and in force")
			r.cfg.metrics.removed(name)
			r.events.Emit(&sluicev1.Event{Kind: kindRegistry, Id: name, Type: "RegistryRemoved",
				Reason: fmt.Sprintf("registry %s was removed: no longer synced; the intents it brought stay stored and in force", name)})
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.dropStatus(ctx, name) }()
		}
		return
	case e.Err != nil:
		r.quarantine.Report(r.specs.Bucket(), e.Key, e.Revision, e.Err,
			"the registry is not synced until its spec is stored again (sluice registry add --update)")
		return
	}
	spec := e.Value
	if spec.GetName() == "" {
		spec.Name = name
	}
	if cur != nil && proto.Equal(cur.spec, spec) {
		return
	}
	if cur != nil {
		r.retire(cur)
	}
	sctx, cancel := context.WithCancel(ctx)
	sy := &syncer{spec: spec, rev: e.Revision, cancel: cancel, nudge: make(chan struct{}, 1), first: make(chan struct{}), done: make(chan struct{})}
	r.running[name] = sy
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(sy.done)
		r.runSyncer(sctx, sy)
	}()
}

// retire stops a syncer; the pruner waits for it to return. r.mu is held.
func (r *registries) retire(sy *syncer) {
	sy.cancel()
	if r.cfg.gitCache != "" {
		r.retired = append(r.retired, sy.done)
	}
}

func (r *registries) nudge(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sy := r.running[name]; sy != nil {
		select {
		case sy.nudge <- struct{}{}:
		default:
		}
	}
}

// nudgeAll makes every registry sync now (the pause was lifted).
func (r *registries) nudgeAll() {
	r.mu.Lock()
	names := make([]string, 0, len(r.running))
	for n := range r.running {
		names = append(names, n)
	}
	r.mu.Unlock()
	for _, n := range names {
		r.nudge(n)
	}
}

func (r *registries) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, sy := range r.running {
		sy.cancel()
		delete(r.running, name)
	}
}

// dropStatus removes a removed registry's status.
func (r *registries) dropStatus(ctx context.Context, name string) {
	cur, err := r.status.Get(ctx, name)
	if err != nil && !errors.Is(err, store.ErrUndecodable) {
		return
	}
	if err := r.status.Delete(ctx, name, cur.Revision); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		r.log.Warn().Err(err).Str("registry", name).Msg("remove the status of a removed registry")
	}
}
