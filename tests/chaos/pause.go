package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// pausePlane pauses the control plane as `sluice pause` does, waits until
// every live instance acknowledged, then checks for ft.Down that nothing
// starts: no applier call and no desired-config write. It resumes after,
// whatever happened. An acknowledgement that takes longer than 10s (a
// frozen leader, a dead agent still within its lease) is logged, not a
// violation: the pause is only checked once acknowledged.
//
// h's hooks run inside the checked window (acked: right after every
// instance acknowledged; nil: nothing) and after the resume (resumed).
func (f *faults) pausePlane(ctx context.Context, ft Fault, h pauseHooks) {
	s := f.sys
	defer f.lock("pause")() // pause faults take turns: one's resume would end the other's pause
	env := s.Env()
	reqs := store.New(env.Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	set := func(paused bool) uint64 {
		var gen uint64
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			e, err := reqs.Mutate(wctx, contract.KeyPause, func(cur *sluicev1.PauseRequest) (*sluicev1.PauseRequest, error) {
				gen = cur.GetGeneration() + 1
				return &sluicev1.PauseRequest{Paused: paused, Generation: gen, By: "chaos", At: timestamppb.Now()}, nil
			})
			if errors.Is(err, store.ErrUndecodable) {
				// A garbage value (garbage-value) over the key: written over at
				// its revision, one generation past the last this harness
				// wrote (it is the only writer of control/pause).
				gen = f.pauseGen + 1
				var rev uint64
				rev, err = reqs.Update(wctx, contract.KeyPause, &sluicev1.PauseRequest{Paused: paused, Generation: gen, By: "chaos", At: timestamppb.Now()}, e.Revision)
				e.Revision, e.Value = rev, &sluicev1.PauseRequest{Generation: gen}
			}
			cancel()
			if err == nil {
				f.pauseGen = e.Value.GetGeneration()
				return e.Value.GetGeneration()
			}
			s.log.add("%s: write control/pause (paused=%v) failed, retrying: %v", ft.Kind, paused, err)
			time.Sleep(200 * time.Millisecond)
		}
		return gen
	}
	gen := set(true)
	s.log.add("%s: paused (generation %d)", ft.Kind, gen)
	defer func() {
		g := set(false)
		s.log.add("%s: resumed (generation %d)", ft.Kind, g)
		f.mu.Lock()
		f.resumed = true
		f.mu.Unlock()
		if h.resumed != nil {
			h.resumed()
		}
	}()

	var waiting []string
	var present map[string]bool
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting, present = f.notReached(ctx, gen)
		if len(waiting) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(waiting) > 0 {
		s.log.add("%s: not acknowledged within 10s, not checked; waiting for %s", ft.Kind, strings.Join(waiting, ", "))
		if h.acked != nil {
			h.acked() // the node comes and goes all the same
		}
		return
	}
	acked := time.Now()
	seq0, err := f.configSeq(ctx)
	if err != nil {
		s.log.add("%s: read the nodeconfigs stream: %v; not checked", ft.Kind, err)
		return
	}
	hold := ft.Down
	if h.acked != nil {
		if d := h.acked(); d > 0 {
			hold = d
		}
	}
	s.log.add("%s: every live instance acknowledged generation %d; holding %s", ft.Kind, gen, hold)
	select {
	case <-ctx.Done():
		return
	case <-time.After(hold):
	}
	until := time.Now()
	seq1, err := f.configSeq(ctx)
	if err != nil {
		s.log.add("%s: read the nodeconfigs stream: %v; writes not checked", ft.Kind, err)
		seq1 = seq0
	}
	applies := make(map[string][]Apply, len(s.nodes))
	for name, n := range s.nodes {
		applies[name] = n.history()
	}
	found := appliedWhilePaused(applies, gen, acked, until)
	for i, v := range found {
		// Which a failure is: a node the pause waited for, or one whose
		// presence had lapsed (no live instance: nothing waited for it).
		if v.Node != "" && !present[v.Node] {
			found[i].Detail += "; its presence was not in the nodes bucket when every live instance had acknowledged (the pause did not wait for it)"
		} else if v.Node != "" {
			found[i].Detail += "; it was present and had acknowledged"
		}
	}
	for seq := seq0 + 1; seq <= seq1; seq++ {
		key, err := f.configKey(ctx, seq)
		if err != nil {
			s.log.add("%s: %v; writes from it on not checked", ft.Kind, err)
			break
		}
		if key == "" || contract.IsControlKey(key) || s.spoiled.at(contract.BucketNodeConfigs, key, seq) != nil {
			continue // gone since, a control key, or the harness's own garbage (garbage-value)
		}
		found = append(found, Violation{Invariant: "Paused", Detail: fmt.Sprintf(
			"nodeconfigs/%s was written (stream sequence %d) while every instance had acknowledged pause generation %d", key, seq, gen)})
	}
	slices.SortFunc(found, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	s.findingsMu.Lock()
	s.findings = append(s.findings, found...)
	s.findingsMu.Unlock()
}

// appliedWhilePaused is the applier calls that returned between acked and
// until, while every live instance had acknowledged pause generation gen.
func appliedWhilePaused(applies map[string][]Apply, gen uint64, acked, until time.Time) []Violation {
	var found []Violation
	for name, calls := range applies {
		for _, a := range calls {
			// A restore at start is not work a pause holds: an agent
			// started over an interrupted apply puts last-good back before
			// it reads anything (docs/agent.md), and only then acknowledges.
			// An agent acknowledges once idle, so a call that returned at
			// the very instant of the last acknowledgement began before it
			// (virtual time: seed 144's node-01 returned and acknowledged
			// at one instant, and the harness read the ack in it).
			if !a.RestoreAtStart && a.At.After(acked) && a.At.Before(until) {
				found = append(found, Violation{Invariant: "Paused", Node: name, Detail: fmt.Sprintf(
					"the applier was called for %s at %s, while every instance had acknowledged pause generation %d (%s to %s)",
					short(a.Fingerprint), a.At.Format("15:04:05.000"), gen, acked.Format("15:04:05.000"), until.Format("15:04:05.000"))})
			}
		}
	}
	return found
}

// pauseHooks let a fault act inside pausePlane's checked window.
type pauseHooks struct {
	// acked runs once every live instance acknowledged (or not within
	// 10 s); it returns how long to hold the window from then (0: ft.Down).
	acked   func() time.Duration
	resumed func() // after the resume
}

// notReached lists the live instances (services and agents) that have
// not acknowledged generation gen, or one line saying why it cannot tell,
// and the nodes whose presence it found.
func (f *faults) notReached(ctx context.Context, gen uint64) ([]string, map[string]bool) {
	env := f.sys.Env()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out []string
	insts, err := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} }).List(rctx, ">")
	if err != nil {
		return []string{"(instances unreadable: " + err.Error() + ")"}, nil
	}
	// A key holding garbage (garbage-value) says nothing about its
	// instance: it has not acknowledged as far as anyone can tell, until it
	// writes its key again. A fresh garbage key is no instance.
	for _, e := range insts {
		if e.Err != nil && !f.sys.spoiledFresh(contract.BucketInstances, e.Key) || e.Err == nil && !contract.PauseReached(e.Value.GetPause(), gen) {
			out = append(out, e.Key)
		}
	}
	nodes, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(rctx, ">")
	if err != nil {
		return []string{"(nodes unreadable: " + err.Error() + ")"}, nil
	}
	present := map[string]bool{}
	for _, e := range nodes {
		present[e.Key] = true
		if e.Err != nil && !f.sys.spoiledFresh(contract.BucketNodes, e.Key) || e.Err == nil && !contract.PauseReached(e.Value.GetPause(), gen) {
			out = append(out, "agent."+e.Key)
		}
	}
	return out, present
}

