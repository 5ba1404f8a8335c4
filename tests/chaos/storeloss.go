package chaos

// The store-loss fault (issue 38, invariant I10): once the seed's last
// rollout ended and the checks at rest ran, the harness stops the control
// plane (configurator, coordinators, reaper) and NATS, deletes the
// JetStream store (StoreDir/jetstream; the credentials of a secured
// server, in StoreDir/creds and StoreDir/jwt, stay), and starts NATS and
// the services again on the empty store, while the agents keep running
// and keep their state on disk. Then, as an operator would meet it:
//
//  1. every agent registers again (its presence names the config it runs,
//     from its last-good on disk: pkg/storeloss's evidence);
//  2. the user applies the last change again: the configurator must refuse
//     it (contract.ErrCodeStoreLost);
//  3. for a node lease more, nothing may start: no revision stored, no
//     rollout record, no NodeReaped event, no applier call;
//  4. the harness confirms starting from nothing, as `sluice recover
//     --confirm-empty` does (control/store.confirm);
//  5. the change is applied again and its rollout must end (the agents
//     that kept running take the new store's configs: control/store.id
//     says the store was replaced, docs/agent.md); the system must come to
//     rest.
//
// I10: no applier call between the wipe and the confirmation (no node
// loses its config to a lost store), and nothing started before it. The
// checks at rest (Check) judged the run before the wipe: every record they
// read is gone after it, so they are not run again; what comes after is
// judged here only.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// storeLossOdds: one seed in storeLossOdds draws the store-loss fault
// (one-server seeds only: drawn for every seed, left out on R3 clusters).
const storeLossOdds = 6

// loseStore runs the store-loss fault (above) and returns the violations
// it saw; its error is the harness's failure at its own part.
func (s *system) loseStore(ctx context.Context, d *driver) ([]Violation, error) {
	var vs []Violation
	add := func(format string, args ...any) {
		vs = append(vs, Violation{Invariant: "I10", Detail: fmt.Sprintf(format, args...)})
	}
	for _, c := range []string{configuratorC, coordinatorA, coordinatorB, reaperC} {
		s.halt(c)
	}
	env := s.Env()
	env.Server.Shutdown()
	env.Server.WaitForShutdown()
	if err := os.RemoveAll(filepath.Join(s.natsDir, "jetstream")); err != nil {
		return nil, harnessErr("store-loss: delete the JetStream store: %w", err)
	}
	wiped := time.Now()
	applies := map[string]int{}
	for name, n := range s.nodes {
		applies[name] = len(n.history())
	}
	env2 := startEnvAt(s)
	s.envMu.Lock()
	s.env = env2
	s.envMu.Unlock()
	s.startConfigurator()
	s.startCoordinator(coordinatorA)
	if s.sc.Standby {
		s.startCoordinator(coordinatorB)
	}
	s.startReaper()
	s.log.add("store-loss: the JetStream store was deleted; NATS and the control plane started again on an empty store, the agents kept running")

	// 1. Every agent registers again.
	rctx, cancel := context.WithTimeout(ctx, registerWithin+readPatience+10*time.Second)
	missing, err := await(rctx, registerWithin, 1, s.unregistered)
	cancel()
	switch {
	case err != nil:
		return nil, harnessErr("store-loss: could not tell whether every agent registered again: %w", err)
	case len(missing) > 0:
		add("agents did not register again within %s after the store was lost: %v", registerWithin, missing)
		return vs, nil
	}
	s.log.add("store-loss: every agent registered again")

	// 2. An apply is refused while the store is lost.
	last := len(s.sc.Changes) - 1
	code, err := d.applyOnce(ctx, last)
	switch {
	case err != nil:
		return nil, err
	case contract.ErrCode(code) != contract.ErrCodeStoreLost:
		add("the configurator accepted change %d's apply on a lost store (answer %q), before any operator confirmed", last, orDefault(code, "accepted"))
	default:
		s.log.add("store-loss: change %d's apply refused (%s), as it should be", last, code)
	}

	// 3. Nothing starts for a node lease more.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(s.sc.NodeLease):
	}
	vs = append(vs, s.nothingStarted(ctx, wiped, applies)...)

	// 4. The operator confirms starting from nothing.
	confirmed, err := s.confirmEmpty(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(s.nodes) {
		for _, a := range s.nodes[name].history()[applies[name]:] {
			if a.At.Before(confirmed) {
				vs = append(vs, Violation{Invariant: "I10", Node: name, Detail: fmt.Sprintf(
					"its applier was called at %.2fs (%s, rollout %q, error %q), after the store was lost (%.2fs) and before the operator confirmed (%.2fs)",
					a.At.Sub(s.log.start).Seconds(), short(a.Fingerprint), a.Rollout, a.Err, wiped.Sub(s.log.start).Seconds(), confirmed.Sub(s.log.start).Seconds())})
			}
		}
	}
	s.log.add("store-loss: confirmed starting from an empty store (control/store.confirm)")

	// 5. The run goes on: the change is applied again and rolls out. The
	// new store's leader epochs and nodeconfigs revisions start below what
	// the agents saw; they take its configs because its identity
	// (control/store.id) is another.
	vs = append(vs, s.continueAfterLoss(ctx, d, last)...)
	// No node that ran a config before the wipe is reverted to the empty
	// config after the confirmation: the new store holds no backup of what
	// it ran, and the empty config is none (I10).
	hist := map[string][]Apply{}
	for name, n := range s.nodes {
		hist[name] = n.history()
	}
	vs = append(vs, lostToStore(hist, wiped, confirmed, render.Fingerprint(&sluicev1.NodeConfig{}), s.log.start)...)
	// And the system comes to rest again (which also lets the server's
	// writes settle before the seed ends: on virtual time a flush still
	// sleeping when the bubble's test returns is a deadlock).
	busy, err := s.settle(ctx, settleWithin)
	if err != nil {
		return nil, harnessErr("store-loss: could not tell whether the system is at rest after the confirmation: %w", err)
	}
	for _, b := range busy {
		vs = append(vs, Violation{Invariant: "I2", Detail: "not quiescent after the store loss was confirmed: " + b})
	}
	return vs, nil
}

