package chaos

import (
	"context"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// registryRewind force-pushes a git registry's branch to an older commit
// (ft.Rewind: the fill's commit holding only the first Keep intents), keeps
// it there for longer than the settle period, then puts the head back (an
// operator undoing the force-push). The configurator must hold the
// rewound branch: the older commit is an ancestor of the commit in force,
// and a branch that goes back in history is no answer (docs/registries.md).
// Its missing intents are not recorded absent; the rewind's span is, and
// a mark inside it is an I7 violation whatever the settle period says.
//
// It takes the configurator's turn too, and first waits for a sync of the
// running configurator: the commit in force is kept by the running
// configurator (docs/registries.md), so a branch rewound while none runs,
// or before a restarted one read it once, is read as it stands, through
// the settle period (seed 117 rewound it while kill-configurator held the
// configurator down, and the older commit's missing intents were marked).
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
	sp := Span{From: time.Now()}
	from, to, err := g.rewind(ft.Rewind.Keep)
	if err != nil {
		s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
		return
	}
	s.log.add("%s: branch %s force-pushed from %s to the older commit %s", ft, gitBranch, from, to)
	defer func() {
		s.reg.mu.Lock()
		s.reg.rewinds = append(s.reg.rewinds, sp)
		s.reg.mu.Unlock()
	}()
	if !sleepCtx(ctx, ft.Rewind.For) {
		return // the span stays open: the branch was never put back
	}
	if err := g.restore(); err != nil {
		s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
		return
	}
	sp.To = time.Now()
	s.log.add("%s: branch %s is back at %s", ft.Kind, gitBranch, from)
	f.awaitRestored(ctx, ft, sp.To)
}

// awaitSync waits until the registry's status records a sync merged after
// since (a running configurator read the registry), up to acceptWithin.
func (f *faults) awaitSync(ctx context.Context, ft Fault, since time.Time) bool {
	s := f.sys
	wctx, cancel := context.WithTimeout(ctx, acceptWithin+readPatience)
	defer cancel()
	busy, err := await(wctx, acceptWithin, 1, func(ctx context.Context) ([]string, error) {
		st, err := readProto(ctx, s, s.Env().Buckets.Registries, registryName, &sluicev1.RegistryStatus{})
		switch {
		case unread(err):
			return nil, err
		case err != nil:
			return []string{"no readable status"}, nil
		case st.GetLastSync() == nil || st.GetLastSync().AsTime().Before(since):
			return []string{"no sync since " + since.Format("15:04:05.000")}, nil
		}
		return nil, nil
	})
	if err != nil || len(busy) > 0 {
		s.log.add("%s: could not see the registry synced before the rewind (%v %v): fault not made", ft, busy, err)
		return false
	}
	return true
}
