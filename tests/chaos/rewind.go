package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// rewindHeld: how long a registry-rewind keeps the branch rewound once the
// registry's status said it is held: three more syncs, each of which must
// hold it too.
const rewindHeld = 3 * registrySync

// RewindObs is one registry-rewind as the harness drove it: the branch
// force-pushed at From to the older commit Target and put back at To
// (zero: never), Held when the harness first read a status of the
// registry holding it, and Synced (with Seen) the first status read that
// named Target as the commit in force: the configurator synced the
// rewound branch.
type RewindObs struct {
	Span
	Target string // the older commit's hash
	Held   time.Time
	Synced time.Time
	Seen   string
}

// registryRewind force-pushes a git registry's branch to an older commit
// (ft.Rewind: the fill's commit holding only the first Keep intents),
// reads the registry's status every holdPoll, and puts the head back (an
// operator undoing the force-push) rewindHeld after the status first said
// held, or after ft.Rewind.For (longer than the settle period) if it never
// did. The configurator must hold the rewound branch: the older commit is
// an ancestor of the commit in force, and a branch that goes back in
// history is no answer (docs/registries.md). Its missing intents are not
// recorded absent; the rewind's span is (I7: no mark inside it), and a
// status naming the older commit in force is a Rewind violation.
//
// It takes the configurator's turn too, and first waits for a sync of the
// running configurator, so that a commit in force is stored. Every rewind
// crosses a restart of the configurator: with ft.Rewind.Down it stops it
// before the force-push and starts it again after, else it restarts it once
// a status said held (and gives the new one rewindHeld more). The next
// configurator must hold the branch from the commit in force its
// registry's status records (docs/registries.md; seed 117 rewound it while
// kill-configurator held the configurator down, and the older commit's
// missing intents were marked).
func (f *faults) registryRewind(ctx context.Context, ft Fault) {
	s := f.sys
	g, ok := s.reg.store.(*gitStore)
	if !ok {
		s.log.add("%s: the registry is %s, not git: fault not reached", ft, s.reg.store.kind())
		return
	}
	defer f.lock("registry")()
	defer f.lock(configuratorC)()
	if !f.awaitSync(ctx, ft, time.Now()) {
		return
	}
	obs := RewindObs{Span: Span{From: time.Now()}}
	down := ft.Rewind.Down && s.halt(configuratorC)
	if down {
		s.log.add("%s: configurator stopped", ft)
	}
	from, to, err := g.rewind(ft.Rewind.Keep)
	if down {
		s.startConfigurator() // also when the push failed: the system runs on
	}
	if err != nil {
		s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
		return
	}
	obs.Target = to
	s.log.add("%s: branch %s force-pushed from %s to the older commit %s", ft, gitBranch, from[:12], to[:12])
	if down {
		s.log.add("%s: configurator started again on the rewound branch", ft.Kind)
	}
	restarted := down
	defer func() {
		s.reg.mu.Lock()
		s.reg.rewinds = append(s.reg.rewinds, obs)
		s.reg.mu.Unlock()
	}()
	until := obs.From.Add(ft.Rewind.For)
	for time.Now().Before(until) {
		rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		st, err := readProto(rctx, s, s.Env().Buckets.Registries, registryName, &sluicev1.RegistryStatus{})
		cancel()
		switch {
		case err != nil: // a read that failed, or garbage: the next one may read
		case st.GetCommit().GetHash() == to && obs.Synced.IsZero():
			obs.Synced, obs.Seen = time.Now(), fmt.Sprintf("state %s, commit %s, %d pending", st.GetState(), to[:12], len(st.GetPending()))
			s.log.add("%s: the registry synced the rewound branch: %s", ft.Kind, obs.Seen)
		case st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && st.GetError() != "" && obs.Held.IsZero() && obs.Synced.IsZero():
			// An answer held (with its error), not a deletion held.
			obs.Held = time.Now()
			s.log.add("%s: the registry holds the rewound branch: %s", ft.Kind, st.GetError())
			if end := obs.Held.Add(rewindHeld); end.Before(until) {
				until = end
			}
		case !restarted && !obs.Held.IsZero() && s.halt(configuratorC):
			restarted = true
			s.startConfigurator()
			until = time.Now().Add(rewindHeld)
			s.log.add("%s: configurator restarted while the branch is held: the next must hold it too", ft.Kind)
		}
		if !sleepCtx(ctx, holdPoll) {
			return // the span stays open: the branch was never put back
		}
	}
	if err := g.restore(); err != nil {
		s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
		return
	}
	obs.To = time.Now()
	s.log.add("%s: branch %s is back at %s", ft.Kind, gitBranch, from[:12])
	f.awaitRestored(ctx, ft, obs.To)
}

// awaitSync waits until the registry's status records a sync merged after
// since (a running configurator read the registry), up to acceptWithin. A
// status that holds garbage (a garbage-value write: a running configurator
// does not write over it, seed 145) ends the wait at once: no sync could
// show.
func (f *faults) awaitSync(ctx context.Context, ft Fault, since time.Time) bool {
	s := f.sys
	wctx, cancel := context.WithTimeout(ctx, acceptWithin+readPatience)
	defer cancel()
	var garbage error
	busy, err := await(wctx, acceptWithin, 1, func(ctx context.Context) ([]string, error) {
		st, err := readProto(ctx, s, s.Env().Buckets.Registries, registryName, &sluicev1.RegistryStatus{})
		switch {
		case unread(err):
			return nil, err
		case errors.Is(err, errUndecodable):
			garbage = err
			return nil, nil
		case err != nil:
			return []string{"no readable status"}, nil
		case st.GetLastSync() == nil || st.GetLastSync().AsTime().Before(since):
			return []string{"no sync since " + since.Format("15:04:05.000")}, nil
		}
		return nil, nil
	})
	switch {
	case garbage != nil:
		s.log.add("%s: the registry's status holds garbage (%v): no sync can show, fault not made", ft, garbage)
		return false
	case err != nil || len(busy) > 0:
		s.log.add("%s: could not see the registry synced before the rewind (%v %v): fault not made", ft, busy, err)
		return false
	}
	return true
}

// Rewind: a git registry's branch force-pushed to an older commit is held,
// never synced: no status of the registry read while it was rewound names
// the older commit as the one in force. (I7 judges the marks: none inside
// the rewind.) A held status never read is logged by the fault, not judged
// here: the rewind then lasted its whole For, longer than the settle
// period, so a configurator that synced it would have marked (I7).
func checkRewinds(o *Observation, add addFunc) {
	if o.Registry == nil {
		return
	}
	for _, r := range o.Registry.Rewinds {
		if !r.Synced.IsZero() {
			add("Rewind", "", "", "registry %s's branch was force-pushed at %s to the older commit %s; at %s its status named that commit in force (%s): a rewound branch is held, never synced",
				o.Registry.Name, r.From.Format("15:04:05.000"), r.Target[:12], r.Synced.Format("15:04:05.000"), r.Seen)
		}
	}
}
