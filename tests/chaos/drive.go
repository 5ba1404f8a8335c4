package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fleetWide names the routing table every change sets on every node.
const fleetWide = "fleet-wide"

// applied is a change once the configurator accepted it.
type applied struct {
	done       chan struct{} // closed once its first rollout is set
	revision   string
	superseded bool // the next change was applied while this one still ran
	// skipping: the configurator refused it at request time for agents that
	// cannot read it, and it was applied again with skipIncompatible, as the
	// refusal says (skew.go, refusedForSkew).
	skipping bool
	mu       sync.Mutex
	// rollouts are the rollouts of its revision: the one its apply was
	// answered with, then each of a head the configurator wrote again at
	// a higher generation (follow). The last is its rollout now.
	rollouts []changeRollout
}

// changeRollout is one rollout of a change's revision.
type changeRollout struct {
	id       string
	gen      uint64             // its head's generation
	strategy *sluicev1.Strategy // what it runs: the apply's, or the rewritten head's
}

// current is a's rollout now (zero before its apply was answered).
func (a *applied) current() changeRollout {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.rollouts) == 0 {
		return changeRollout{}
	}
	return a.rollouts[len(a.rollouts)-1]
}

// id is a's rollout now ("" before its apply was answered).
func (a *applied) id() string { return a.current().id }

// first is the rollout a's apply was answered with.
func (a *applied) first() changeRollout {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.rollouts) == 0 {
		return changeRollout{}
	}
	return a.rollouts[0]
}

// all are a's rollouts so far, the apply's first.
func (a *applied) all() []changeRollout {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.rollouts)
}

func (a *applied) add(r changeRollout) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rollouts = append(a.rollouts, r)
}

// driver applies the scenario's changes through the configurator's API, as
// a user would, and waits for each rollout to end.
type driver struct {
	sys     *system
	base    []*sluicev1.Intent
	changes []*applied
	mu      sync.Mutex
	away    map[string]bool // nodes a fault made leave, picked as it ran (pause-away)
	// holds are the changes whose apply waits for a fault (join-during-
	// revert: its node's presence expired first), by change index.
	holds map[int]*hold
	// joiners are the nodes join-during-revert brought back while a rollout reverted.
	joiners []Joiner
}

func (d *driver) joined(j Joiner) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.joiners = append(d.joiners, j)
}

func (d *driver) joinedSoFar() []Joiner {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.joiners)
}

// hold keeps a change's apply waiting until released (once).
type hold struct {
	ch   chan struct{}
	once sync.Once
}

func (h *hold) release() { h.once.Do(func() { close(h.ch) }) }

// holdFor is the hold on change i's apply, nil if nothing holds it.
func (d *driver) holdFor(i int) *hold { return d.holds[i] }

// waitHold waits until change i's apply is released, for at most
// holdWithin: a fault whose trigger never came does not stop the run.
func (d *driver) waitHold(ctx context.Context, i int) {
	h := d.holdFor(i)
	if h == nil {
		return
	}
	t := time.NewTimer(holdWithin)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-h.ch:
	case <-t.C:
		d.sys.log.add("change %d: the fault holding its apply did not release it within %s; applied", i, holdWithin)
	}
}

const holdWithin = 20 * time.Second

// left records that a fault made node leave (Expectation.Leavers).
func (d *driver) left(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.away == nil {
		d.away = map[string]bool{}
	}
	d.away[node] = true
}

func newDriver(s *system) *driver {
	// The suite's own copy of the examples as they were when its seeds were
	// last tuned: a seed's schedule, and what it can catch, should not move
	// when examples/ is edited for users (seed 143 did: docs/chaos.md).
	base, err := intent.ParseFiles("testdata/base")
	if err != nil {
		s.t.Fatal(err)
	}
	d := &driver{sys: s, base: base, holds: map[int]*hold{}}
	for range s.sc.Changes {
		d.changes = append(d.changes, &applied{done: make(chan struct{})})
	}
	for _, ft := range s.sc.Faults {
		if ft.Kind == JoinDuringRevert {
			d.holds[ft.Change+1] = &hold{ch: make(chan struct{})}
		}
	}
	return d
}

