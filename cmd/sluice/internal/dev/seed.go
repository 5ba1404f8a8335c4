package dev

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// SourceExamples is the source recorded on intents seeded from the examples.
const SourceExamples = "examples"

// readyTimeout bounds the wait for the configurator to answer.
const readyTimeout = 30 * time.Second

// applyExamples applies the intents in the examples directory through the
// configurator's API, like an operator would.
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
	req := &sluicev1.ApplyRequest{Intents: intents, Source: SourceExamples}
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

// waitConfigurator waits until the configurator's API answers a ping, so
// that Start returns a system that takes applies.
func (s *System) waitConfigurator(ctx context.Context) error {
	nc, err := s.connect("ping")
	if err != nil {
		return err
	}
	defer nc.Close()
	subject, err := micro.ControlSubject(micro.PingVerb, contract.ConfiguratorService, "")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	retry := time.NewTicker(20 * time.Millisecond)
	defer retry.Stop()
	for {
		_, err := nc.Request(subject, nil, time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the configurator did not answer within %s (see %s): %w", readyTimeout, s.logPath, err)
		case <-s.done:
			return fmt.Errorf("sluice dev stopped while starting: %w", s.Stop())
		case <-retry.C:
		}
	}
}
