package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// alive reports whether process pid still runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// A node operation past its deadline is stopped: the hanging apply's whole
// process group is killed, last-good is restored and the node reports
// Invalid with failed_check "deadline".
func TestAgent_OperationPastItsDeadline_KillsTheApplyAndRestoresLastGood(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	pidFile := filepath.Join(dir, "child.pid")
	good, hang := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	// hang hangs in a child process (as a stuck netlink call or CLI would).
	cmd := fmt.Sprintf(`if [ "$SLUICE_FINGERPRINT" = %s ]; then sleep 60 & echo $! > %s; wait; fi; cat > %s`, hang.Fingerprint, pidFile, path)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.ExecApplier{Command: cmd}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	// Margin: 2s for the apply's shell to start and record its child, which
	// a loaded machine takes well under a second to do.
	hang.Operation, hang.Deadline = "r2/n1/apply", durationpb.New(2*time.Second)
	began := time.Now()
	f.writeDesired(t, hang)
	st := f.waitStatus(t, "n1", "Invalid hang", invalid(hang.Fingerprint))
	// Margin: 20s is 10 times the deadline; without the stop the apply
	// would hang its full minute.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the operation was stopped after %s; want about its 2s deadline", took)
	}
	if st.GetFailedCheck() != contract.FailedCheckDeadline || st.GetOperation() != "r2/n1/apply" || st.GetAppliedFingerprint() != good.Fingerprint ||
		!strings.Contains(st.GetMessage(), "operation r2/n1/apply did not finish within its deadline 2s: stopped while applying") ||
		!strings.Contains(st.GetMessage(), "restored last-good "+render.Short(good.Fingerprint)) {
		t.Fatalf("status = %v; want Invalid deadline naming the operation and step, good restored", st)
	}
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config in force = %v; want last-good", got)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	natstest.Eventually(t, waitFor, "the hanging apply's child process to be killed", func() bool { return !alive(pid) })
	assertNoMarker(t, dir)
}

// A step that lasts longer than the progress interval is written to the
// status with the operation it belongs to; a fast one is not.
func TestAgent_SlowStep_IsReportedAsProgress(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	// The check lasts until the test has seen its progress, so no poll can
	// miss it; on a loaded machine another step may be reported first.
	release := filepath.Join(t.TempDir(), "release")
	slow := agent.ExecCheck{Label: "slow", Command: "while [ ! -e " + release + " ]; do sleep 0.05; done"}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(filepath.Join(dir, "config.json")),
		Checks: []agent.CheckSpec{{Check: slow, Timeout: waitFor}}, ProgressInterval: 200 * time.Millisecond})
	d := desiredConfig("n1", "one", 100)
	d.Operation = "r1/n1/apply"
	f.writeDesired(t, d)
	st := f.waitStatus(t, "n1", "progress of the slow check", func(s *sluicev1.NodeStatus) bool {
		return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING && s.GetProgress() == "check 1 of 1: slow"
	})
	if st.GetOperation() != "r1/n1/apply" {
		t.Fatalf("progress %q of operation %q; want check 1 of 1: slow of r1/n1/apply", st.GetProgress(), st.GetOperation())
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(t, "n1", "Provisioned", provisioned(d.Fingerprint))
}

// The coordinator cancels an operation it gave up at its apply deadline:
// the agent stops it (process group killed), restores last-good, reports
// it; a cancelled operation it had not started is never started.
func TestAgent_CancelledOperation_IsStoppedOrNeverStarted(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, hang := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	started := filepath.Join(t.TempDir(), "started")
	cmd := fmt.Sprintf(`if [ "$SLUICE_FINGERPRINT" = %s ]; then touch %s; sleep 60; fi; cat > %s`, hang.Fingerprint, started, path)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.ExecApplier{Command: cmd}})
	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	hang.Operation = "r2/n1/apply"
	f.writeDesired(t, hang)
	// The apply itself, not the Provisioning status written just before
	// the operation is set up: a cancel arriving in between finds nothing
	// to stop.
	natstest.Eventually(t, waitFor, "the hanging apply to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	// The coordinator's cancel: the same config, so its fingerprint still
	// matches its content.
	cancelled := proto.Clone(hang).(*sluicev1.DesiredConfig)
	cancelled.Cancel = true
	f.writeDesired(t, cancelled)
	st := f.waitStatus(t, "n1", "Invalid hang", invalid(hang.Fingerprint))
	if st.GetFailedCheck() != contract.FailedCheckDeadline || st.GetAppliedFingerprint() != good.Fingerprint ||
		!strings.Contains(st.GetMessage(), "operation r2/n1/apply was cancelled by the coordinator at its apply deadline: stopped while applying") {
		t.Fatalf("status = %v; want Invalid deadline, cancelled by the coordinator, good restored", st)
	}
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config in force = %v; want last-good", got)
	}

	never := desiredConfig("n1", "three", 300)
	never.Operation, never.Cancel = "r3/n1/apply", true
	f.writeDesired(t, never)
	// Its report comes after the worker decided: had it applied never, the
	// file would hold it by now.
	st = f.waitStatus(t, "n1", "Invalid never", invalid(never.Fingerprint))
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config in force = %v after a cancelled operation arrived; want good, the cancelled one never started", got)
	}
	if st.GetFailedCheck() != contract.FailedCheckDeadline || st.GetAppliedFingerprint() != good.Fingerprint ||
		!strings.Contains(st.GetMessage(), "before this agent started it; not applied, fingerprint "+render.Short(good.Fingerprint)+" stays in force") {
		t.Fatalf("status = %v; want the cancelled operation reported Invalid deadline, not applied, good in force", st)
	}
}

