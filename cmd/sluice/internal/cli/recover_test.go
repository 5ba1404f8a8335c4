package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// configs reads every agent's config file (what the file applier put in
// force on the node).
// startDev starts sluice dev with opts, stopped when the test ends.
func startDev(t *testing.T, opts dev.Options) *dev.System {
	t.Helper()
	s, err := dev.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// lastAppliedIs tells whether rollouts/last-applied at *url (read at each
// call: a restart moves it) is of head generation gen.
func lastAppliedIs(t *testing.T, url *string, gen uint64) func() bool {
	return func() bool {
		ref := store.New(openBuckets(t, *url).Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
		e, err := ref.Get(context.Background(), contract.KeyLastApplied)
		return err == nil && e.Value.GetGeneration() == gen
	}
}

// wipeStoreAndStart removes only the JetStream store of the stopped sluice
// dev at data (the agents keep their state dirs) and starts it again.
func wipeStoreAndStart(t *testing.T, data string, opts dev.Options) *dev.System {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(data, "nats")); err != nil {
		t.Fatal(err)
	}
	return startDev(t, opts)
}

func configs(t *testing.T, data string, nodes []string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(data, "agents", n, "config.json"))
		if err != nil {
			t.Fatalf("config of %s: %v", n, err)
		}
		out[n] = b
	}
	return out
}