// lostToStore is the part of I10 judged after the confirmation: a node
// whose applier put a config other than the empty one in force before the
// store was lost (wiped) is never reverted to the empty config after the
// operator confirmed the loss (confirmed). The new store holds no backup
// of what it ran, so a revert that took "no backup" for "ran nothing"
// would write it the empty config: the node loses its config to the lost
// store. A forward apply of the empty config (a change that selects
// nothing for it) is the operator's and not judged. start is the seed's
// start, for the times shown.
func lostToStore(hist map[string][]Apply, wiped, confirmed time.Time, empty string, start time.Time) []Violation {
	var vs []Violation
	for _, name := range sortedKeys(hist) {
		ran := ""
		for _, a := range hist[name] {
			if a.At.After(wiped) {
				break
			}
			if a.Err == "" {
				ran = a.Fingerprint
			}
		}
		if ran == "" || ran == empty {
			continue
		}
		for _, a := range hist[name] {
			if a.Revert && a.Fingerprint == empty && a.At.After(confirmed) {
				vs = append(vs, Violation{Invariant: "I10", Node: name, Detail: fmt.Sprintf(
					"lost its config to the lost store: it ran %s before the store was lost (%.2fs), and a revert of rollout %q put the empty config in force at %.2fs, after the confirmation (%.2fs)",
					short(ran), wiped.Sub(start).Seconds(), a.Rollout, a.At.Sub(start).Seconds(), confirmed.Sub(start).Seconds())})
				break
			}
		}
	}
	return vs
}

// continueAfterLoss applies change last again after a confirmed store
// loss and waits for its rollout to end.
func (s *system) continueAfterLoss(ctx context.Context, d *driver, last int) []Violation {
	var vs []Violation
	add := func(format string, args ...any) {
		vs = append(vs, Violation{Invariant: "I2", Detail: fmt.Sprintf(format, args...)})
	}
	if err := d.applyAgain(ctx, last); err != nil {
		add("after the confirmation: %v", err)
		return vs
	}
	if err := d.waitEnded(ctx, last, fmt.Sprintf("of change %d after the confirmation", last), endWithin); err != nil {
		add("%v", err)
	} else {
		id := d.changes[last].id()
		r, _ := s.rollout(ctx, id)
		s.log.add("store-loss: rollout %s of change %d ended after the confirmation: %s (%s), %d revert(s) failed",
			id, last, r.GetPhase(), r.GetReason(), r.GetCounts().GetRevertFailed())
	}
	return vs
}