// apply sends change i, retrying while the configurator is away (a user
// runs the command again); it returns once the configurator answered.
func (d *driver) apply(ctx context.Context, i int) error {
	req := d.request(i)
	if d.changes[i].skipping {
		req.Strategy.SkipIncompatible = true
	}
	ctx, cancel := context.WithTimeout(ctx, acceptWithin)
	defer cancel()
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := apiclient.Apply(actx, d.sys.Env().Conn, req)
		cancel()
		if err == nil {
			a := d.changes[i]
			a.revision = resp.GetRevision()
			a.add(changeRollout{id: contract.RolloutID(resp.GetGeneration(), resp.GetRevision()), gen: resp.GetGeneration(),
				strategy: proto.Clone(req.GetStrategy()).(*sluicev1.Strategy)})
			close(a.done)
			d.sys.log.add("change %d applied: rollout %s (changed=%v)", i, a.id(), resp.GetChanged())
			return nil
		}
		if ae := (*apiclient.Error)(nil); errors.As(err, &ae) && ae.Code == contract.ErrCodeInvalid {
			if d.refusedForSkew(i, ae.Description) {
				req.Strategy.SkipIncompatible = true
				continue
			}
			return fmt.Errorf("apply change %d: the harness built an invalid request: %w", i, err)
		}
		d.sys.log.add("change %d: apply failed, retrying: %v", i, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("the configurator did not accept change %d within %s (the last error is in the schedule): %w", i, acceptWithin, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// request is change i's apply: the examples, the fleet-wide routing table
// and the change's strategy.
func (d *driver) request(i int) *sluicev1.ApplyRequest {
	c := d.sys.sc.Changes[i]
	in := append(append([]*sluicev1.Intent(nil), d.base...),
		&sluicev1.Intent{Name: fleetWide, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: c.TableID}}})
	return &sluicev1.ApplyRequest{Intents: in, Strategy: d.sys.decorate(i, c.Strategy), Source: "chaos"}
}

// declared are the intents-bucket keys of the intents every change
// declares: the examples and the fleet-wide routing table.
func (d *driver) declared() []string {
	keys := []string{intent.Key(&sluicev1.Intent{Name: fleetWide, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{}}})}
	for _, in := range d.base {
		keys = append(keys, intent.Key(in))
	}
	slices.Sort(keys)
	return keys
}

// rollout reads the record of rollout id: nil if absent or undecodable;
// its error is a read that failed.
func (s *system) rollout(ctx context.Context, id string) (*sluicev1.Rollout, error) {
	// Each read gets its own second: a request sent while the server
	// restarts may never be answered, and must not hold the caller up.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	e, err := s.Env().Buckets.Rollouts.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rollout %s: %w", id, err)
	}
	r := &sluicev1.Rollout{}
	if store.Decode(contract.BucketRollouts, id, e.Value(), r) != nil {
		return nil, nil // quarantined (garbage-value): as if not written yet
	}
	return r, nil
}

// waitPhase polls rollout id until cond holds for its record (true). It
// gives up (false) once within has passed with the record read. While the
// reads fail (a server the harness restarted is coming back) it goes on
// past within, for up to readPatience of failed reads in a row; then, or
// if ctx ends while they fail, its error is the harness's.
func (s *system) waitPhase(ctx context.Context, id string, within time.Duration, cond func(*sluicev1.Rollout) bool) (bool, error) {
	deadline := time.Now().Add(within)
	var failing time.Time // when the reads began failing; zero while they read
	changed, stop := s.watchRollout(ctx, id)
	defer stop()
	t := time.NewTicker(phasePoll)
	defer t.Stop()
	for {
		r, err := s.rollout(ctx, id)
		switch {
		case err == nil:
			failing = time.Time{}
		case failing.IsZero():
			failing = time.Now()
		}
		if r != nil && cond(r) {
			return true, nil
		}
		if err != nil && (time.Since(failing) >= readPatience || ctx.Err() != nil) {
			return false, harnessErr("could not read rollout %s for %s: %w", id, time.Since(failing).Round(time.Millisecond), err)
		}
		if err == nil && time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				return false, ctx.Err()
			}
		case <-t.C:
		case <-changed:
		}
	}
}