// Disaster recovery, end to end (docs/operations.md, "Disaster recovery"):
// a rollout, a stop, the JetStream store directory wiped, a restart with
// the agents keeping their state. Invariant I10: no examples are applied,
// no node's config changes, the situation is reported, an apply is
// refused; `sluice recover --confirm-empty` is the way out, audited, and
// the next revision then reconfigures the nodes.
func TestDisasterRecovery_StoreWipedUnderRunningAgents_NothingStartsUntilConfirmed(t *testing.T) {
	data, exDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(tenantA), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Examples: exDir, MaxParallel: "3", Stderr: io.Discard}
	s := startDev(t, opts)
	url := s.URL()
	// margin: each poll ends as soon as the rollout is done; 60s is many
	// times what three local agents take on a loaded machine.
	lastApplied := func(gen uint64) func() bool { return lastAppliedIs(t, &url, gen) }
	natstest.Eventually(t, 60*time.Second, "the examples rolled out", lastApplied(1))
	// The operator's change: the examples' mgmt table goes.
	if code, _, stderr := sluice(t, url, "delete", "routingtable", "mgmt"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "the operator's change rolled out", lastApplied(2))
	head, err := store.New(openBuckets(t, url).Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	headRev := head.Value.GetRevision()
	nodes := s.Nodes()
	before := configs(t, data, nodes)
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Only the JetStream store goes; the agents keep their state dirs.
	// With the dashboard this time: its banner says it too.
	a := &app{streams: Streams{Out: io.Discard, Err: io.Discard}, version: "test", now: time.Now}
	opts.Dashboard = a.devDashboard(dashboardFlags{addr: "127.0.0.1:0", groupBy: "zone,rack"})
	s = wipeStoreAndStart(t, data, opts)
	url = s.URL()

	situation := "the store is empty but 3 nodes run configs of revision " + render.Short(headRev)
	if seed := s.Seeded(); seed.Intents != 0 || !strings.Contains(seed.Held, situation) {
		t.Errorf("restart seeded %+v, want no examples held by %q", seed, situation)
	}
	if b := s.Banner(); !strings.Contains(b, "examples  not applied") || !strings.Contains(b, situation) || !strings.Contains(b, "sluice recover --confirm-empty") {
		t.Errorf("banner does not report the lost store:\n%s", b)
	}
	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(s.DashboardURL()))
	evalUntil(t, tab, 15*time.Second, "the dashboard's banner to name the lost store",
		`(() => { const b = document.getElementById('store-loss'); return !b.hidden && b.textContent.includes(`+"`"+situation+"`"+`) && b.textContent.includes('sluice recover --confirm-empty'); })()`)
	// An apply of a partial set would become every node's whole config.
	partial := writeFile(t, "partial.yaml", "kind: RoutingTable\nname: lab\nspec: {tableId: 42}\n")
	code, _, stderr := sluice(t, url, "apply", "-f", partial)
	if code == 0 || !strings.Contains(stderr, situation) || !strings.Contains(stderr, "nothing was stored") {
		t.Errorf("apply on the lost store: exit %d, stderr %q; want refused naming %q", code, stderr, situation)
	}
	code, stdout, _ := sluice(t, url, "get", "nodes")
	if code != 0 || !strings.Contains(stdout, situation) || !strings.Contains(stdout, render.Short(headRev)) || strings.Contains(stdout, "never") {
		t.Errorf("get nodes: exit %d:\n%s\nwant each node's revision %s and the situation", code, stdout, render.Short(headRev))
	}
	if code, _, stderr := sluice(t, url, "rollout", "status"); code != ExitUnreadable || !strings.Contains(stderr, situation) {
		t.Errorf("rollout status: exit %d, stderr %q; want exit %d naming the situation", code, stderr, ExitUnreadable)
	}
	if code, stdout, _ := sluice(t, url, "describe", "node", nodes[0]); code != 0 || strings.Contains(stdout, "never been configured") ||
		!strings.Contains(stdout, "Runs:") {
		t.Errorf("describe node: exit %d:\n%s", code, stdout)
	}
	// Nothing was started: no head, no rollout, and every node runs what it ran.
	b := openBuckets(t, url)
	if _, err := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("head after the wipe: %v, want none", err)
	}
	keys, err := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !contract.IsControlKey(k) { // the coordinator's term fence is no rollout
			t.Errorf("rollout record %s after the wipe, want none", k)
		}
	}
	time.Sleep(time.Second) // the old code's rollout took 0.3 s: give a wrong one the time to show
	for n, b := range configs(t, data, nodes) {
		if !bytes.Equal(b, before[n]) {
			t.Errorf("node %s's config changed after the wipe:\n%s\nwas\n%s", n, b, before[n])
		}
	}

	// The way out: the operator says the empty store is what they want.
	code, stdout, stderr = sluice(t, url, "recover", "--confirm-empty", "--reason", "store disk replaced")
	if code != 0 || !strings.Contains(stdout, "confirmed") {
		t.Fatalf("recover --confirm-empty: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := sluice(t, url, "recover", "--confirm-empty"); code != 1 || !strings.Contains(stderr, "not lost") {
		t.Errorf("a second confirm: exit %d, %q; want 1, not lost", code, stderr)
	}
	code, stdout, _ = sluice(t, url, "events", "--kind", "store")
	if code != 0 || !strings.Contains(stdout, contract.EventStoreLossConfirmed) || !strings.Contains(stdout, "store disk replaced") {
		t.Errorf("events --kind store: exit %d:\n%s\nwant %s with the reason", code, stdout, contract.EventStoreLossConfirmed)
	}
	// margin: the dashboard asks every 5 s.
	evalUntil(t, tab, 20*time.Second, "the banner to go once confirmed", `document.getElementById('store-loss').hidden`)
	// The next revision reconfigures the nodes: it is their whole config.
	if code, _, stderr := sluice(t, url, "apply", "-f", exDir); code != 0 {
		t.Fatalf("apply after the confirmation: exit %d: %s", code, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "the new revision rolled out", lastApplied(1))
}

// The other way out: a backup taken at rest is restored into the wiped
// store; the control plane carries on where it was, nothing is rolled out
// again and no node's config changes.
func TestDisasterRecovery_RestoreABackup_CarriesOnWhereItWas(t *testing.T) {
	data, exDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(tenantA), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Examples: exDir, MaxParallel: "3", Stderr: io.Discard}
	s := startDev(t, opts)
	url := s.URL()
	lastApplied := func() *sluicev1.RolloutRef {
		e, err := store.New(openBuckets(t, url).Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Get(context.Background(), contract.KeyLastApplied)
		if err != nil {
			return nil
		}
		return e.Value
	}
	// margin: each poll ends as soon as the rollout is done.
	natstest.Eventually(t, 60*time.Second, "the examples rolled out", func() bool { return lastApplied().GetGeneration() == 1 })
	older := filepath.Join(t.TempDir(), "older.json")
	if code, stdout, stderr := sluice(t, url, "backup", older); code != 0 {
		t.Fatalf("backup: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := sluice(t, url, "delete", "routingtable", "mgmt"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "the operator's change rolled out", func() bool { return lastApplied().GetGeneration() == 2 })
	want := lastApplied()
	file := filepath.Join(t.TempDir(), "backup.json")
	if code, stdout, stderr := sluice(t, url, "backup", file); code != 0 {
		t.Fatalf("backup: exit %d: %s%s", code, stdout, stderr)
	}
	rolloutKeys := func() []string {
		keys, err := store.New(openBuckets(t, url).Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Keys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			if !contract.IsControlKey(k) {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	records := rolloutKeys()
	nodes := s.Nodes()
	before := configs(t, data, nodes)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s = wipeStoreAndStart(t, data, opts)
	url = s.URL()

	// A damaged file is refused, and nothing is written.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := writeFile(t, "damaged.json", strings.Replace(string(b), `"eventsLastSeq": `, `"eventsLastSeq": 1`, 1))
	if code, _, stderr := sluice(t, url, "restore", damaged); code != 1 || !strings.Contains(stderr, "damaged") {
		t.Errorf("restore of a damaged file: exit %d, %q; want 1, damaged", code, stderr)
	}
	// A backup older than what the fleet runs would reconfigure it at once.
	if code, _, stderr := sluice(t, url, "restore", older); code != 1 || !strings.Contains(stderr, "the backup is not what the fleet runs") ||
		!strings.Contains(stderr, nodes[0]+" runs ") {
		t.Errorf("restore of an older backup: exit %d, %q; want 1, naming the nodes", code, stderr)
	}
	if code, stdout, stderr := sluice(t, url, "restore", file); code != 0 || !strings.Contains(stdout, "restored") {
		t.Fatalf("restore: exit %d: %s%s", code, stdout, stderr)
	}
	if got := lastApplied(); got.GetRollout() != want.GetRollout() || got.GetRevision() != want.GetRevision() {
		t.Errorf("last-applied after the restore %v, want %v", got, want)
	}
	if code, stdout, stderr := sluice(t, url, "get", "nodes"); code != 0 || strings.Contains(stdout, "store is empty") {
		t.Errorf("get nodes after the restore: exit %d:\n%s%s", code, stdout, stderr)
	}
	// A restore is not a rollout: give a wrong one the time to show.
	time.Sleep(2 * time.Second)
	if got := rolloutKeys(); !slices.Equal(got, records) {
		t.Errorf("rollout records after the restore %v, want the backup's %v", got, records)
	}
	for n, b := range configs(t, data, nodes) {
		if !bytes.Equal(b, before[n]) {
			t.Errorf("node %s's config changed by the restore:\n%s\nwas\n%s", n, b, before[n])
		}
	}
	code, stdout, _ := sluice(t, url, "events", "--kind", "store")
	if code != 0 || !strings.Contains(stdout, contract.EventStoreRestored) {
		t.Errorf("events --kind store: exit %d:\n%s", code, stdout)
	}
	// The events continue after the backup's last sequence.
	var bf struct {
		EventsLastSeq uint64 `json:"eventsLastSeq"`
	}
	if err := json.Unmarshal(b, &bf); err != nil {
		t.Fatal(err)
	}
	nc, js, err := (&app{server: url}).jetStream()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := js.Stream(context.Background(), contract.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.FirstSeq <= bf.EventsLastSeq {
		t.Errorf("events stream after the restore: %+v (%v), want its first sequence after the backup's last, %d", info.State, err, bf.EventsLastSeq)
	}
	// The control plane carries on: the next change rolls out as generation 3.
	if code, _, stderr := sluice(t, url, "apply", "-f", exDir); code != 0 {
		t.Fatalf("apply after the restore: exit %d: %s", code, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "generation 3 rolled out", func() bool { return lastApplied().GetGeneration() == 3 })
}

// The third way out: the intents rebuilt from what the nodes run. After the
// wipe `recover --from-nodes` writes one file per intent, each with the
// labels its nodes share as its selector; applied after --confirm-empty
// they roll out a revision that leaves every node's config as it was. While
// the store is not lost it refuses, writing nothing.
func TestDisasterRecovery_FromNodes_RebuiltIntentsLeaveEveryNodeAsItWas(t *testing.T) {
	data, exDir := t.TempDir(), t.TempDir()
	// node-01 is zone-a, node-02 zone-b, node-03 zone-c; all rack-1.
	intents := tenantA + `---
kind: RoutingTable
name: storage
spec: {tableId: 20, nodeSelector: {matchLabels: {zone: zone-b}}}
---
kind: Layer2Network
name: tenant-z
spec: {vlan: 300, vni: 10300, nodeSelector: {matchLabels: {zone: zone-a}}}
`
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(intents), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Examples: exDir, MaxParallel: "3", Stderr: io.Discard}
	s := startDev(t, opts)
	url := s.URL()
	lastApplied := func(gen uint64) func() bool { return lastAppliedIs(t, &url, gen) }
	// margin: each poll ends as soon as the rollout is done.
	natstest.Eventually(t, 60*time.Second, "the intents rolled out", lastApplied(1))
	out := filepath.Join(t.TempDir(), "recovered")
	if code, _, stderr := sluice(t, url, "recover", "--from-nodes", "--out", out); code != 1 || !strings.Contains(stderr, "not lost") {
		t.Errorf("recover --from-nodes on a whole store: exit %d, %q; want 1, not lost", code, stderr)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("recover --from-nodes on a whole store wrote %s (%v)", out, err)
	}
	nodes := s.Nodes()
	inForce := func() map[string]*sluicev1.DesiredConfig {
		got := map[string]*sluicev1.DesiredConfig{}
		for n, b := range configs(t, data, nodes) {
			cfg := &sluicev1.DesiredConfig{}
			if err := store.Unmarshal(b, cfg); err != nil {
				t.Fatalf("config of %s: %v", n, err)
			}
			got[n] = cfg
		}
		return got
	}
	before := inForce()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s = wipeStoreAndStart(t, data, opts)
	url = s.URL()

	var code int
	var stdout, stderr string
	// margin: the store is lost once the agents' presence is back, at start.
	natstest.Eventually(t, 30*time.Second, "recover --from-nodes to write the intents", func() bool {
		code, stdout, stderr = sluice(t, url, "recover", "--from-nodes", "--out", out)
		return code == 0
	})
	for _, want := range []string{"asked 3 nodes with a live presence: 3 answered", "rebuilt 4 intents to " + out,
		"layer2network/tenant-z on node-01: selector rack=rack-1,zone=zone-a", "routingtable/mgmt on node-01, node-02, node-03: selector rack=rack-1",
		"the revision id will differ", "nothing was written to the store"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("recover --from-nodes says:\n%s%s\nwant %q", stdout, stderr, want)
		}
	}
	files, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Errorf("files written %v (%v), want one per intent, 4", files, err)
	}
	// Nothing was written to the store: it is still lost.
	if code, _, stderr := sluice(t, url, "rollout", "status"); code != ExitUnreadable || !strings.Contains(stderr, "the store is empty") {
		t.Errorf("rollout status after --from-nodes: exit %d, %q; want the store still lost", code, stderr)
	}
	// A second run into the same directory would mix two rebuilds.
	if code, _, stderr := sluice(t, url, "recover", "--from-nodes", "--out", out); code != 1 || !strings.Contains(stderr, "not empty") {
		t.Errorf("recover --from-nodes into a non-empty directory: exit %d, %q; want 1, not empty", code, stderr)
	}

	if code, stdout, stderr := sluice(t, url, "recover", "--confirm-empty", "--reason", "rebuilt from the nodes"); code != 0 {
		t.Fatalf("recover --confirm-empty: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := sluice(t, url, "apply", "-f", out); code != 0 {
		t.Fatalf("apply -f %s: exit %d: %s", out, code, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "the rebuilt intents rolled out", lastApplied(1))
	head, err := store.New(openBuckets(t, url).Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	if rev := head.Value.GetRevision(); rev == before[nodes[0]].GetRevision() {
		t.Errorf("the rebuilt intents' revision %s is the one lost; the summary says it differs", render.Short(rev))
	}
	for n, cfg := range inForce() {
		was := before[n]
		if cfg.GetFingerprint() != was.GetFingerprint() || !proto.Equal(cfg.GetConfig(), was.GetConfig()) {
			t.Errorf("node %s runs %s after the rebuilt intents, was %s:\n%v\nwas\n%v", n, short(cfg.GetFingerprint()), short(was.GetFingerprint()), cfg.GetConfig(), was.GetConfig())
		}
	}
}
