package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }

const (
	revA = "aaaaaaaaaaaa1111111111111111111111111111111111111111111111111111"
	revB = "bbbbbbbbbbbb2222222222222222222222222222222222222222222222222222"
	fpX  = "cccccccccccc3333333333333333333333333333333333333333333333333333"
)

// gitSource is a head moved by the sync of git registry gitops.
var gitSource = &sluicev1.Source{Registry: "gitops", Commit: &sluicev1.GitCommit{
	Hash: "0123456789abcdef0123456789abcdef01234567", Subject: "add red", Author: "Ada Admin <ada@example.net>"}}

func tableFixtures() map[string]listing {
	l2 := &sluicev1.Intent{Name: "tenant-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 100, Vni: 10100}}}
	rt := &sluicev1.Intent{Name: "mgmt", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}
	return map[string]listing{
		"intents": intentList{
			{Intent: l2, Source: "api", UpdatedAt: ago(90 * time.Second)},
			{Intent: rt, Source: "gitops", Origin: "tenant-a.yaml", MarkedForDeletion: true, UpdatedAt: ago(3 * time.Hour)},
		},
		"revisions": revisionList{
			items: []*sluicev1.Revision{
				{Id: revB, Intents: []*sluicev1.Intent{l2}, CreatedAt: ago(time.Minute)},
				{Id: revA, Intents: []*sluicev1.Intent{l2, rt}, CreatedAt: ago(50 * time.Hour)},
			},
			head:    &sluicev1.Head{Revision: revB, Generation: 7},
			sources: map[string]*sluicev1.Source{revB: gitSource},
		},
		"nodes": mergeNodes(
			[]*sluicev1.NodePresence{
				{Node: "node-02", Labels: map[string]string{"zone": "zone-b", "rack": "rack-1"}, HeartbeatAt: ago(2 * time.Second)},
				{Node: "node-01", Labels: map[string]string{"zone": "zone-a"}, HeartbeatAt: ago(time.Second)},
			},
			[]*sluicev1.NodeStatus{
				{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: revA, Fingerprint: fpX, Message: "applied", LastUpdate: ago(5 * time.Second)},
				{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Revision: revB, Fingerprint: fpX, Message: "ping 10.0.0.1 failed:\n100% loss", LastUpdate: ago(10 * time.Minute)},
			},
		),
		"rollouts": rolloutList{
			items: []*sluicev1.Rollout{
				{Id: "2-bbbbbbbbbbbb", Revision: revB, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Reason: "head moved",
					StartedAt: ago(30 * time.Second), Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 4, Failed: 1, Pending: 3, InProgress: 2}},
				{Id: "1-aaaaaaaaaaaa", Revision: revA, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "node-03 failed",
					StartedAt: ago(time.Hour), FinishedAt: ago(58 * time.Minute), Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 2, Failed: 3, TimedOut: 1, Skipped: 1, Stopped: 1, NotStarted: 3, Reverted: 4}},
			},
			active: "2-bbbbbbbbbbbb",
		},
		"history": history{
			items: []*sluicev1.Rollout{
				{Id: "1-aaaaaaaaaaaa", Revision: revA, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, Reason: "all 10 nodes provisioned",
					StartedAt: ago(2 * time.Hour), FinishedAt: ago(118 * time.Minute), Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 10}},
				{Id: "2-bbbbbbbbbbbb", Revision: revB, Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "node-03 failed",
					StartedAt: ago(time.Hour), FinishedAt: ago(58 * time.Minute), Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 2, Failed: 3, Stopped: 1, NotStarted: 4, Reverted: 4},
					Strategy: &sluicev1.Strategy{FailureDomain: "zone"}, Source: gitSource,
					Stages: []*sluicev1.StageResult{
						{Wave: 1, Domain: "0a", StartedAt: ago(time.Hour), EndedAt: ago(59 * time.Minute), Nodes: 2, Provisioned: 2},
						{Wave: 2, Domain: "1", StartedAt: ago(59 * time.Minute), Nodes: 3, Failed: 3},
					}},
				{Id: "3-aaaaaaaaaaaa", Revision: revA, Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Reason: "head moved",
					StartedAt: ago(30 * time.Second), Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 4, Pending: 4, InProgress: 2}},
			},
			active: "3-aaaaaaaaaaaa", force: "1-aaaaaaaaaaaa",
		},
		"fingerprints": fingerprintList{
			{Fingerprint: fpX, Revision: revB, Rollout: "2-bbbbbbbbbbbb", Node: "node-03", Cause: "timed-out", Check: "ping", Output: strings.Repeat("timeout ", 20), Time: ago(4 * time.Minute)},
			{Fingerprint: "dddddddddddd4444", Revision: revA, Rollout: "1-aaaaaaaaaaaa", Node: "node-01", Cause: "check-failed", Check: "ping", Output: "100% loss", Time: ago(2 * time.Hour),
				Forgiven: &sluicev1.Forgiveness{By: "ops@laptop", Reason: "uplink fixed", At: ago(time.Hour)}},
		},
	}
}

