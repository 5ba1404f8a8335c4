package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The control plane's pause (docs/operations.md, "Pause"): the request is
// stored in control/pause with a new generation; every live instance —
// coordinators, configurators, reapers and every node's agent —
// acknowledges the generation once it has finished what it was doing and
// starts nothing new. --wait returns once all have.

// defaultPauseTimeout is how long pause --wait and resume --wait wait.
const defaultPauseTimeout = 2 * time.Minute

func (a *app) pauseCommand() *cobra.Command {
	var reason, joiners string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Pause the whole control plane, acknowledged by every instance",
		Long: `Pause the control plane: no rollout starts a node operation (forward or
revert), no agent starts an apply, the configurator cuts no revision
(apply, delete, undo and retry are refused, nothing stored) and the reaper
deletes nothing. What is in flight finishes: each instance acknowledges
the pause once it is idle, and 'sluice get pause' shows who has.

Nodes that join while paused get nothing until resume (--joiners freeze,
the default) or, if they never had a config, the last applied revision
(--joiners last-good).

Deadlines: a running rollout's progress deadline stands still while paused,
and a node whose agent holds a config it has not started is not late.

With --wait the command returns once every live instance acknowledged,
printing whom it still waits for as that changes. Exit 0 once paused (or
already paused), 1 if --timeout passed first (the pause stays in force).`,
		Example: "  sluice pause --reason 'maintenance window' --wait\n  sluice pause --joiners last-good",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := contract.ValidJoiners(joiners); err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--%w", err)}
			}
			return a.setPause(cmd.Context(), true, reason, joiners, wait, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the pause and shown by 'sluice get pause'")
	cmd.Flags().StringVar(&joiners, "joiners", contract.JoinersFreeze, "what nodes joining while paused get: freeze or last-good")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every live instance acknowledged")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultPauseTimeout, "how long --wait waits")
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	var reason string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume the control plane after 'sluice pause'",
		Long: `Lift the control plane's pause: rollouts start node operations again, agents
apply what arrived meanwhile, the configurator takes requests and the
reaper deletes again. Nodes held at their agent get a fresh pickup deadline.

With --wait the command returns once every live instance acknowledged the
resume. Exit 0 once resumed (or not paused), 1 if --timeout passed first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.setPause(cmd.Context(), false, reason, "", wait, timeout)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the resume")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every live instance acknowledged")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultPauseTimeout, "how long --wait waits")
	return cmd
}

// setPause stores a new generation of control/pause, unless it already
// says paused (then it only waits), and waits if asked.
func (a *app) setPause(ctx context.Context, paused bool, reason, joiners string, wait bool, timeout time.Duration) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, controlKV := sn.js, sn.kv[contract.BucketControl]
	reqs := store.New(controlKV, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	req, already, err := a.storePause(ctx, reqs, contract.KeyPause, &sluicev1.PauseRequest{Paused: paused, Reason: reason, Joiners: joiners})
	if err != nil {
		return err
	}
	verb := "resume"
	if paused {
		verb = "pause"
	}
	switch {
	case already && req == nil:
		fmt.Fprintln(a.streams.Out, "the control plane is not paused")
		return nil
	case already:
		fmt.Fprintf(a.streams.Out, "the control plane is already %s\n", contract.DescribePause(req))
	default:
		fmt.Fprintf(a.streams.Out, "%s requested: the control plane is %s\n", verb, contract.DescribePause(req))
	}
	if !wait {
		fmt.Fprintln(a.streams.Out, "every instance acknowledges once it is idle: sluice get pause (or add --wait)")
		return nil
	}
	last := ""
	done, err := waitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, insts, _, err := loadPauseState(ctx, js)
		if err != nil {
			return false, err
		}
		waiting := notReached(insts, req.GetGeneration())
		if line := waitingLine(waiting, req.GetGeneration()); line != last && len(waiting) > 0 {
			fmt.Fprintln(a.streams.Out, line)
			last = line
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		return err
	}
	if !done {
		return &ExitError{Code: 1, Err: fmt.Errorf("%s of generation %d not acknowledged by every instance within %s; %s (it stays requested)",
			verb, req.GetGeneration(), timeout, last)}
	}
	fmt.Fprintf(a.streams.Out, "every live instance acknowledged generation %d: the control plane is %sd\n", req.GetGeneration(), verb)
	return nil
}

// storePause stores the next generation of the pause request at key —
// want's paused, reason, joiners and rollout, with who and when — unless
// the stored one already says want's paused: then it returns that one (nil
// when none was ever stored) and already.
func (a *app) storePause(ctx context.Context, reqs *store.Store[*sluicev1.PauseRequest], key string,
	want *sluicev1.PauseRequest) (req *sluicev1.PauseRequest, already bool, err error) {
	_, err = reqs.Mutate(ctx, key, func(cur *sluicev1.PauseRequest) (*sluicev1.PauseRequest, error) {
		if cur.GetPaused() == want.GetPaused() {
			req, already = cur, true
			return nil, store.ErrUnchanged
		}
		req, already = proto.Clone(want).(*sluicev1.PauseRequest), false
		req.Generation, req.By, req.At = cur.GetGeneration()+1, a.operator(), timestamppb.New(a.now())
		return req, nil
	})
	if errors.Is(err, store.ErrUndecodable) {
		// The stored request cannot be read (a hand edit, a broken tool):
		// write over it at its revision. Its generation is unknown; the
		// key's KV revision is above every generation it ever held (each
		// took a write), so the new one is above them too and no instance
		// takes it for an old request.
		cur, gerr := reqs.Get(ctx, key)
		if !errors.Is(gerr, store.ErrUndecodable) {
			return nil, false, fmt.Errorf("store the request in %s/%s: %w", contract.BucketControl, key, err)
		}
		req = proto.Clone(want).(*sluicev1.PauseRequest)
		req.Generation, req.By, req.At = cur.Revision+1, a.operator(), timestamppb.New(a.now())
		if _, err = reqs.Update(ctx, key, req, cur.Revision); err == nil {
			fmt.Fprintf(a.streams.Err, "%s/%s held a value that cannot be read (%v); written over with generation %d\n",
				contract.BucketControl, key, gerr, req.Generation)
			return req, false, nil
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("store the request in %s/%s: %w", contract.BucketControl, key, err)
	}
	return req, already, nil
}

// notReached lists the instances that have not reached generation gen.
func notReached(insts []*sluicev1.Instance, gen uint64) []*sluicev1.Instance {
	var out []*sluicev1.Instance
	for _, in := range insts {
		if !contract.PauseReached(in.GetPause(), gen) {
			out = append(out, in)
		}
	}
	return out
}

// waitingLine says whom a --wait still waits for, and why.
func waitingLine(waiting []*sluicev1.Instance, gen uint64) string {
	parts := make([]string, 0, len(waiting))
	for _, in := range waiting {
		p := instanceName(in)
		if w := in.GetPause().GetWaitingFor(); w != "" {
			p += " (" + w + ")"
		} else if in.GetPause().GetSeen() < gen {
			p += " (has not seen it yet)"
		}
		parts = append(parts, p)
	}
	const most = 8
	if len(parts) > most {
		parts = append(parts[:most], fmt.Sprintf("and %d more", len(parts)-most))
	}
	return fmt.Sprintf("waiting for %d instance(s): %s", len(waiting), strings.Join(parts, ", "))
}

func instanceName(in *sluicev1.Instance) string {
	if in.GetComponent() == contract.ComponentAgent {
		return "agent " + in.GetInstance()
	}
	return in.GetComponent() + " " + in.GetInstance()
}

// loadPauseState reads control/pause and every live instance: the
// services' presences and every agent's (its node presence).
func loadPauseState(ctx context.Context, js jetstream.KeyValueManager) (*sluicev1.PauseRequest, []*sluicev1.Instance, []unreadableKey, error) {
	req, bad, err := getOne(ctx, js, contract.BucketControl, contract.KeyPause, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	if err != nil {
		return nil, nil, nil, err
	}
	insts, badI, err := list(ctx, js, contract.BucketInstances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	if err != nil {
		return nil, nil, nil, err
	}
	presences, badP, err := list(ctx, js, contract.BucketNodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range presences {
		insts = append(insts, view.AgentInstance(p))
	}
	slices.SortStableFunc(insts, func(x, y *sluicev1.Instance) int {
		if c := strings.Compare(componentOrder(x), componentOrder(y)); c != 0 {
			return c
		}
		return strings.Compare(x.GetInstance(), y.GetInstance())
	})
	return req, insts, append(bad, append(badI, badP...)...), nil
}

// componentOrder puts services before agents.
func componentOrder(in *sluicev1.Instance) string {
	if in.GetComponent() == contract.ComponentAgent {
		return "~" + in.GetComponent()
	}
	return in.GetComponent()
}

func loadPause(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	req, insts, bad, err := loadPauseState(ctx, js)
	return pauseList{req: req, insts: insts}, bad, err
}

// pauseList is `sluice get pause`: the requested pause, then every live
// instance with the generation it reached.
type pauseList struct {
	req   *sluicev1.PauseRequest
	insts []*sluicev1.Instance
}

func (l pauseList) table(now time.Time) [][]string {
	requested := "running (never paused)"
	if l.req != nil {
		requested = contract.DescribePause(l.req)
		if l.req.GetPaused() {
			requested += fmt.Sprintf("; joiners %s", cmp.Or(l.req.GetJoiners(), contract.JoinersFreeze))
		}
	}
	rows := [][]string{
		{"REQUESTED:", requested},
		{},
		{"COMPONENT", "INSTANCE", "ROLE", "REACHED", "WAITING FOR", "HEARTBEAT"},
	}
	for _, in := range l.insts {
		rows = append(rows, []string{in.GetComponent(), in.GetInstance(), orNone(in.GetRole()), reached(in.GetPause(), l.req),
			orNone(in.GetPause().GetWaitingFor()), age(now, in.GetHeartbeatAt())})
	}
	return rows
}

// reached renders an instance's acknowledgement against the request.
func reached(ack *sluicev1.PauseAck, req *sluicev1.PauseRequest) string {
	state := "running"
	if ack.GetPaused() {
		state = "paused"
	}
	s := fmt.Sprintf("%s (generation %d)", state, ack.GetGeneration())
	if req != nil && !contract.PauseReached(ack, req.GetGeneration()) {
		s += " — not yet"
	}
	return s
}

// objects are the instances; the request is apart (request).
func (l pauseList) objects() ([]json.RawMessage, error) { return view.ProtoObjects(l.insts) }

// request is the requested pause, {} when never paused.
func (l pauseList) request() (json.RawMessage, error) { return view.PauseRequestObject(l.req) }

func (a *app) rolloutPauseCommand() *cobra.Command {
	return a.rolloutPauseOrResume(true)
}

func (a *app) rolloutResumeCommand() *cobra.Command {
	return a.rolloutPauseOrResume(false)
}

func (a *app) rolloutPauseOrResume(paused bool) *cobra.Command {
	var reason string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pause [ROLLOUT-ID]",
		Short: "Hold the running rollout: no node operation starts until resumed",
		Long: `Hold a running rollout (the active one without an id): it starts no node
operation — forward or revert — while those in flight finish; its progress
deadline stands still. The coordinator acknowledges once none is in flight,
in the rollout's record ('sluice rollout status' shows it). Only this
rollout is held: the rest of the control plane runs (see 'sluice pause').

With --wait the command returns once the coordinator acknowledged. Exit 0
then, 1 if --timeout passed first (the pause stays requested) or there is
no such running rollout.`,
		Example: "  sluice rollout pause --reason 'checking wave 1' --wait\n  sluice rollout resume",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return a.setRolloutPause(cmd.Context(), id, paused, reason, wait, timeout)
		},
	}
	if !paused {
		cmd.Use = "resume [ROLLOUT-ID]"
		cmd.Short = "Let a rollout held by 'sluice rollout pause' start node operations again"
		cmd.Long = `Lift the pause of a rollout (the active one without an id): it starts node
operations again, and nodes held meanwhile start within its limits. With
--wait the command returns once the coordinator acknowledged. Exit 0 then,
1 if --timeout passed first or there is no such running rollout.`
		cmd.Example = "  sluice rollout resume"
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout and its events")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the coordinator acknowledged")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultPauseTimeout, "how long --wait waits")
	return cmd
}

func (a *app) setRolloutPause(ctx context.Context, id string, paused bool, reason string, wait bool, timeout time.Duration) error {
	sn, err := a.bind(ctx, contract.BucketRollouts, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	rolloutsKV, controlKV := sn.kv[contract.BucketRollouts], sn.kv[contract.BucketControl]
	if id, err = runningRollout(ctx, rolloutsKV, id, "nothing to "+map[bool]string{true: "pause", false: "resume"}[paused]); err != nil {
		return err
	}
	records := store.New(rolloutsKV, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	reqs := store.New(controlKV, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	req, already, err := a.storePause(ctx, reqs, contract.RolloutPauseKey(id), &sluicev1.PauseRequest{Paused: paused, Reason: reason, Rollout: id})
	if err != nil {
		return err
	}
	switch {
	case req == nil:
		fmt.Fprintf(a.streams.Out, "rollout %s is not paused: nothing to resume\n", id)
		return nil
	case already && paused:
		fmt.Fprintf(a.streams.Out, "rollout %s is already paused: %s\n", id, contract.DescribePause(req))
	case already:
		fmt.Fprintf(a.streams.Out, "rollout %s is not paused (already %s): nothing to resume\n", id, contract.DescribePause(req))
		return nil
	default:
		fmt.Fprintf(a.streams.Out, "rollout %s: %s\n", id, contract.DescribePause(req))
	}
	if !wait {
		fmt.Fprintln(a.streams.Out, "watch with: sluice rollout status --watch (or add --wait)")
		return nil
	}
	var rec *sluicev1.Rollout
	done, err := waitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		e, err := records.Get(ctx, id)
		if err != nil {
			return false, err
		}
		rec = e.Value
		return contract.Terminal(rec.GetPhase()) || contract.PauseReached(rec.GetPauseAck(), req.GetGeneration()), nil
	})
	if err != nil {
		return err
	}
	switch {
	case !done:
		return &ExitError{Code: 1, Err: fmt.Errorf("rollout %s did not acknowledge generation %d within %s: waiting for %s (it stays requested)",
			id, req.GetGeneration(), timeout, cmp.Or(rec.GetPauseAck().GetWaitingFor(), "a coordinator to act on it (is one running?)"))}
	case contract.Terminal(rec.GetPhase()):
		fmt.Fprintf(a.streams.Out, "rollout %s ended %s meanwhile: %s\n", id, rolloutPhase(rec.GetPhase()), rec.GetReason())
	case paused:
		fmt.Fprintf(a.streams.Out, "rollout %s is paused: no node operation in flight; none starts until 'sluice rollout resume'\n", id)
	default:
		fmt.Fprintf(a.streams.Out, "rollout %s is running again\n", id)
	}
	return nil
}

// runningRollout is id, or the active rollout's id when id is "", once it
// is known to be running; otherwise an exit-1 error ending with nothing
// ("nothing to abort").
func runningRollout(ctx context.Context, rolloutsKV jetstream.KeyValue, id, nothing string) (string, error) {
	if id == "" {
		ref, err := store.New(rolloutsKV, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Get(ctx, contract.KeyActive)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", &ExitError{Code: 1, Err: fmt.Errorf("no rollout is running: %s (sluice rollout history lists them)", nothing)}
		case err != nil:
			return "", fmt.Errorf("read the active rollout: %w", err)
		}
		id = ref.Value.GetRollout()
	}
	r, err := store.New(rolloutsKV, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", &ExitError{Code: 1, Err: fmt.Errorf("rollout %s does not exist (sluice rollout history lists them)", id)}
	case err != nil:
		return "", fmt.Errorf("read rollout %s: %w", id, err)
	case contract.Terminal(r.Value.GetPhase()):
		return "", &ExitError{Code: 1, Err: fmt.Errorf("rollout %s already ended %s (%s): %s", id, rolloutPhase(r.Value.GetPhase()), r.Value.GetReason(), nothing)}
	}
	return id, nil
}
