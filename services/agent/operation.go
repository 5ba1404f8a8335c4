package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A desired config is a node operation (DesiredConfig.operation) with a
// deadline (DesiredConfig.deadline, contract.OperationDeadline): from the
// moment the agent starts it, validate, apply and checks must end within
// it, each also within its own Config bound (steps.go). At the deadline the
// step in progress is stopped — an exec applier's or check's whole process
// group is killed —, last-good is restored and the operation is reported
// Invalid with failed_check "deadline" (contract.FailedCheckDeadline; the
// coordinator counts the node timed out).
// An operation still running after ProgressInterval is acknowledged then
// (status Provisioning, event NodeProvisioning, naming the step), and from
// then on a step that lasts longer than ProgressInterval is written to the
// status (progress), so `sluice rollout status` shows where it is. A fast
// operation costs no extra write: its outcome is its acknowledgement (one
// status write and one event fewer per node and rollout: two of the five
// messages a rollout stored per node, docs/findings.md, "2026-11-28 — The
// acknowledgement only for operations that last").

// errCancelled is the cause of an operation the coordinator cancelled.
var errCancelled = errors.New("cancelled by the coordinator at its apply deadline")

// running is the operation the worker runs, for a cancel to find it.
type running struct {
	mu     sync.Mutex
	op, fp string
	cancel context.CancelCauseFunc
}

// operation is ctx bounded by d's deadline (ctx itself without one) and
// cancellable by the coordinator (cancelRunning) until stop is called.
func (a *Agent) operation(ctx context.Context, d *sluicev1.DesiredConfig) (context.Context, func()) {
	op, cancel := context.WithCancelCause(ctx)
	stopTimer := func() bool { return true }
	if dl := d.GetDeadline().AsDuration(); dl > 0 {
		t := time.AfterFunc(dl, func() { cancel(context.DeadlineExceeded) })
		stopTimer = t.Stop
	}
	r := &a.run
	r.mu.Lock()
	r.op, r.fp, r.cancel = d.GetOperation(), d.GetFingerprint(), cancel
	r.mu.Unlock()
	return op, func() {
		r.mu.Lock()
		r.op, r.fp, r.cancel = "", "", nil
		r.mu.Unlock()
		stopTimer()
		cancel(nil)
	}
}

// cancelRunning stops the running operation if d cancels it; it reports
// whether it did.
func (a *Agent) cancelRunning(d *sluicev1.DesiredConfig) bool {
	r := &a.run
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel == nil || r.op != d.GetOperation() || r.fp != d.GetFingerprint() {
		return false
	}
	r.cancel(errCancelled)
	return true
}

// past reports whether op was stopped by its deadline or by the
// coordinator (and not because the agent is stopping).
func past(op, ctx context.Context) bool {
	return op.Err() != nil && ctx.Err() == nil
}

// deadlineFailure is f, the failure the stop of op caused while step ran.
func deadlineFailure(op context.Context, d *sluicev1.DesiredConfig, step string, f checkFailure) checkFailure {
	why := fmt.Sprintf("did not finish within its deadline %s", d.GetDeadline().AsDuration())
	if errors.Is(context.Cause(op), errCancelled) {
		why = "was cancelled by the coordinator at its apply deadline"
	}
	return checkFailure{name: contract.FailedCheckDeadline, output: f.output, err: fmt.Errorf(
		"operation %s %s: stopped while %s (%v)", cmp.Or(d.GetOperation(), "(unnamed)"), why, step, f.err)}
}

// progressDuring reports step in the status if it is still running after
// ProgressInterval — or, while the operation is not acknowledged, once
// the operation has run ProgressInterval; done (which waits for the
// report) marks its end. Only the worker calls it, and the worker touches
// its state again only after done returned.
func (a *Agent) progressDuring(ctx context.Context, d *sluicev1.DesiredConfig, step string) (done func()) {
	wait := a.cfg.ProgressInterval
	if !a.acknowledged(d) {
		wait = max(0, a.cfg.ProgressInterval-time.Since(a.worker.startedAt))
	}
	// A timer's function rather than a goroutine waiting on a timer: every
	// provision runs two steps, and most end long before the interval.
	var wg sync.WaitGroup
	wg.Add(1)
	t := time.AfterFunc(wait, func() {
		defer wg.Done()
		if ctx.Err() == nil {
			a.writeProgress(ctx, d, step)
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if t.Stop() {
				wg.Done() // it will never run
			}
			wg.Wait() // a report under way ends before the worker goes on
		})
	}
}

// acknowledged reports whether the status on record acknowledges d's
// operation (Provisioning).
func (a *Agent) acknowledged(d *sluicev1.DesiredConfig) bool {
	cur := a.worker.status
	return cur.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING && cur.GetOperation() == d.GetOperation() &&
		cur.GetFingerprint() == d.GetFingerprint() && cur.GetRollout() == d.GetRollout()
}

// writeProgress acknowledges d's operation at step, or rewrites its
// Provisioning status with step. Neither stops the operation when it
// cannot be written: its outcome is written (and retried) all the same.
func (a *Agent) writeProgress(ctx context.Context, d *sluicev1.DesiredConfig, step string) {
	if !a.acknowledged(d) {
		if err := a.writePhase(ctx, d, a.worker.started, statusUpdate{
			phase:    sluicev1.NodePhase_NODE_PHASE_PROVISIONING,
			message:  "applying " + describe(d),
			progress: step,
		}); err != nil {
			a.warnUnlessDone(ctx, err, "acknowledge the operation ("+step+"); it goes on, and its outcome is written when it ends")
			return
		}
		a.emit(EventNodeProvisioning, "desired "+describe(d)+" still "+step+" after "+a.cfg.ProgressInterval.String(), d)
		return
	}
	st := proto.Clone(a.worker.status).(*sluicev1.NodeStatus)
	st.Progress, st.LastUpdate = step, timestamppb.New(a.cfg.Now())
	if err := a.writeStatus(ctx, st); err != nil {
		a.warnUnlessDone(ctx, err, "report progress ("+step+"); the operation goes on")
	}
}