func TestTable_ShowsEachKindsColumns(t *testing.T) {
	tests := []struct {
		name string
		want [][]string // cells of each line, header first
	}{
		{"intents", [][]string{
			{"KIND", "NAME", "STATUS", "SOURCE", "UPDATED"},
			{"Layer2Network", "tenant-a", "active", "api", "1m30s"},
			{"RoutingTable", "mgmt", "deleting", "gitops:tenant-a.yaml", "3h"},
		}},
		{"revisions", [][]string{
			{"ID", "INTENTS", "CREATED", "HEAD", "SOURCE"},
			{"bbbbbbbbbbbb", "1", "1m", "*", "(generation", "7)", "git", "registry", "gitops", "commit", "0123456789ab", "(Ada", "Admin:", "add", "red)"},
			{"aaaaaaaaaaaa", "2", "2d", "-"},
		}},
		{"nodes", [][]string{
			{"NODE", "PRESENT", "LABELS", "PHASE", "FINGERPRINT", "REVISION", "MESSAGE", "LAST-UPDATE"},
			{"node-01", "yes", "zone=zone-a", "Provisioned", "cccccccccccc", "aaaaaaaaaaaa", "applied", "5s"},
			{"node-02", "yes", "rack=rack-1,zone=zone-b", "-", "-", "-", "-", "2s"},
			{"node-03", "no", "-", "Invalid", "cccccccccccc", "bbbbbbbbbbbb", "ping", "10.0.0.1", "failed:", "100%", "loss", "10m"},
		}},
		{"rollouts", [][]string{
			{"ID", "REVISION", "PHASE", "PROVISIONED/TOTAL", "FAILED", "SKIPPED", "OTHER", "REVERTED", "STARTED", "DURATION", "REASON"},
			{"2-bbbbbbbbbbbb", "(active)", "bbbbbbbbbbbb", "Progressing", "4/10", "1", "0", "pending", "3,", "in", "progress", "2", "0", "30s", "30s", "head", "moved"},
			{"1-aaaaaaaaaaaa", "aaaaaaaaaaaa", "RolledBack", "2/10", "3", "1", "stopped", "in", "flight", "1,", "not", "started", "3", "4", "60m", "2m", "node-03", "failed"},
		}},
		{"history", [][]string{
			{"GEN", "ROLLOUT", "REVISION", "OUTCOME", "STARTED", "DURATION", "PROVISIONED/TOTAL", "FAILED", "OTHER", "REVERTED", "REASON"},
			{"1", "1-aaaaaaaaaaaa", "aaaaaaaaaaaa", "Succeeded", "(in", "force)", "120m", "2m", "10/10", "0", "-", "0", "all", "10", "nodes", "provisioned"},
			{"2", "2-bbbbbbbbbbbb", "bbbbbbbbbbbb", "RolledBack", "60m", "2m", "2/10", "3", "stopped", "in", "flight", "1,", "not", "started", "4", "4", "node-03", "failed"},
			{"from", "git", "registry", "gitops", "commit", "0123456789ab", "(Ada", "Admin:", "add", "red)"},
			{"wave", "1,", "zone", "a", "ended", "60m", "1m0s", "2/2", "0", "-"},
			{"wave", "2,", "nodes", "without", "zone", "stopped", "59m", "-", "0/3", "3", "-"},
			{"3", "3-aaaaaaaaaaaa", "aaaaaaaaaaaa", "Progressing", "(running)", "30s", "30s", "4/10", "0", "pending", "4,", "in", "progress", "2", "0", "head", "moved"},
		}},
		{"fingerprints", [][]string{
			{"FINGERPRINT", "REVISION", "ROLLOUT", "NODE", "CAUSE", "CHECK", "TIME", "FORGIVEN", "OUTPUT"},
			append([]string{"cccccccccccc", "bbbbbbbbbbbb", "2-bbbbbbbbbbbb", "node-03", "timed-out", "ping", "4m", "-"}, strings.Fields(strings.Repeat("timeout ", 6)+"t…")...),
			append([]string{"dddddddddddd", "aaaaaaaaaaaa", "1-aaaaaaaaaaaa", "node-01", "check-failed", "ping", "120m", "by", "ops@laptop", "60m", "ago:", "uplink", "fixed"},
				"100%", "loss"),
		}},
	}
	fixtures := tableFixtures()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printListing(&out, fixtures[tt.name], nil, formatTable, now); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(tt.want), out.String())
			}
			for i, line := range lines {
				if got := strings.Fields(line); strings.Join(got, "|") != strings.Join(tt.want[i], "|") {
					t.Errorf("line %d:\n got %q\nwant %q\n%s", i, got, tt.want[i], out.String())
				}
			}
			// Columns are aligned: every header starts where its cells start.
			header := lines[0]
			second := tt.want[0][1]
			col := strings.Index(header, second)
			for _, line := range lines[1:] {
				if col < len(line) && strings.TrimSpace(line[:col+1]) == "" {
					continue // a line of the last column alone (history's source line)
				}
				if col > len(line) || line[col-1] != ' ' || line[col] == ' ' {
					t.Errorf("column %s not aligned at %d in %q", second, col, line)
				}
			}
		})
	}
}

