package configurator

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/pause"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// While the control plane is paused the configurator cuts no revision: an
// apply, delete, undo or retry is refused (409, nothing stored, naming the
// pause), and the level-triggered reconcile waits for resume. It
// acknowledges a pause once no request is being handled.

// startPause follows control/pause and keeps this instance's presence; the
// returned func stops both (and removes the presence).
func (s *Service) startPause(ctx context.Context, b *buckets.Set) func() {
	s.resumed = make(chan struct{}, 1)
	var stop func()
	s.gate, stop = pause.Start(ctx, pause.Service{
		Control: b.Control, Instances: b.Instances, Component: Component, Instance: s.cfg.Instance, Version: s.cfg.Version,
		What: "request", Interval: s.cfg.Settings.InstanceInterval(), Log: s.log, Now: s.cfg.Now, Emit: s.events.Emit,
		Changed: func(r *sluicev1.PauseRequest) {
			if !r.GetPaused() {
				select {
				case s.resumed <- struct{}{}:
				default:
				}
			}
		},
	})
	return stop
}

// gated refuses a request while the control plane is paused, and counts
// the requests it lets through for the acknowledgement.
func (s *Service) gated(op string, h func(context.Context, micro.Request)) func(context.Context, micro.Request) {
	return func(ctx context.Context, r micro.Request) {
		end, held := s.gate.Begin()
		if held != nil {
			s.respond(r, op, nil, &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
				"the control plane is %s; the configurator cuts no revision until it resumes (sluice resume); nothing was stored",
				contract.DescribePause(held))})
			return
		}
		defer end()
		h(ctx, r)
	}
}