// phasePoll: waitPhase reads the record when a watch of its key says it
// was written, and every phasePoll besides, in case the watch missed a
// write (a NATS restart) or could not be made. It polled every 3 ms before:
// a quarter of a seed's processor time on virtual time went to those reads
// and their decoding.
const phasePoll = 100 * time.Millisecond

// watchRollout signals each write of rollout id's record (and its value
// when the watch starts), at most one signal pending; stop ends the watch.
// The watch is made in a goroutine of its own, never on the caller's way:
// a consumer-create request sent as the server stops is never answered, and
// nats.go waits for that answer as long as the watch's context lives (the
// seed's, five minutes). Seed 1344 on virtual time: the driver and a fault
// waiting for "ended" began to wait for change 1's rollout as restart-nats
// shut the server down, and sat in Watch until the seed's deadline though
// the rollout had Succeeded at 11.3 s: the fault never fired, and when the
// driver's watch was the lost one (1 run in 3) the seed failed as the
// harness's ("could not read rollout … context deadline exceeded"). The
// store's watch asks again after an unanswered creation; until it is made,
// the caller's reads every phasePoll serve.
func (s *system) watchRollout(ctx context.Context, id string) (<-chan struct{}, func()) {
	ctx, cancel := context.WithCancel(ctx)
	records := store.New(s.Env().Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		updates, err := records.WatchKeys(ctx, id)
		if err != nil {
			return // ctx ended, or the watch cannot be made: the reads serve
		}
		for range updates { // closed once ctx ends
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() {
		cancel()
		<-done
	}
}

func ended(r *sluicev1.Rollout) bool { return contract.Terminal(r.GetPhase()) }

// run applies every change in turn: the first after the fleet registered,
// each next one after the previous rollout ended, or while it still runs
// when the change supersedes it.
func (d *driver) run(ctx context.Context) error {
	if d.sys.sc.Registry != nil {
		if err := d.declareRegistry(ctx); err != nil {
			return err
		}
	}
	for i, c := range d.sys.sc.Changes {
		if i > 0 {
			prev := d.changes[i-1]
			if c.Supersede {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(c.After):
				}
				if _, err := d.follow(ctx, i-1); err != nil {
					d.sys.log.add("change %d: %v", i-1, err)
				}
				id := prev.id()
				var r *sluicev1.Rollout
				err := retry(ctx, func(ctx context.Context) (err error) {
					r, err = d.sys.rollout(ctx, id)
					return err
				})
				if err != nil {
					return harnessErr("could not tell whether change %d superseded rollout %s: %w", i, id, err)
				}
				if r == nil || !ended(r) {
					prev.superseded = true
				}
			} else {
				if err := d.waitEnded(ctx, i-1, fmt.Sprintf("of change %d", i-1), d.endWithin(i-1)); err != nil {
					return err
				}
				d.sys.log.add("rollout %s of change %d ended", prev.id(), i-1)
			}
		}
		d.waitHold(ctx, i) // before the closing window's wait: it may take seconds
		if err := d.untilClosing(ctx, i); err != nil {
			return err
		}
		if err := d.freezeBeforeApply(ctx, i); err != nil {
			return err
		}
		if err := d.apply(ctx, i); err != nil {
			return err
		}
		if i == 0 {
			// The baseline must be in force before faults begin.
			if err := d.waitEnded(ctx, 0, "of the baseline", endWithin); err != nil {
				return err
			}
			d.sys.log.add("baseline rollout %s ended", d.changes[0].id())
		}
	}
	last := len(d.changes) - 1
	if err := d.waitEnded(ctx, last, "of the last change", d.endWithin(last)); err != nil {
		return err
	}
	d.sys.log.add("rollout %s of change %d ended", d.changes[last].id(), last)
	return nil
}

// waitEnded waits up to within for change i's rollout (of what) to end,
// following it to the rollout of a head the configurator wrote again at a
// higher generation of its revision (follow), which then has within of
// its own. The head is looked at every followEvery while the rollout has
// not ended, and once more when it has (the rewritten head's rollout
// waits for it to end). Its error says it did not end, or is the
// harness's (waitPhase).
func (d *driver) waitEnded(ctx context.Context, i int, of string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if _, err := d.follow(ctx, i); err != nil {
			d.sys.log.add("change %d: %v", i, err) // looked at again after the next slice
		}
		id := d.changes[i].id()
		ok, err := d.sys.waitPhase(ctx, id, min(followEvery, max(time.Until(deadline), 0)), ended)
		switch {
		case err != nil:
			return fmt.Errorf("wait for rollout %s %s to end: %w", id, of, err)
		case ok:
			moved, err := d.follow(ctx, i)
			if err != nil {
				d.sys.log.add("change %d: %v", i, err)
			}
			if !moved {
				return nil
			}
			deadline = time.Now().Add(within)
		case !time.Now().Before(deadline):
			return fmt.Errorf("rollout %s %s did not end within %s", id, of, within)
		}
	}
}

