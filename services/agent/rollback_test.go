package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// nodeEvents returns every event of node on the EVENTS stream, oldest first.
func nodeEvents(t *testing.T, f *fleet, node string) []*sluicev1.Event {
	t.Helper()
	return subjectEvents(t, f, contract.EventSubject("node", node))
}

// subjectEvents returns every event stored under subject, oldest first.
func subjectEvents(t *testing.T, f *fleet, subject string) []*sluicev1.Event {
	t.Helper()
	ctx := context.Background()
	st, err := f.env.JS.Stream(ctx, contract.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*sluicev1.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || m.Subject != subject {
			continue
		}
		ev := &sluicev1.Event{}
		if err := store.Unmarshal(m.Data, ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// countEvents counts node's events of type typ.
func countEvents(t *testing.T, f *fleet, node, typ string) int {
	n := 0
	for _, ev := range nodeEvents(t, f, node) {
		if ev.GetType() == typ {
			n++
		}
	}
	return n
}

func invalid(fp string) func(*sluicev1.NodeStatus) bool {
	return func(s *sluicev1.NodeStatus) bool {
		return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && s.GetFingerprint() == fp
	}
}

// readConfig decodes the DesiredConfig JSON in path.
func readConfig(t *testing.T, path string) *sluicev1.DesiredConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(b, got); err != nil {
		t.Fatalf("%s holds %s: %v", path, b, err)
	}
	return got
}

func writeConfig(t *testing.T, path string, d *sluicev1.DesiredConfig) {
	t.Helper()
	b, err := store.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func assertNoMarker(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, agent.ApplyingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("apply marker: stat = %v, want it removed", err)
	}
}

func TestAgent_FailingExecCheck_RestoresLastGoodAndReportsInvalid(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, bad := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	check := agent.ExecCheck{Label: "uplink", Command: `if grep -q ` + bad.Fingerprint + ` "$SLUICE_CONFIG"; then echo "ping 10.0.0.1: no route to host"; exit 1; fi`}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(path), Checks: []agent.CheckSpec{{Check: check}}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "Invalid bad", invalid(bad.Fingerprint))
	if st.GetFailedCheck() != "uplink" || !strings.Contains(st.GetCheckOutput(), "no route to host") ||
		st.GetAppliedFingerprint() != good.Fingerprint || !strings.Contains(st.GetMessage(), "restored last-good "+render.Short(good.Fingerprint)+" (checks pass)") {
		t.Fatalf("status = %v, want Invalid by check uplink with its output, good restored and passing", st)
	}
	for _, file := range []string{path, filepath.Join(dir, agent.LastGoodFile)} {
		if got := readConfig(t, file); !proto.Equal(got, good) {
			t.Fatalf("%s holds %v, want last-good %v", file, got, good)
		}
	}
	assertNoMarker(t, dir)
	natstest.Eventually(t, waitFor, "one NodeInvalid and one NodeRestored event", func() bool {
		return countEvents(t, f, "n1", agent.EventNodeInvalid) == 1 && countEvents(t, f, "n1", agent.EventNodeRestored) == 1
	})
	for _, ev := range nodeEvents(t, f, "n1") {
		if ev.GetType() == agent.EventNodeRestored && (ev.GetFingerprint() != good.Fingerprint || !strings.Contains(ev.GetReason(), "uplink")) {
			t.Fatalf("NodeRestored = %v, want good's fingerprint and the failing check named", ev)
		}
	}
}

func TestAgent_ApplyError_RestoresLastGoodAndReportsInvalidApply(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, bad := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	rec := &recorder{err: errors.New("netlink: file exists"), failFP: bad.Fingerprint, next: agent.NewFileApplier(path)}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: rec})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "Invalid bad", invalid(bad.Fingerprint))
	if st.GetFailedCheck() != "apply" || st.GetCheckOutput() != "netlink: file exists" || st.GetAppliedFingerprint() != good.Fingerprint ||
		!strings.Contains(st.GetMessage(), "restored last-good "+render.Short(good.Fingerprint)) {
		t.Fatalf("status = %v, want Invalid apply with good restored", st)
	}
	if got := rec.fingerprints(); !slices.Equal(got, []string{good.Fingerprint, bad.Fingerprint, good.Fingerprint}) {
		t.Fatalf("applied %v, want good, bad, then good restored", got)
	}
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config on disk = %v, want last-good", got)
	}
	assertNoMarker(t, dir)
	natstest.Eventually(t, waitFor, "NodeRestored event", func() bool {
		return countEvents(t, f, "n1", agent.EventNodeRestored) == 1
	})
}

