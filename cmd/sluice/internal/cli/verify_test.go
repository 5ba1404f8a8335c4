package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const vrfTypo = `kind: VRFRoute
name: tenant-a-extra
spec:
  vrf: tenant-aa
  sequence: 20
  export:
    - cidr: 10.0.101.0/24
`

// vniClash gives tenant-a's VNI another VLAN in a zone of its own: every
// per-node rule passes, the fabric-wide one does not.
const vniClash = `kind: Layer2Network
name: tenant-a-c
spec:
  vlan: 101
  vni: 10100
  mtu: 9000
  anycastGateways: [10.0.100.1/24, fd00:100::1/64]
  vrf: tenant-a
  nodeSelector: {matchLabels: {zone: zone-c}}
`

// The fleet verifier as the operator meets it: a VRF typo is warned of
// (and refused with --strict), a failure-domain key no node carries and a
// VNI with two VLANs are refused before anything is stored, by apply, its
// dry run and diff alike.
func TestApply_FleetVerifierFindings(t *testing.T) {
	s := startSystem(t, 3) // zone-a, zone-b, zone-c
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", "../../../../examples"); code != 0 {
		t.Fatalf("apply examples: exit %d: %s", code, stderr)
	}
	_, head, _ := sluice(t, s.URL(), "get", "revision")
	typo := writeFile(t, "typo.yaml", vrfTypo)
	clash := writeFile(t, "clash.yaml", vniClash)

	for _, tt := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  []string // on stderr
	}{
		{"diff refuses a failure domain no node carries", []string{"diff", "-f", typo, "--failure-domain", "zonee"}, ExitDiffFailed,
			[]string{`error failure-domain-missing: failure domain "zonee": none of the 3 present nodes has that label`, `did you mean "zone"?`, "apply would be refused: refused by the fleet verifier"}},
		{"apply --dry-run refuses it", []string{"apply", "--dry-run", "-f", typo, "--failure-domain", "zonee"}, 1,
			[]string{"error failure-domain-missing: "}},
		{"apply refuses it", []string{"apply", "-f", typo, "--failure-domain", "zonee"}, 1,
			[]string{"error failure-domain-missing: ", "rejected: refused by the fleet verifier: 1 error", "nothing was stored"}},
		{"apply refuses one VNI with two VLANs", []string{"apply", "-f", clash}, 1,
			[]string{"error vni-vlan-mismatch: VNI 10100 is one network across the fabric but its layer2 networks give it 2 VLANs: 100 (layer2network/tenant-a), 101 (layer2network/tenant-a-c)"}},
		{"apply --strict refuses the VRF typo", []string{"apply", "--strict", "-f", typo}, 1,
			[]string{`warning vrf-unknown: VRF "tenant-aa" is named by vrfroute/tenant-a-extra only`, "strict: warnings refuse too"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, s.URL(), tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout, stderr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, now, _ := sluice(t, s.URL(), "get", "revision"); now != head {
				t.Errorf("the revisions changed:\n%s\nwas:\n%s", now, head)
			}
		})
	}

	// diff -o json carries the warnings as findings.
	code, stdout, stderr := sluice(t, s.URL(), "diff", "-f", typo, "-o", "json")
	var r struct {
		Findings []struct{ Rule, Severity, Message string }
	}
	if err := json.Unmarshal([]byte(stdout), &r); code != ExitDiffers || err != nil || len(r.Findings) != 1 ||
		r.Findings[0].Rule != "vrf-unknown" || r.Findings[0].Severity != "warning" || !strings.Contains(stderr, "warning vrf-unknown: ") {
		t.Errorf("diff -o json: exit %d, %v\nstdout: %s\nstderr: %s", code, err, stdout, stderr)
	}

	// Without --strict the typo is a warning: applied, and said.
	code, stdout, stderr = sluice(t, s.URL(), "apply", "-f", typo)
	if code != 0 || !strings.Contains(stdout, "vrfroute/tenant-a-extra created") {
		t.Fatalf("apply: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if want := `warning vrf-unknown: VRF "tenant-aa" is named by vrfroute/tenant-a-extra only: no other intent routes, leaks or binds a table in it; did you mean "tenant-a"?`; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

// Strategy flags given with content that is the head change nothing, and
// apply, its dry run and diff say that they were not used.
func TestApply_UnchangedWithStrategyFlags_SaysTheyWereNotUsed(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenant-a.yaml", tenantA)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", f); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	// While its rollout runs, another strategy is refused (a running
	// rollout's strategy never changes); once it ended, it is not used.
	natstest.Eventually(t, 30*time.Second, "the rollout of no nodes to end", func() bool {
		_, out, _ := sluice(t, s.URL(), "rollout", "status")
		return strings.Contains(out, "Succeeded")
	})
	for _, args := range [][]string{
		{"apply", "-f", f, "--max-parallel", "3"},
		{"apply", "--dry-run", "-f", f, "--max-parallel", "3"},
		{"diff", "-f", f, "--max-parallel", "3"},
	} {
		code, stdout, stderr := sluice(t, s.URL(), args...)
		if code != 0 || !strings.Contains(stdout, "no change: revision ") || !strings.Contains(stdout, "; the strategy flags were not used") {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	// Without strategy flags there is nothing to say about them.
	if _, stdout, _ := sluice(t, s.URL(), "apply", "-f", f); strings.Contains(stdout, "strategy flags") {
		t.Errorf("apply without strategy flags:\n%s", stdout)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// sluiceBinary builds the sluice command once per test run: exit codes are
// checked on the process, as a shell sees them.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-verify-test")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build sluice: %v", buildErr)
	}
	return builtBin
}

// sluice verify needs no server: 0 when nothing is found, 1 for a finding
// (or an intent's own problem), 2 for a usage error.
func TestVerify_ExitCodes(t *testing.T) {
	bin := sluiceBinary(t)
	dir := t.TempDir()
	for name, content := range map[string]string{"clash.yaml": vniClash} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	both := []string{"-f", "../../../../examples", "-f", dir}
	for _, tt := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"the examples are clean", []string{"-f", "../../../../examples"}, 0, "verified: 7 intents on no nodes (without --live), nothing found"},
		{"one VNI with two VLANs", both, 1, "error vni-vlan-mismatch: VNI 10100"},
		{"an intent's own problem names its file and the field's line", []string{"-f", "../../../../examples/broken"}, 1,
			"examples/broken/broken.yaml: document 1 (line 6): layer2network/tenant-c: spec.vlan: 5000 is outside 1-4094"},
		{"no files", nil, 2, "nothing to verify"},
		{"a bad strategy flag", []string{"-f", dir, "--max-parallel", "0"}, 2, "--max-parallel"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"verify"}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(string(out), tt.wantOut) {
				t.Errorf("exit %d, want %d; output lacks %q?\n%s", code, tt.wantCode, tt.wantOut, out)
			}
		})
	}
}