// followEvery: how often waitEnded looks at the head while the rollout it
// waits for has not ended.
const followEvery = time.Second

// follow moves change i to the rollout of the head when the configurator
// wrote the head again at a higher generation of the change's revision. A
// configurator that starts over an unreadable head writes it again from
// the newest rollout's record when the stored intents are that rollout's
// revision (the same generation: nothing to follow). When they are not
// (no coordinator read the change's generation before the garbage), it
// cuts a new generation of the same revision with the default strategy
// and says so (Head.strategy_lost): the coordinator rolls that generation
// out instead (seed 154: rollout 2-99b256084261 was never started,
// 10-99b256084261 ran). Only such a head moves it: one of the same
// revision that a registry sync wrote after a head of another revision (a
// registry's files dropped and back: seeds 152 and 188) is no rollout of
// the change, and is judged by nothing of it. A head that is absent,
// unreadable, of another revision, not above the change's rollout's
// generation, or at or above the next change's (its own apply) moves
// nothing either. true: change i moved; its error is a read that failed.
func (d *driver) follow(ctx context.Context, i int) (bool, error) {
	a := d.changes[i]
	cur := a.current()
	if cur.id == "" {
		return false, nil
	}
	h, err := readProto(ctx, d.sys, d.sys.Env().Buckets.Revisions, contract.KeyHead, &sluicev1.Head{})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, errUndecodable):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the head to see whether it was written again: %w", err)
	}
	if h.GetRevision() != a.revision || h.GetGeneration() <= cur.gen || !h.GetStrategyLost() {
		return false, nil
	}
	if i+1 < len(d.changes) {
		if next := d.changes[i+1].first(); next.id != "" && h.GetGeneration() >= next.gen {
			return false, nil
		}
	}
	r := changeRollout{id: contract.RolloutID(h.GetGeneration(), h.GetRevision()), gen: h.GetGeneration(), strategy: h.GetStrategy()}
	a.add(r)
	d.sys.log.add("change %d: the head was written again at generation %d of its revision: its rollout is now %s, not %s", i, r.gen, r.id, cur.id)
	return true, nil
}

// expectations are what each change's rollout must end as, by rollout
// id: the rollout its apply was answered with, and each the driver followed
// it to (follow), each by the strategy it runs.
func (d *driver) expectations(natsRestarted bool) map[string]Expectation {
	sc := d.sys.sc
	out := map[string]Expectation{}
	leavers := map[string]bool{}
	lapse := false // heartbeats of nodes the schedule does not make leave may stop
	d.mu.Lock()
	for n := range d.away {
		leavers[n] = true
	}
	d.mu.Unlock()
	for _, f := range sc.Faults {
		switch {
		case f.Kind == AgentLeave:
			leavers[f.Node] = true
		case f.Kind == KillServer, f.Kind == RestartNATS:
			lapse = true
		case (f.Kind == NetDrop || f.Kind == NetStall) && d.sys.nodes[f.Node] != nil:
			lapse = true
		}
	}
	for i := range sc.Changes {
		rs := d.changes[i].all()
		for k, ro := range rs {
			x := d.expectation(i, ro.strategy, k == len(rs)-1, leavers, lapse, natsRestarted)
			// A head the configurator wrote again whose strategy
			// supersedes stops the rollout it follows, if that one still ran.
			if k+1 < len(rs) && contract.Supersedes(rs[k+1].strategy) {
				x.Phases, x.AllFail = nil, false
				x.Why = fmt.Sprintf("superseded by rollout %s of the head the configurator wrote again: any end", rs[k+1].id)
			}
			out[ro.id] = x
		}
	}
	return out
}