func TestTable_EmptyListingPrintsOnlyTheHeader(t *testing.T) {
	var out bytes.Buffer
	if err := printListing(&out, intentList(nil), nil, formatTable, now); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out.String()); strings.Join(got, " ") != "KIND NAME STATUS SOURCE UPDATED" {
		t.Errorf("got %q", out.String())
	}
}

// decodeList reads -o json or -o yaml output back into messages of the listed kind.
func decodeList[T proto.Message](t *testing.T, format string, out []byte, newT func() T) []T {
	t.Helper()
	if format == formatYAML {
		var err error
		if out, err = yaml.YAMLToJSON(out); err != nil {
			t.Fatalf("yaml: %v", err)
		}
	}
	var o view.List
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("not a JSON list object: %v\n%s", err, out)
	}
	items := make([]T, 0, len(o.Items))
	for _, r := range o.Items {
		v := newT()
		if err := store.Unmarshal(r, v); err != nil {
			t.Fatalf("item %s: %v", r, err)
		}
		items = append(items, v)
	}
	return items
}

func TestOutput_JSONAndYAMLRoundTripTheStoredObjects(t *testing.T) {
	f := tableFixtures()
	for _, format := range []string{formatJSON, formatYAML} {
		t.Run(format, func(t *testing.T) {
			print := func(l listing) []byte {
				var out bytes.Buffer
				if err := printListing(&out, l, nil, format, now); err != nil {
					t.Fatal(err)
				}
				return out.Bytes()
			}
			equal := func(kind string, got, want []proto.Message) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: got %d items, want %d", kind, len(got), len(want))
				}
				for i := range got {
					if !proto.Equal(got[i], want[i]) {
						t.Errorf("%s[%d]: got %v, want %v", kind, i, got[i], want[i])
					}
				}
			}
			intents := f["intents"].(intentList)
			equal("intents", asMessages(decodeList(t, format, print(intents), func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })), asMessages(intents))
			revs := f["revisions"].(revisionList)
			equal("revisions", asMessages(decodeList(t, format, print(revs), func() *sluicev1.Revision { return &sluicev1.Revision{} })), asMessages(revs.items))
			rollouts := f["rollouts"].(rolloutList)
			equal("rollouts", asMessages(decodeList(t, format, print(rollouts), func() *sluicev1.Rollout { return &sluicev1.Rollout{} })), asMessages(rollouts.items))
			fps := f["fingerprints"].(fingerprintList)
			equal("fingerprints", asMessages(decodeList(t, format, print(fps), func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })), asMessages(fps))

			// A node is {node, present, presence, status}, the last two protojson.
			nodes := f["nodes"].(nodeList)
			out := print(nodes)
			if format == formatYAML {
				var err error
				if out, err = yaml.YAMLToJSON(out); err != nil {
					t.Fatal(err)
				}
			}
			var list struct{ Items []view.NodeObject }
			if err := json.Unmarshal(out, &list); err != nil {
				t.Fatal(err)
			}
			objs := list.Items
			if len(objs) != len(nodes) {
				t.Fatalf("nodes: got %d, want %d", len(objs), len(nodes))
			}
			for i, o := range objs {
				n := nodes[i]
				if o.Node != n.Name || o.Present != (n.Presence != nil) {
					t.Errorf("node %d: got %s present=%v, want %s present=%v", i, o.Node, o.Present, n.Name, n.Presence != nil)
				}
				if n.Status != nil {
					st := &sluicev1.NodeStatus{}
					if err := store.Unmarshal(o.Status, st); err != nil || !proto.Equal(st, n.Status) {
						t.Errorf("node %s status: got %v (%v), want %v", n.Name, st, err, n.Status)
					}
				} else if o.Status != nil {
					t.Errorf("node %s: status %s, want none", n.Name, o.Status)
				}
				if n.Presence != nil {
					p := &sluicev1.NodePresence{}
					if err := store.Unmarshal(o.Presence, p); err != nil || !proto.Equal(p, n.Presence) {
						t.Errorf("node %s presence: got %v (%v), want %v", n.Name, p, err, n.Presence)
					}
				}
			}
		})
	}
}