func TestAgent_FailingValidate_DoesNotApply(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	rec := &recorder{}
	good, bad := desiredConfig("n1", "one", 100), desiredConfig("n1", "bad", 4095)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: rec,
		ValidateCmd: `if grep -q ` + bad.Fingerprint + ` "$SLUICE_CONFIG"; then echo "vlan 4095 is reserved" >&2; exit 3; fi`})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "Invalid bad", invalid(bad.Fingerprint))
	if st.GetFailedCheck() != "validate" || !strings.Contains(st.GetCheckOutput(), "vlan 4095 is reserved") ||
		st.GetAppliedFingerprint() != good.Fingerprint || !strings.Contains(st.GetMessage(), "not applied") {
		t.Fatalf("status = %v, want Invalid validate with its output and good still in force", st)
	}
	if got := rec.fingerprints(); !slices.Equal(got, []string{good.Fingerprint}) {
		t.Fatalf("applied %v, want only good", got)
	}
	assertNoMarker(t, dir)
	if n := countEvents(t, f, "n1", agent.EventNodeRestored); n != 0 {
		t.Fatalf("%d NodeRestored events, want none: nothing was applied", n)
	}
}

// The validate command has its own bound (ValidateTimeout), not the
// Applier's (ApplierTimeout): a command slower than the applier's timeout
// passes, and one slower than its own is stopped and the config not applied.
func TestAgent_ValidateCmd_BoundedByValidateTimeoutNotApplierTimeout(t *testing.T) {
	tests := []struct {
		name        string
		cfg         agent.Config
		wantInvalid bool
	}{
		{name: "slower than the applier timeout: passes",
			cfg: agent.Config{ApplierTimeout: 100 * time.Millisecond, ValidateCmd: "sleep 1"}},
		{name: "slower than the validate timeout: Invalid, not applied",
			cfg: agent.Config{ValidateTimeout: 200 * time.Millisecond, ValidateCmd: "sleep 30"}, wantInvalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rec := &recorder{}
			cfg := tt.cfg
			cfg.Node, cfg.StateDir, cfg.Applier = "n1", t.TempDir(), rec
			f.start(t, cfg)
			d := desiredConfig("n1", "one", 100)
			f.writeDesired(t, d)
			if !tt.wantInvalid {
				f.waitStatus(t, "n1", "Provisioned", provisioned(d.Fingerprint))
				return
			}
			st := f.waitStatus(t, "n1", "Invalid", invalid(d.Fingerprint))
			if st.GetFailedCheck() != "validate" || rec.count() != 0 {
				t.Fatalf("status = %v, %d applies; want Invalid validate and nothing applied", st, rec.count())
			}
		})
	}
}

func TestAgent_KilledMidApply_RestoresLastGoodBeforeAnythingElse(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, interrupted := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	// What a crash halfway through applying interrupted leaves behind.
	writeConfig(t, filepath.Join(dir, agent.LastGoodFile), good)
	writeConfig(t, filepath.Join(dir, agent.ApplyingFile), interrupted)
	if err := os.WriteFile(path, []byte(`{"node": "n1", "fingerprint": "`+interrupted.Fingerprint[:5]), 0o644); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{next: agent.NewFileApplier(path)}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: rec})
	natstest.Eventually(t, waitFor, "NodeRestored event", func() bool {
		return countEvents(t, f, "n1", agent.EventNodeRestored) == 1
	})
	evs := nodeEvents(t, f, "n1")
	wantReason := "interrupted apply of " + render.Short(interrupted.Fingerprint) + " detected at start; restored last-good " + render.Short(good.Fingerprint)
	if first := evs[0]; first.GetType() != agent.EventNodeRestored || first.GetFingerprint() != good.Fingerprint ||
		!strings.Contains(first.GetReason(), wantReason) {
		t.Fatalf("first event = %v, want NodeRestored of good before registering", first)
	}
	if got := rec.fingerprints(); !slices.Equal(got, []string{good.Fingerprint}) {
		t.Fatalf("applied %v, want only the restored good", got)
	}
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config on disk = %v, want last-good", got)
	}
	assertNoMarker(t, dir)

	// Then it continues normally.
	f.writeDesired(t, interrupted)
	f.waitStatus(t, "n1", "Provisioned interrupted", provisioned(interrupted.Fingerprint))
}