// phaseKV is a status bucket that records the phase of every status
// written to it.
type phaseKV struct {
	jetstream.KeyValue
	mu     sync.Mutex
	phases []sluicev1.NodePhase
}

func (p *phaseKV) record(value []byte) {
	st := &sluicev1.NodeStatus{}
	if err := store.Unmarshal(value, st); err == nil {
		p.mu.Lock()
		p.phases = append(p.phases, st.GetPhase())
		p.mu.Unlock()
	}
}

func (p *phaseKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	p.record(value)
	return p.KeyValue.Create(ctx, key, value, opts...)
}

func (p *phaseKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	p.record(value)
	return p.KeyValue.Update(ctx, key, value, last)
}

func (p *phaseKV) written() []sluicev1.NodePhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.phases)
}

// eventTypes lists the types of the node's events on the stream, oldest first.
func eventTypes(t *testing.T, f *fleet, node string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := f.env.JS.OrderedConsumer(ctx, contract.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contract.EventSubject("node", node)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		b, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			ev := &sluicev1.Event{}
			if err := store.Unmarshal(m.Data(), ev); err != nil {
				t.Fatal(err)
			}
			out = append(out, ev.GetType())
		}
		if n == 0 {
			return out
		}
	}
}

// An operation shorter than ProgressInterval is acknowledged by its
// outcome alone: one status write and one NodeProvisioned event, no
// Provisioning. One that lasts longer is acknowledged once, when it has
// run ProgressInterval (naming its step), then reports its outcome.
func TestAgent_Acknowledgement_OnlyForAnOperationThatLasts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		applyFor   time.Duration
		wantPhases []sluicev1.NodePhase
		wantEvents []string
	}{
		{"fast", 0, []sluicev1.NodePhase{sluicev1.NodePhase_NODE_PHASE_PROVISIONED},
			[]string{agent.EventNodeProvisioned}},
		{"slow", 1500 * time.Millisecond,
			[]sluicev1.NodePhase{sluicev1.NodePhase_NODE_PHASE_PROVISIONING, sluicev1.NodePhase_NODE_PHASE_PROVISIONED},
			[]string{agent.EventNodeProvisioning, agent.EventNodeProvisioned}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			b := *f.env.Buckets
			kv := &phaseKV{KeyValue: b.Status}
			b.Status = kv
			dir := t.TempDir()
			path := filepath.Join(dir, "config.json")
			cmd := fmt.Sprintf("sleep %.1f; cat > %s", tc.applyFor.Seconds(), path)
			f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.ExecApplier{Command: cmd}, JetStream: f.env.JS, Buckets: &b,
				ProgressInterval: 500 * time.Millisecond})
			d := desiredConfig("n1", "one", 100)
			d.Operation = "r1/n1/apply"
			f.writeDesired(t, d)
			if tc.applyFor > 0 {
				st := f.waitStatus(t, "n1", "the acknowledgement", func(s *sluicev1.NodeStatus) bool {
					return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING
				})
				if st.GetProgress() != "applying" || st.GetOperation() != d.Operation || st.GetFingerprint() != d.Fingerprint {
					t.Fatalf("acknowledgement %v; want Provisioning of r1/n1/apply, progress applying", st)
				}
			}
			st := f.waitStatus(t, "n1", "Provisioned", provisioned(d.Fingerprint))
			if st.GetApplyStartedAt() == nil {
				t.Fatalf("status %v has no apply start", st)
			}
			if got := kv.written(); !slices.Equal(got, tc.wantPhases) {
				t.Errorf("statuses written %v, want %v", got, tc.wantPhases)
			}
			natstest.Eventually(t, waitFor, "the events", func() bool {
				return slices.Equal(eventTypes(t, f, "n1")[1:], tc.wantEvents) // after NodeRegistered
			})
		})
	}
}
