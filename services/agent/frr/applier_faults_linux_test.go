package frr_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
)

func newApplier(t *testing.T, in frr.Instance) *frr.Applier {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	a, err := frr.NewApplier(frr.ApplierConfig{FRR: in, Settings: node2(), Hostname: host, Dir: t.TempDir(), Settle: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The FRR applier's faults: each fails at once or at its deadline, naming
// the instance and what is wrong, and a failed reload is never taken for
// the config in force.
func TestApplier_Faults(t *testing.T) {
	frrtest.Require(t)
	cfg := desiredOf("n2", "good", vrfRoute("leak", "t", 10, "", items("203.0.113.0/24"), nil))

	t.Run("a pathspace no daemon runs in fails the apply at once", func(t *testing.T) {
		in := frr.Instance{Pathspace: hostnettest.UniqueName("absent")}
		a := newApplier(t, in)
		start := time.Now()
		err := a.Apply(ctxT(t, 20*time.Second), cfg)
		want := "its socket directory " + filepath.Join(frr.RunDir, in.Pathspace) + " does not exist (are FRR's daemons started with -N " + in.Pathspace + "?)"
		if !errors.Is(err, frr.ErrNotRunning) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want ErrNotRunning saying %q", err, want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("took %s; want at once", took)
		}
	})

	t.Run("a pathspace no daemon runs fails the validation as the node's fault", func(t *testing.T) {
		in := frr.Instance{Pathspace: hostnettest.UniqueName("absent")}
		a := newApplier(t, in)
		err := a.Validate(ctxT(t, 20*time.Second), cfg)
		if !errors.Is(err, frr.ErrNotRunning) || !errors.Is(err, agent.ErrNodeFault) {
			t.Errorf("err = %v, want ErrNotRunning matching agent.ErrNodeFault (vtysh -C alone would accept the file)", err)
		}
	})

	t.Run("vtysh hanging is bounded by the apply's deadline, and the next apply reloads", func(t *testing.T) {
		hostnettest.RequireNetAdmin(t)
		name := hostnettest.UniqueName("hang")
		hostnettest.NewNamespace(t, name)
		in := frrtest.Start(t, name, frrtest.Options{})
		a := newApplier(t, in.Instance)
		if err := a.Apply(ctxT(t, 20*time.Second), cfg); err != nil {
			t.Fatal(err)
		}
		if err := in.Signal("bgpd", syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		other := desiredOf("n2", "other", vrfRoute("leak", "t", 10, "", items("198.51.100.0/24"), nil))
		start := time.Now()
		err := a.Apply(ctxT(t, 2*time.Second), other)
		took := time.Since(start)
		if err := in.Signal("bgpd", syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, frr.ErrNoAnswer) || !strings.Contains(err.Error(), in.Instance.String()) || took > 5*time.Second {
			t.Fatalf("apply with bgpd stopped: err = %v after %s; want ErrNoAnswer naming %s within about 2s", err, took, in.Instance)
		}
		t.Logf("hung bgpd: the apply ended after %s: %v", took.Round(time.Millisecond), err)
		// The interrupted reload is not the config in force: the restore of
		// the first config reloads it (and the other config again too).
		n := a.Reloads()
		if err := a.Apply(ctxT(t, 20*time.Second), cfg); err != nil || a.Reloads() != n+1 {
			t.Errorf("restore after the hung reload: %v, reloads %d → %d; want one reload", err, n, a.Reloads())
		}
		if err := a.Apply(ctxT(t, 20*time.Second), cfg); err != nil || a.Reloads() != n+1 {
			t.Errorf("the same config again: %v, reloads %d; want none", err, a.Reloads()-n-1)
		}
	})
}

// FRR's parser is the judge before anything changes: without vtysh the
// validation says FRR is not installed.
func TestApplier_Validate_WithoutFRR_SaysNotInstalled(t *testing.T) {
	a := newApplier(t, frr.Instance{Pathspace: "n2"})
	t.Setenv("PATH", t.TempDir())
	err := a.Validate(context.Background(), desiredOf("n2", "x"))
	if !errors.Is(err, frr.ErrNotInstalled) || !errors.Is(err, agent.ErrNodeFault) {
		t.Errorf("err = %v, want ErrNotInstalled", err)
	}
}
