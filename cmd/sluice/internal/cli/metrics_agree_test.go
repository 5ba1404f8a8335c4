package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
)

// After a rollback, the coordinator's sluice_rollout_nodes gauges are the
// counts `sluice rollout status` prints, category by category (sluice
// issue 42: both are contract.TallyOf's, so the metric cannot read a
// record field the status does not count). Five agents of sluice dev, a
// check that fails node-03 on a bad mgmt table, two at a time.
func TestMetrics_RolloutNodes_AgreeWithRolloutStatusAfterARollback(t *testing.T) {
	s, err := dev.Start(context.Background(), dev.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: 5, Stderr: io.Discard,
		CheckCmds: []string{node03Check}, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start sluice dev: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if code, out, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA), "--max-parallel", "2"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout status --watch: exit %d\n%s%s", code, out, stderr)
	}
	bad := strings.Replace(tenantA, "tableId: 100", "tableId: 110", 1)
	if code, out, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "bad.yaml", bad), "--max-parallel", "2"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != ExitRolledBack {
		t.Fatalf("rollout status --watch: exit %d, want %d (rolled back)\n%s", code, ExitRolledBack, out)
	}
	_, status, _ := sluice(t, s.URL(), "rollout", "status")
	id := regexp.MustCompile(`(?m)^rollout\s+(\S+)`).FindStringSubmatch(status)
	if id == nil {
		t.Fatalf("rollout status names no rollout:\n%s", status)
	}
	printed := printedCounts(t, status)

	metric := regexp.MustCompile(`(?m)^sluice_rollout_nodes\{rollout="` + regexp.QuoteMeta(id[1]) + `",state="([a-z_]+)"\} (\d+)$`)
	var gauges map[string]uint32
	natstest.Eventually(t, 10*time.Second, "the coordinator's gauges of the rolled-back record", func() bool {
		resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), fmt.Sprintf(`sluice_rollout_phase{phase="rolled_back",rollout=%q} 1`, id[1])) {
			return false
		}
		gauges = map[string]uint32{}
		for _, m := range metric.FindAllStringSubmatch(string(b), -1) {
			n, _ := strconv.ParseUint(m[2], 10, 32)
			gauges[m[1]] = uint32(n)
		}
		return true
	})
	if len(printed) == 0 {
		t.Fatalf("rollout status prints no counts:\n%s", status)
	}
	for key, n := range printed {
		if g, ok := gauges[contract.Snake(key)]; !ok || g != n {
			t.Errorf("rollout status says %s %d; sluice_rollout_nodes{state=%q} is %d (present: %t)", contract.Words(key), n, contract.Snake(key), g, ok)
		}
	}
	if !t.Failed() {
		t.Logf("rollout status and the gauges agree: %v", printed)
	}
}

// printedCounts reads the counts line of `rollout status` ("pending 0, in
// progress 0, provisioned 3, failed 1 (1 timed out), …") by category key.
func printedCounts(t *testing.T, status string) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	for _, line := range strings.Split(status, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "pending ") {
			continue
		}
		part := regexp.MustCompile(`^(.+?) (\d+)(?: \((\d+)(?: ([a-z ]+)|: their agent cannot read the config)\))?$`)
		for _, p := range strings.Split(line, ", ") {
			m := part.FindStringSubmatch(p)
			if m == nil {
				t.Fatalf("count %q of %q", p, line)
			}
			out[keyOfWords(t, m[1])] = atoi32(m[2])
			switch {
			case m[3] != "" && m[4] != "":
				out[keyOfWords(t, m[4])] = atoi32(m[3])
			case m[3] != "":
				out[contract.CountIncompatible] = atoi32(m[3])
			}
		}
	}
	return out
}

func keyOfWords(t *testing.T, words string) string {
	t.Helper()
	for _, c := range contract.Categories {
		if c.Words == words {
			return c.Key
		}
	}
	t.Fatalf("no category's words are %q", words)
	return ""
}

func atoi32(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}
