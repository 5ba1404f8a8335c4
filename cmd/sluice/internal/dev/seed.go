package dev

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// readyTimeout bounds the wait for the configurator to answer.
const readyTimeout = 30 * time.Second

// applyExamples applies the intents in the examples directory through the
// configurator's API, like an operator would: their source is "api".
func (s *System) applyExamples(ctx context.Context) (Seed, error) {
	seed := Seed{FirstStart: true}
	intents, err := intent.ParseFiles(s.opts.Examples)
	if err != nil {
		return seed, fmt.Errorf("examples in %s: %w (fix them, or pass --no-examples)", s.opts.Examples, err)
	}
	if len(intents) == 0 {
		return seed, nil
	}
	nc, err := s.connect("seed")
	if err != nil {
		return seed, err
	}
	req := &sluicev1.ApplyRequest{Intents: intents, Source: contract.SourceAPI}
	if s.opts.MaxParallel != "" {
		req.Strategy = &sluicev1.Strategy{MaxParallel: s.opts.MaxParallel}
	}
	resp, err := apiclient.Apply(ctx, nc, req)
	if err != nil {
		return seed, fmt.Errorf("apply examples from %s: %w (fix them, or pass --no-examples)", s.opts.Examples, err)
	}
	seed.Intents, seed.Revision = len(intents), resp.GetRevision()
	s.log.Info().Int("intents", len(intents)).Str(logging.FieldRevision, resp.GetRevision()).
		Str("examples", s.opts.Examples).Msg("applied the examples on the first start of the data directory")
	return seed, nil
}

// seedHeld says why the examples must not be applied although the store
// is empty: the agents of the data directory have state (a last-good
// config on disk). "" when none has. It reads the disk, not the store: the
// agents' presence may not be written yet, and their state dirs are the
// evidence itself.
func (s *System) seedHeld() (string, error) {
	found, err := filepath.Glob(filepath.Join(s.opts.DataDir, "agents", "*", agent.LastGoodFile))
	if err != nil {
		return "", fmt.Errorf("look for the agents' state: %w", err)
	}
	if len(found) == 0 {
		return "", nil
	}
	what := fmt.Sprintf("%d agents have state (%s) in %s", len(found), agent.LastGoodFile, filepath.Join(s.opts.DataDir, "agents"))
	if len(found) == 1 {
		what = fmt.Sprintf("1 agent has state (%s) in %s", agent.LastGoodFile, filepath.Join(s.opts.DataDir, "agents"))
	}
	if s.loss != nil {
		what = s.loss.String() + "; " + what
	}
	return what + ": the empty store is not a first start", nil
}

// readLoss tells whether the store is lost (pkg/storeloss), once the
// agents have registered: their presence names what their nodes run.
func (s *System) readLoss(ctx context.Context) (*storeloss.Loss, error) {
	nc, err := s.connect("store-loss")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		return nil, err
	}
	loss, _, err := storeloss.Read(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("tell whether the store is lost: %w", err)
	}
	if loss != nil {
		s.log.Warn().Str(logging.FieldReason, loss.String()).Msg("the store is lost: nothing is started until an operator recovers; " + storeloss.WayOut)
	}
	return loss, nil
}

// storeRegistries stores the registries of --redis and --watch-dir in the
// control bucket, replacing what an earlier start stored under their names,
// as 'sluice registry add --update' does; then it reads every registry
// stored, those of earlier starts too (the configurator syncs them all), for
// the banner.
func (s *System) storeRegistries(ctx context.Context) error {
	nc, err := s.connect("registries")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	control, err := js.KeyValue(ctx, contract.BucketControl)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", contract.BucketControl, err)
	}
	for _, spec := range s.opts.Registries {
		if _, err := registryspec.Put(ctx, control, spec, true); err != nil {
			return err
		}
		s.log.Info().Str("registry", spec.GetName()).Str("kind", registryspec.Kind(spec)).
			Str("location", registryspec.Location(spec)).Msg("registry stored for the configurator to sync")
	}
	entries, err := store.New(control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).List(ctx, contract.RegistryKeyPrefix+"*")
	if err != nil {
		return fmt.Errorf("read the registries: %w", err)
	}
	s.registries = nil
	for _, e := range entries {
		if _, isSpec, ok := contract.RegistryOfKey(e.Key); ok && isSpec && e.Err == nil {
			s.registries = append(s.registries, e.Value)
		}
	}
	slices.SortFunc(s.registries, func(a, b *sluicev1.RegistrySpec) int { return strings.Compare(a.GetName(), b.GetName()) })
	return nil
}

// waitConfigurator waits until the configurator's API answers a ping, so
// that Start returns a system that takes applies.
func (s *System) waitConfigurator(ctx context.Context) error {
	nc, err := s.connect("ping")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- apiclient.WaitReady(ctx, nc) }()
	select {
	case err := <-ready:
		switch {
		case err == nil:
			return nil
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return fmt.Errorf("the configurator did not answer within %s (see %s): %w", readyTimeout, s.logPath, err)
		default: // stopped meanwhile, or failed: not a timeout
			return fmt.Errorf("wait for the configurator to answer: %w", err)
		}
	case <-s.done:
		cancel()
		<-ready
		return fmt.Errorf("sluice dev stopped while starting: %w", s.Stop())
	}
}

// waitAgents waits until every agent started by this run has registered its
// presence, so that a rollout started right after Start (the examples, or an
// operator's first apply) targets the whole fleet rather than the nodes that
// happened to be up.
func (s *System) waitAgents(ctx context.Context, since time.Time) error {
	if len(s.nodes) == 0 {
		return nil
	}
	nc, err := s.connect("wait-agents")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	missing := slices.Clone(s.nodes)
	for {
		if kv, err := js.KeyValue(ctx, contract.BucketNodes); err == nil {
			nodes := store.New(kv, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
			missing = slices.DeleteFunc(missing, func(node string) bool {
				e, err := nodes.Get(ctx, node)
				return err == nil && !e.Value.GetStartedAt().AsTime().Before(since)
			})
			if len(missing) == 0 {
				return nil
			}
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("stopped waiting for agents %s to register: %w", strings.Join(missing, ", "), ctx.Err())
			}
			return fmt.Errorf("agents %s did not register within %s (see %s)", strings.Join(missing, ", "), readyTimeout, s.logPath)
		case <-s.done:
			return fmt.Errorf("sluice dev stopped while starting: %w", s.Stop())
		}
	}
}