// nothingStarted: since the wipe no revision was stored, no rollout
// record written, no node reaped, no applier called.
func (s *system) nothingStarted(ctx context.Context, wiped time.Time, applies map[string]int) []Violation {
	var vs []Violation
	add := func(node, format string, args ...any) {
		vs = append(vs, Violation{Invariant: "I10", Node: node, Detail: fmt.Sprintf(format, args...)})
	}
	b := s.Env().Buckets
	var revs, rolls []string
	err := retry(ctx, func(ctx context.Context) (err error) {
		if revs, err = s.leaderKeys(ctx, b.Revisions); err != nil {
			return err
		}
		rolls, err = s.leaderKeys(ctx, b.Rollouts)
		return err
	})
	if err != nil {
		add("", "could not list the revisions and rollouts after the store was lost: %v", err)
		return vs
	}
	for _, k := range revs {
		if !contract.IsControlKey(k) {
			add("", "revisions/%s was stored while the store was lost, before any operator confirmed", k)
		}
	}
	for _, k := range rolls {
		if !contract.IsControlKey(k) {
			add("", "rollouts/%s was written while the store was lost, before any operator confirmed", k)
		}
	}
	var evs []*sluicev1.Event
	if err := retry(ctx, func(ctx context.Context) (err error) {
		evs, _, err = readEvents(ctx, s.Env().JS)
		return err
	}); err != nil {
		add("", "could not read the events after the store was lost: %v", err)
		return vs
	}
	for _, ev := range evs {
		if ev.GetType() == "NodeReaped" {
			add(ev.GetNode(), "reaped while the store was lost, before any operator confirmed: %s", ev.GetReason())
		}
	}
	for _, name := range sortedKeys(s.nodes) {
		if n := len(s.nodes[name].history()); n > applies[name] {
			add(name, "its applier was called %d time(s) since the store was lost (%.2fs)", n-applies[name], wiped.Sub(s.log.start).Seconds())
		}
	}
	return vs
}

// confirmEmpty writes control/store.confirm as `sluice recover
// --confirm-empty` does, and returns when it was stored.
func (s *system) confirmEmpty(ctx context.Context) (time.Time, error) {
	c := &sluicev1.StoreConfirm{By: "chaos", At: timestamppb.Now(), Reason: "the chaos suite's store-loss fault"}
	b, err := store.Marshal(c)
	if err != nil {
		return time.Time{}, err
	}
	err = retry(ctx, func(ctx context.Context) error {
		_, err := s.Env().Buckets.Control.Put(ctx, contract.KeyStoreConfirm, b)
		return err
	})
	if err != nil {
		return time.Time{}, harnessErr("store-loss: write control/%s: %w", contract.KeyStoreConfirm, err)
	}
	return time.Now(), nil
}

// applyOnce sends change i once and returns the configurator's answer:
// "" if it accepted it, else the error code. A request that goes
// unanswered (the configurator is starting) is sent again, for up to
// acceptWithin.
func (d *driver) applyOnce(ctx context.Context, i int) (string, error) {
	req := d.request(i)
	ctx, cancel := context.WithTimeout(ctx, acceptWithin)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := apiclient.Apply(actx, d.sys.Env().Conn, req)
		acancel()
		ae := (*apiclient.Error)(nil)
		switch {
		case err == nil:
			return "", nil
		case errors.As(err, &ae) && ae.Code != contract.ErrCodeUnavailable:
			return string(ae.Code), nil
		}
		select {
		case <-ctx.Done():
			return "", harnessErr("store-loss: the configurator did not answer change %d's apply within %s: %w", i, acceptWithin, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// applyAgain applies change i again (after a confirmed store loss): its
// record in d is replaced by the new rollout's.
func (d *driver) applyAgain(ctx context.Context, i int) error {
	d.changes[i] = &applied{done: make(chan struct{})}
	return d.apply(ctx, i)
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
