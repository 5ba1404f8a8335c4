package frr_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// TestInstance_PathspaceWithoutDaemons: against a pathspace no FRR runs
// in, vtysh, a reload, a diff and both checks fail at once, saying that
// FRR is not running there and where they looked.
func netipPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInstance_PathspaceWithoutDaemons(t *testing.T) {
	frrtest.Require(t)
	in := frr.Instance{Pathspace: hostnettest.UniqueName("absent")}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	where := "/var/run/frr/" + in.Pathspace + " does not exist"

	_, err := in.Run(ctx, "show version")
	if !errors.Is(err, frr.ErrNotRunning) || !strings.Contains(err.Error(), where) {
		t.Errorf("Run: err = %v, want ErrNotRunning saying %q", err, where)
	}
	file := filepath.Join(t.TempDir(), "frr.conf")
	if err := os.WriteFile(file, []byte("hostname x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Reload(ctx, file); !errors.Is(err, frr.ErrNotRunning) || !strings.Contains(err.Error(), where) {
		t.Errorf("Reload: err = %v, want ErrNotRunning saying %q", err, where)
	}
	if _, err := in.Diff(ctx, file); !errors.Is(err, frr.ErrNotRunning) {
		t.Errorf("Diff: err = %v, want ErrNotRunning", err)
	}
	for _, c := range []agent.Check{frr.BGP{FRR: in}, frr.Route{FRR: in, Prefix: netipPrefix(t, "203.0.113.0/24")}} {
		start := time.Now()
		out, err := c.Run(ctx, agent.CheckEnv{})
		if !errors.Is(err, frr.ErrNotRunning) || !strings.Contains(err.Error(), "FRR is unreachable") || !strings.Contains(out, where) {
			t.Errorf("%s: err = %v, want ErrNotRunning saying FRR is unreachable\n%s", c.Name(), err, out)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s took %s: it must not wait for FRR that is not there", c.Name(), took)
		}
	}
}