// expectation is what a rollout of change i's revision must end as when
// it runs strategy st: the one the change was applied with, or that of
// the head the configurator wrote again (follow). last: the change's last
// rollout, the one the next change may supersede.
func (d *driver) expectation(i int, st *sluicev1.Strategy, last bool, leavers map[string]bool, lapse, natsRestarted bool) Expectation {
	sc := d.sys.sc
	c := sc.Changes[i]
	var bad []string
	ambiguous := false
	var old []string // agents that cannot read this rollout's config: never given its target
	if d.asksFeature(i, st) {
		old = sc.Skew.Old
	}
	for _, n := range sortedKeys(c.Behaviour) {
		if c.Behaviour[n] != Healthy && !slices.Contains(old, n) {
			bad = append(bad, n)
			ambiguous = ambiguous || leavers[n]
		}
	}
	// A node hanging in the apply of the change this one supersedes
	// cannot pick this one up until its agent gives up: it may time out.
	var stuck []string
	if c.Supersede {
		for _, n := range sortedKeys(sc.Changes[i-1].Behaviour) {
			if sc.Changes[i-1].Behaviour[n] == Hang && c.Behaviour[n] == Healthy {
				stuck = append(stuck, n)
			}
		}
	}
	budget := 0
	fmt.Sscan(st.GetFailureBudget(), &budget)
	x := Expectation{MayFail: append(slices.Clone(bad), stuck...), EventsMayBeLost: natsRestarted, NodesMayLapse: lapse,
		Leavers: sortedKeys(leavers)}
	switch {
	case last && d.changes[i].superseded && i+1 < len(sc.Changes) && contract.Supersedes(sc.Changes[i+1].Strategy):
		x.Why = "superseded by the next change while it ran: any end"
	case len(stuck) > 0:
		x.Why = fmt.Sprintf("%v may still hang in the superseded change's apply and time out: any end", stuck)
	case ambiguous:
		x.Why = "a failing node also left: it may be skipped instead"
	case len(bad) > budget:
		x.Phases = []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK}
		x.Why = fmt.Sprintf("%d failing nodes %v exceed the failure budget %d", len(bad), bad, budget)
	case len(bad) > 0:
		x.Phases = []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED}
		x.AllFail = true
		x.Why = fmt.Sprintf("%d failing nodes %v within the failure budget %d", len(bad), bad, budget)
	default:
		x.Phases = []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}
		x.Why = "no node fails this change"
	}
	d.gateExpectation(i, st, &x, len(bad), budget)
	away := lapse || slices.ContainsFunc(old, func(n string) bool { return leavers[n] })
	d.skewExpectation(i, st, &x, x, away)
	return x
}

// faults runs the schedule: each fault waits for its trigger in its own
// goroutine; faults on one component take turns.
type faults struct {
	sys      *system
	drv      *driver
	watch    *watchers
	mu       sync.Mutex
	locks    map[string]chan struct{}
	restarts []string // NATS restarts and cluster servers stopped, as "server-1 at 3.20s"
	pauseGen uint64   // the last control/pause generation pausePlane wrote
	// resumed: pausePlane wrote its resume (under mu); garbage over
	// control/pause after it is written over again (garbage).
	resumed bool
}

// restarted lists the servers the schedule restarted or stopped so far.
func (f *faults) restarted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restarts)
}

// restart records that server (a cluster server's name, or "the server")
// was stopped now.
func (f *faults) restart(server string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts = append(f.restarts, fmt.Sprintf("%s at %.2fs", server, time.Since(f.sys.log.start).Seconds()))
}

// lock makes faults on one component take turns. A turn is a channel, not
// a sync.Mutex: a fault holds it across its sleeps, and on virtual time a
// goroutine waiting for a mutex stops the clock (synctest counts only a
// channel or a timer as a durable wait).
func (f *faults) lock(name string) func() {
	l := f.turn(name)
	l <- struct{}{}
	return func() { <-l }
}