// configSeq is the nodeconfigs stream's last sequence. Faults may overlap
// (a server restart): a read that fails is retried (retry).
func (f *faults) configSeq(ctx context.Context) (uint64, error) {
	var last uint64
	err := retry(ctx, func(ctx context.Context) error {
		st, err := f.sys.Env().JS.Stream(ctx, contract.StreamOfBucket(contract.BucketNodeConfigs))
		if err != nil {
			return fmt.Errorf("nodeconfigs stream: %w", err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("nodeconfigs stream info: %w", err)
		}
		last = info.State.LastSeq
		return nil
	})
	return last, err
}

// configKey is the nodeconfigs key of stream message seq, read as
// configSeq is; "" if the stream no longer holds it (a bucket keeps one
// revision per key: the key was written again since, at a later sequence).
func (f *faults) configKey(ctx context.Context, seq uint64) (string, error) {
	var key string
	err := retry(ctx, func(ctx context.Context) error {
		st, err := f.sys.Env().JS.Stream(ctx, contract.StreamOfBucket(contract.BucketNodeConfigs))
		if err != nil {
			return fmt.Errorf("nodeconfigs stream: %w", err)
		}
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("nodeconfigs stream message %d: %w", seq, err)
		}
		key = strings.TrimPrefix(m.Subject, "$KV."+contract.BucketNodeConfigs+".")
		return nil
	})
	return key, err
}

// resumeOverGarbage writes a resume over control/pause when the value there
// at the end of the faults is garbage the harness wrote (garbage-value), as
// an operator answering its ValueUnreadable does (`sluice resume`,
// docs/operations.md): a coordinator term that starts while it is unreadable
// holds as if paused, joiners frozen, until a readable request is written,
// so without it a node that joins after such a takeover stays unconfigured
// at rest by design (seed 218: garbage over control/pause and the leader's
// lease, then node-06 reaped and back). Compare-and-set on the garbage's
// revision: a request written since is left alone.
func (f *faults) resumeOverGarbage(ctx context.Context) {
	s := f.sys
	kv := s.Env().Buckets.Control
	var m streamMsg
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		m, err = s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, contract.KeyPause)})
		return err
	})
	if err != nil || m.deleted || wellFormed(kv.Bucket(), contract.KeyPause, m.data) || s.spoiled.at(kv.Bucket(), contract.KeyPause, m.seq) == nil {
		return // none, readable, or not the harness's
	}
	f.mu.Lock()
	gen := f.pauseGen + 1
	f.mu.Unlock()
	b, err := store.Marshal(&sluicev1.PauseRequest{Paused: false, Generation: gen, By: "chaos", At: timestamppb.Now(),
		Reason: "control/pause held garbage: resumed over it, as an operator would"})
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = kv.Update(wctx, contract.KeyPause, b, m.seq)
		cancel()
	}
	if err != nil {
		s.log.add("control/pause holds the harness's garbage; writing a resume over it failed: %v", err)
		return
	}
	f.mu.Lock()
	f.pauseGen = max(f.pauseGen, gen)
	f.mu.Unlock()
	s.log.add("control/pause held the harness's garbage: resumed over it (generation %d), as an operator would", gen)
}