// sluice verify --live checks the strategy flags against the present nodes.
func TestVerify_LiveChecksTheStrategyOnThePresentNodes(t *testing.T) {
	s := startSystem(t, 3)
	code, stdout, stderr := sluice(t, s.URL(), "verify", "--live", "-f", "../../../../examples", "--failure-domain", "zonee")
	if code != 1 || !strings.Contains(stdout, `error failure-domain-missing: failure domain "zonee": none of the 3 present nodes`) ||
		!strings.Contains(stdout, "1 error, 0 warnings in 7 intents on 3 present nodes") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, stdout, _ := sluice(t, s.URL(), "verify", "--live", "-f", "../../../../examples", "--failure-domain", "zone"); code != 0 {
		t.Errorf("failure domain zone: exit %d\n%s", code, stdout)
	}
}

func TestNoChange_SaysTheStrategyWasNotUsedAndWhatAQueuedHeadWaitsFor(t *testing.T) {
	rev := strings.Repeat("ab", 32)
	for _, tt := range []struct {
		waitsFor string
		st       *sluicev1.Strategy
		want     string
	}{
		{"", nil, "no change: revision abababababab is already the head"},
		{"", &sluicev1.Strategy{MaxParallel: "3"}, "no change: revision abababababab is already the head; the strategy flags were not used (a strategy is used only when the head moves)"},
		{"4-cdcdcdcdcdcd", &sluicev1.Strategy{MaxParallel: "3"}, "no change: revision abababababab is already the head; the strategy flags were not used (a strategy is used only when the head moves); its rollout is queued: it starts when rollout 4-cdcdcdcdcdcd ends"},
	} {
		if got := noChange(rev, tt.waitsFor, tt.st); got != tt.want {
			t.Errorf("noChange(%q, %v)\n got %s\nwant %s", tt.waitsFor, tt.st, got, tt.want)
		}
	}
}