// tryLock takes name's turn if no other fault holds it (unlock gives it back).
func (f *faults) tryLock(name string) bool {
	select {
	case f.turn(name) <- struct{}{}:
		return true
	default:
		return false
	}
}

func (f *faults) unlock(name string) { <-f.turn(name) }

func (f *faults) turn(name string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.locks[name]
	if l == nil {
		l = make(chan struct{}, 1)
		f.locks[name] = l
	}
	return l
}

func (f *faults) runAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ft := range f.sys.sc.Faults {
		wg.Go(func() { f.one(ctx, ft) })
	}
	wg.Go(func() { f.freezeWhileRunning(ctx) })
	wg.Wait()
}

// stopLeader stops the lease holder (coord-a if none runs) and returns its
// name and the holder the lease named. The caller holds "coordinators".
func (f *faults) stopLeader(ctx context.Context, ft Fault) (name, holder string) {
	s := f.sys
	holder, err := s.leader(ctx)
	if err != nil {
		s.log.add("%s: %v", ft, err)
	}
	name = holder
	if name == "" || !s.running(name) {
		name = coordinatorA
	}
	s.halt(name)
	return name, holder
}

// trigger waits for ft's moment; false (logged) if it never came.
func (f *faults) trigger(ctx context.Context, ft Fault) bool {
	a := f.drv.changes[ft.Change]
	select {
	case <-ctx.Done():
		return false
	case <-a.done:
	}
	s := f.sys
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch ft.Trigger {
	case AfterApply:
		select {
		case <-tctx.Done():
			return false
		case <-time.After(ft.Delay):
		}
		return true
	case Reverting:
		var reverting bool
		_, err := s.waitPhase(ctx, a.id(), 30*time.Second, func(r *sluicev1.Rollout) bool {
			reverting = r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
			return reverting || ended(r)
		})
		if err != nil {
			s.log.add("%s: %v", ft, err)
		}
		return reverting
	case Ended:
		ok, err := s.waitPhase(ctx, a.id(), 30*time.Second, ended)
		if err != nil {
			s.log.add("%s: %v", ft, err)
		}
		return ok
	case Applying:
		table := s.sc.Changes[ft.Change].TableID
		n := s.nodes[ft.Node]
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			if n.applying.Load() == table {
				return true
			}
			if i%50 == 0 {
				if r, _ := s.rollout(tctx, a.id()); r != nil && ended(r) { // unread: asked again 100ms later
					return false
				}
			}
			select {
			case <-tctx.Done():
				return false
			case <-t.C:
			}
		}
	}
	return false
}

