package cli

import (
	"strings"
	"testing"
	"time"
)

// A freeze holds a rollout before its first wave, says so in rollout
// status and get freezes, is recorded as events, and once removed the
// rollout goes on; bad flags are usage errors naming the flag.
func TestFreeze_HoldsARolloutUntilRemoved(t *testing.T) {
	s := startSystem(t, 2)
	code, out, stderr := sluice(t, s.URL(), "freeze", "add", "--for", "1h", "--reason", "core router maintenance", "--id", "core")
	if code != 0 || !strings.Contains(out, "freeze core added") {
		t.Fatalf("freeze add: exit %d\n%s%s", code, out, stderr)
	}
	if _, out, _ := sluice(t, s.URL(), "get", "freezes"); !strings.Contains(out, "core") || !strings.Contains(out, "in force") || !strings.Contains(out, "core router maintenance") {
		t.Errorf("get freezes:\n%s", out)
	}
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA), "--max-parallel", "2"); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, _ = sluice(t, s.URL(), "rollout", "status")
		if strings.Contains(out, "frozen until") && strings.Contains(out, "freeze core by") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout status does not say the rollout waits for the freeze:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, out, _ := sluice(t, s.URL(), "get", "nodes"); strings.Contains(out, "Provisioned") {
		t.Fatalf("a node was configured under the freeze:\n%s", out)
	}
	if code, out, stderr := sluice(t, s.URL(), "freeze", "remove", "core"); code != 0 || !strings.Contains(out, "freeze core removed") {
		t.Fatalf("freeze remove: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout after the freeze: exit %d\n%s%s", code, out, stderr)
	}
	_, out, _ = sluice(t, s.URL(), "events", "--kind", "freeze")
	if !strings.Contains(out, "FreezeAdded") || !strings.Contains(out, "FreezeRemoved") {
		t.Errorf("events --kind freeze:\n%s", out)
	}
	if code, _, stderr := sluice(t, s.URL(), "freeze", "remove", "core"); code != 1 || !strings.Contains(stderr, `no freeze "core"`) {
		t.Errorf("removing it again: exit %d, %q", code, stderr)
	}
	for args, want := range map[string]string{
		"freeze add --reason x":                                    "--to TIME or --for DURATION",
		"freeze add --for 1h":                                      "--reason is required",
		"freeze add --to yesterday --reason x":                     `--to "yesterday"`,
		"freeze add --for 1h --to 2030-01-01T00:00:00Z --reason x": "give one",
	} {
		if code, _, stderr := sluice(t, s.URL(), strings.Fields(args)...); code != ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, %q; want a usage error with %q", args, code, stderr, want)
		}
	}
}