func TestAgent_ExecCheck_SeesNodeAndConfig(t *testing.T) {
	tests := []struct {
		name     string
		applier  func(dir string) agent.Applier
		wantPath func(dir string) string
	}{
		{
			name:     "file applier: its file",
			applier:  func(dir string) agent.Applier { return agent.NewFileApplier(filepath.Join(dir, "etc", "net.json")) },
			wantPath: func(dir string) string { return filepath.Join(dir, "etc", "net.json") },
		},
		{
			name:     "applier without a file: a copy in the state dir",
			applier:  func(string) agent.Applier { return &recorder{} },
			wantPath: func(dir string) string { return filepath.Join(dir, agent.AppliedFile) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			dir := t.TempDir()
			seen := filepath.Join(t.TempDir(), "seen")
			check := agent.ExecCheck{Command: `printf '%s\n%s\n' "$SLUICE_NODE" "$SLUICE_CONFIG" > ` + seen + ` && cp "$SLUICE_CONFIG" ` + seen + `.json`}
			f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: tt.applier(dir), Checks: []agent.CheckSpec{{Check: check}}})
			want := desiredConfig("n1", "one", 100)
			f.writeDesired(t, want)
			f.waitStatus(t, "n1", "Provisioned", provisioned(want.Fingerprint))

			b, err := os.ReadFile(seen)
			if err != nil {
				t.Fatal(err)
			}
			if got, wantEnv := string(b), "n1\n"+tt.wantPath(dir)+"\n"; got != wantEnv {
				t.Fatalf("check saw %q, want %q", got, wantEnv)
			}
			if got := readConfig(t, seen+".json"); !proto.Equal(got, want) {
				t.Fatalf("SLUICE_CONFIG held %v, want %v", got, want)
			}
		})
	}
}

func TestAgent_CheckStillFailingAfterRestore_SaysSo(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	down := filepath.Join(t.TempDir(), "uplink-down")
	check := agent.ExecCheck{Label: "uplink", Command: `if [ -e ` + down + ` ]; then echo "carrier lost"; exit 1; fi`}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(filepath.Join(dir, "config.json")),
		Checks: []agent.CheckSpec{{Check: check}}})
	good, next := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	// The uplink goes down for reasons of its own: last-good does not help.
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.writeDesired(t, next)
	st := f.waitStatus(t, "n1", "Invalid next", invalid(next.Fingerprint))
	if st.GetFailedCheck() != "uplink" || st.GetAppliedFingerprint() != good.Fingerprint ||
		!strings.Contains(st.GetMessage(), "restored last-good "+render.Short(good.Fingerprint)+" (check uplink still fails: exit status 1)") {
		t.Fatalf("status = %v, want good restored and the re-check's failure in the message", st)
	}
}

func TestAgent_RestoreFails_SaysSoLoudlyAndRestoresAtNextStart(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	file := agent.NewFileApplier(path)
	var broken atomic.Bool
	ap := agent.ApplierFunc(func(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
		if broken.Load() {
			return errors.New("netlink: device or resource busy")
		}
		return file.Apply(ctx, cfg)
	})
	stop := f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: ap})
	good, bad := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	broken.Store(true)
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "Invalid bad", invalid(bad.Fingerprint))
	if st.GetFailedCheck() != "apply" || st.GetAppliedFingerprint() != "" ||
		!strings.Contains(st.GetMessage(), "RESTORING last-good "+render.Short(good.Fingerprint)+" FAILED: netlink: device or resource busy") {
		t.Fatalf("status = %v, want Invalid apply, the failed restore in capitals and nothing known in force", st)
	}
	natstest.Eventually(t, waitFor, "NodeRestoreFailed event", func() bool {
		return countEvents(t, f, "n1", agent.EventNodeRestoreFailed) == 1
	})
	if n := countEvents(t, f, "n1", agent.EventNodeRestored); n != 0 {
		t.Fatalf("%d NodeRestored events, want none", n)
	}
	if _, err := os.Stat(filepath.Join(dir, agent.ApplyingFile)); err != nil {
		t.Fatalf("apply marker: %v, want it kept for the next start", err)
	}

	// The operator fixes the node and restarts the agent.
	stop()
	broken.Store(false)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: ap})
	st = f.waitStatus(t, "n1", "status naming good in force", func(s *sluicev1.NodeStatus) bool {
		return s.GetAppliedFingerprint() == good.Fingerprint
	})
	if st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_INVALID || st.GetFingerprint() != bad.Fingerprint ||
		!strings.Contains(st.GetMessage(), "interrupted apply of "+render.Short(bad.Fingerprint)+" detected at start; restored last-good "+render.Short(good.Fingerprint)) {
		t.Fatalf("status = %v, want bad still Invalid, good in force and the restore at start in the message", st)
	}
	if got := readConfig(t, path); !proto.Equal(got, good) {
		t.Fatalf("config on disk = %v, want last-good", got)
	}
	assertNoMarker(t, dir)
	natstest.Eventually(t, waitFor, "NodeRestored event", func() bool {
		return countEvents(t, f, "n1", agent.EventNodeRestored) == 1
	})
}