func (f *faults) one(ctx context.Context, ft Fault) {
	if !f.trigger(ctx, ft) {
		f.sys.log.add("fault not reached: %s", ft)
		if ft.Kind == JoinDuringRevert {
			f.drv.holdFor(ft.Change + 1).release()
		}
		return
	}
	s := f.sys
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	switch ft.Kind {
	case KillLeader:
		defer f.lock("coordinators")()
		name, holder := f.stopLeader(ctx, ft)
		s.log.add("%s: stopped %s (lease holder was %q)", ft, name, holder)
		sleep(ft.Down)
		s.startCoordinator(name)
		s.log.add("%s: restarted %s", ft.Kind, name)
	case KillConfigurator:
		defer f.lock(configuratorC)()
		s.halt(configuratorC)
		s.log.add("%s: stopped", ft)
		sleep(ft.Down)
		s.startConfigurator()
		s.log.add("%s: restarted", ft.Kind)
	case KillAgent, AgentLeave:
		defer f.lock(ft.Node)()
		table := s.nodes[ft.Node].applying.Load()
		s.halt(ft.Node)
		s.log.add("%s: stopped (its applier was at table %d)", ft, table)
		sleep(ft.Down)
		s.startAgent(ft.Node)
		s.log.add("%s %s: started again", ft.Kind, ft.Node)
	case RestartNATS:
		defer f.lock("nats")()
		env := s.Env()
		env.Server.Shutdown()
		env.Server.WaitForShutdown()
		f.restart("the server")
		s.log.add("%s: server shut down", ft)
		sleep(ft.Down)
		env2 := startEnvAt(s)
		s.envMu.Lock()
		s.env = env2
		s.envMu.Unlock()
		f.watch.resume()
		s.log.add("%s: server up again", ft.Kind)
	case KillServer:
		defer f.lock("nats")()
		var i int
		fmt.Sscanf(ft.Node, "server-%d", &i)
		s.cluster.StopServer(s.t, i)
		f.restart(ft.Node) // an event published async through the stopped server may be lost (seed 76)
		s.log.add("%s: stopped", ft)
		sleep(ft.Down)
		if err := s.restartServer(ctx, i); err != nil {
			s.harnessFailed(harnessErr("could not restart %s: %w", ft.Node, err))
			s.log.add("%s %s: could not restart: %v", ft.Kind, ft.Node, err)
			return
		}
		f.watch.resume()
		s.log.add("%s %s: restarted", ft.Kind, ft.Node)
	case NetDrop, NetStall:
		target := ft.Node
		if target == "leader" {
			holder, err := s.leader(ctx)
			if err != nil {
				s.log.add("%s: %v", ft, err)
			}
			if target = holder; target == "" {
				s.log.add("%s: no leader to cut off", ft)
				return
			}
		}
		defer f.lock("net " + target)()
		if ft.Kind == NetDrop {
			s.log.add("%s: dropped %d connection(s) of %s", ft, s.proxy.drop(target), target)
			return
		}
		s.log.add("%s: stalling %s", ft, target)
		s.proxy.stall(target, ft.Down)
		s.log.add("%s: %s flows again", ft.Kind, target)
	case PausePlane:
		f.pausePlane(ctx, ft, pauseHooks{})
	case PauseAway:
		f.pauseAway(ctx, ft)
	case LeaveUntilRevert:
		f.leaveUntilRevert(ctx, ft)
	case AwayPastGrace:
		f.awayPastGrace(ctx, ft)
	case JoinDuringRevert:
		f.joinDuringRevert(ctx, ft)
	case StaleDesired:
		f.staleDesired(ctx, ft)
	case GarbageValue:
		f.garbage(ctx, ft)
	case PartialRegistry:
		f.partialRegistry(ctx, ft)
	case RegistryHold:
		f.registryHold(ctx, ft)
	case RegistryConfirmPending:
		f.confirmPending(ctx, ft)
	case RegistryRewind:
		f.registryRewind(ctx, ft)
	case PausedLeader:
		defer f.lock("coordinators")()
		old, err := s.leader(ctx)
		if err != nil {
			s.log.add("%s: %v", ft, err)
		}
		p := s.pausers[old]
		if p == nil || !s.running(old) {
			s.log.add("%s: no running leader to pause (holder %q)", ft, old)
			return
		}
		epoch := f.watch.maxEpoch()
		p.pause()
		s.log.add("%s: paused %s (writes held, clock frozen; highest leader epoch written %d)", ft, old, epoch)
		// Wake it once the standby holds the lease and had time to write.
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		for {
			h, err := s.leader(wctx)
			if h != "" && h != old {
				s.log.add("%s: %s took over", ft.Kind, h)
				// Wake it as soon as the new term stored its first write (a
				// desired config or a rollout record of a higher epoch), up
				// to 3 s: a held write that lands before any of the new
				// term's proves nothing (I6 compares epochs in stream
				// order), and one for a key the new term has written since
				// fails its compare-and-set on the key anyway, fence or not.
				for i := 0; i < 600 && f.watch.maxEpoch() <= epoch && ctx.Err() == nil; i++ {
					sleep(5 * time.Millisecond)
				}
				s.log.add("%s: highest leader epoch written now %d", ft.Kind, f.watch.maxEpoch())
				break
			}
			if wctx.Err() != nil {
				if err != nil {
					s.log.add("%s: %v", ft.Kind, err)
				}
				s.log.add("%s: no standby took over within 15s", ft.Kind)
				break
			}
			sleep(20 * time.Millisecond)
		}
		p.resume()
		s.log.add("%s: woke %s up (%d writes were held)", ft.Kind, old, p.held.Load())
	}
}