func TestOutput_EmptyListIsAnEmptyList(t *testing.T) {
	tests := []struct{ format, want string }{
		{formatJSON, "{\n  \"items\": [],\n  \"unreadable\": []\n}\n"},
		{formatYAML, "items: []\nunreadable: []\n"},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var out bytes.Buffer
			if err := printListing(&out, rolloutList{}, nil, tt.format, now); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("got %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func asMessages[T proto.Message](xs []T) []proto.Message {
	out := make([]proto.Message, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		given time.Duration
		want  string
	}{
		{-time.Second, "0s"},
		{59 * time.Second, "59s"},
		{90 * time.Second, "1m30s"},
		{5 * time.Minute, "5m"},
		{45 * time.Minute, "45m"},
		{5 * time.Hour, "5h"},
		{72 * time.Hour, "3d"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := humanDuration(tt.given); got != tt.want {
				t.Errorf("humanDuration(%s) = %q, want %q", tt.given, got, tt.want)
			}
		})
	}
}

func TestStageTook_NeverZeroOrNegative(t *testing.T) {
	tests := []struct {
		given time.Duration
		want  string
	}{
		{-3 * time.Second, "-"}, // ended by another coordinator's clock
		{0, "<1s"},
		{400 * time.Millisecond, "<1s"},
		{600 * time.Millisecond, "1s"},
		{90 * time.Second, "1m30s"},
	}
	for _, tt := range tests {
		if got := stageTook(tt.given); got != tt.want {
			t.Errorf("stageTook(%s) = %q, want %q", tt.given, got, tt.want)
		}
	}
}

func TestStageLine_BakingNeverFor0s(t *testing.T) {
	r := &sluicev1.Rollout{Wave: 2, BakeUntil: timestamppb.New(now.Add(300 * time.Millisecond))}
	if got, want := stageLine(r, now), "wave 2, baking for 1s"; got != want {
		t.Errorf("stageLine = %q, want %q", got, want)
	}
}

func TestStageLine_WaitingForTheWindow(t *testing.T) {
	r := &sluicev1.Rollout{Wave: 1, Waiting: "waiting for the window Mon-Fri 09:00-16:00 Europe/Berlin",
		WaitingUntil: timestamppb.New(now.Add(2*time.Hour + 10*time.Minute + 20*time.Second))}
	if got, want := stageLine(r, now), "wave 1, waiting for the window Mon-Fri 09:00-16:00 Europe/Berlin (opens in 2h10m)"; got != want {
		t.Errorf("stageLine = %q, want %q", got, want)
	}
}

func TestApplyFlags_WindowNamesTheFlag(t *testing.T) {
	var f strategyFlags
	fs := pflag.NewFlagSet("apply", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--window", "Mon-Fri 09:00-16:00 Europe/Berlin", "--window", "Sat 25:00-26:00"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.strategy(fs)
	if err == nil || !strings.Contains(err.Error(), `--window: "Sat 25:00-26:00": time "25:00"`) {
		t.Fatalf("error %v; want one naming --window and the bad time", err)
	}
	if err := fs.Parse([]string{"--window", "Sat 10:00-11:00"}); err != nil {
		t.Fatal(err)
	}
	f.windows = []string{"Mon-Fri 09:00-16:00 Europe/Berlin", "Sat 10:00-11:00"}
	st, err := f.strategy(fs)
	if err != nil || len(st.GetWindows()) != 2 {
		t.Fatalf("strategy %v, %v; want both windows", st, err)
	}
}

// get nodes' REVISION is the revision in force for a node that runs the
// config it gives the node: a node the last rollout did not change (its
// config is the same under it) showed the revision that last changed it.
func TestGetNodes_Revision_IsTheRevisionInForceForANodeItDidNotChange(t *testing.T) {
	s := startSystem(t, 2) // node-01 in zone-a, node-02 in zone-b
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	if code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("first rollout: exit %d\n%s%s", code, out, stderr)
	}
	zoneA := "---\nkind: Layer2Network\nname: zone-a-only\nspec: {vlan: 300, vni: 10300, nodeSelector: {matchLabels: {zone: zone-a}}}\n"
	code, out, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "b.yaml", tenantA+zoneA))
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	// node-02 already runs what generation 2 gives it: nothing is written to it.
	if code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("second rollout: exit %d\n%s%s", code, out, stderr)
	}
	_, out, _ = sluice(t, s.URL(), "get", "revisions")
	head := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, f[0]) && strings.Contains(line, "* (generation 2)") {
			head = f[0]
		}
	}
	if head == "" {
		t.Fatalf("no head at generation 2 in get revisions:\n%s", out)
	}
	_, out, _ = sluice(t, s.URL(), "get", "nodes")
	for _, node := range []string{"node-01", "node-02"} {
		var row []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == node {
				row = f
			}
		}
		if len(row) < 6 || !strings.HasPrefix(head, row[5]) {
			t.Errorf("%s: %q; want REVISION %s, the revision in force\n%s", node, row, short(head), out)
		}
	}
}
