package reaper_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/reaper"
)

// setActive makes id the active rollout ("" deletes rollouts/active).
func (f *fleet) setActive(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	refs := store.New(f.env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	cur, err := refs.Get(ctx, contract.KeyActive)
	if id == "" {
		if err == nil {
			if err := refs.Delete(ctx, contract.KeyActive, cur.Revision); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if _, err := refs.Update(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: id, Revision: "rev-" + id}, cur.Revision); err != nil {
		t.Fatal(err)
	}
}

// putRaw stores b at key with compare-and-set, as a broken writer would.
func (f *fleet) putRaw(t *testing.T, bucket, key string, b []byte) {
	t.Helper()
	ctx := context.Background()
	kv, err := f.env.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := kv.Get(ctx, key); err == nil {
		_, err = kv.Update(ctx, key, b, cur.Revision())
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := kv.Create(ctx, key, b); err != nil {
		t.Fatal(err)
	}
}

// nodeEvents returns node's events of type typ.
func nodeEvents(t *testing.T, f *fleet, kind, id, typ string) []*sluicev1.Event {
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
		if err != nil || !slices.Contains(contract.EventFilterSubjects(kind, id), m.Subject) {
			continue
		}
		ev := &sluicev1.Event{}
		if err := store.Unmarshal(m.Data, ev); err != nil {
			t.Fatal(err)
		}
		if ev.GetType() == typ {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvents waits until want events of typ about id were published, and
// checks no more follow.
func waitEvents(t *testing.T, f *fleet, kind, id, typ string, want int) []*sluicev1.Event {
	t.Helper()
	var got []*sluicev1.Event
	natstest.Eventually(t, wait, typ+" events", func() bool {
		got = nodeEvents(t, f, kind, id, typ)
		return len(got) >= want
	})
	if len(got) != want {
		t.Fatalf("%d %s events about %s, want %d: %v", len(got), typ, id, want, got)
	}
	return got
}

// TestReaper_NodeOfTheActiveRollout_KeptUntilTheRolloutEnds covers issue 9
// item 9: a node whose agent stopped while its rollout baked lost its
// backup to the reaper and was later "reverted" to the empty config.
func TestReaper_NodeOfTheActiveRollout_KeptUntilTheRolloutEnds(t *testing.T) {
	tests := []struct {
		name    string
		desired *sluicev1.DesiredConfig
		active  string
		want    []string // keys left after two passes past grace
	}{
		{name: "desired of the active rollout", desired: formed(&sluicev1.DesiredConfig{Node: "gone", Fingerprint: "fp", Rollout: "7-aaaa"}), active: "7-aaaa",
			want: []string{"desired", "backup", "status"}},
		{name: "revert of the active rollout", desired: formed(&sluicev1.DesiredConfig{Node: "gone", Fingerprint: "fp-backup", Rollout: "7-aaaa", Revert: true}), active: "7-aaaa",
			want: []string{"desired", "backup", "status"}},
		{name: "desired of an older rollout", desired: formed(&sluicev1.DesiredConfig{Node: "gone", Fingerprint: "fp", Rollout: "6-bbbb"}), active: "7-aaaa"},
		{name: "no active rollout", desired: formed(&sluicev1.DesiredConfig{Node: "gone", Fingerprint: "fp", Rollout: "7-aaaa"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			f.seed(t, "gone")
			f.writeDesired(t, tt.desired)
			if tt.active != "" {
				f.setActive(t, tt.active)
			}
			r := f.newReaper(t, c)
			pass(t, r)
			c.Advance(grace + time.Second)
			pass(t, r)
			pass(t, r)
			wantKeys(t, f, "gone", tt.want...)
			if len(tt.want) == 0 {
				return
			}
			ev := waitEvents(t, f, "node", "gone", reaper.EventReapPostponed, 1)[0]
			if !strings.Contains(ev.GetReason(), "active rollout "+tt.active) {
				t.Errorf("reason %q does not name the active rollout", ev.GetReason())
			}

			f.setActive(t, "") // the rollout ends
			pass(t, r)
			wantKeys(t, f, "gone")
		})
	}
}

// writeDesired overwrites node's desired config.
func (f *fleet) writeDesired(t *testing.T, d *sluicev1.DesiredConfig) {
	t.Helper()
	ctx := context.Background()
	cur, err := f.configs.Get(ctx, contract.DesiredKey(d.GetNode()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.configs.Update(ctx, contract.DesiredKey(d.GetNode()), d, cur.Revision); err != nil {
		t.Fatal(err)
	}
}

// TestReaper_UnreadableValue_NodeKeptAndReportedOnce: a departed node with
// a key the reaper cannot read keeps all its keys (the value might be
// referenced), reported once with bucket and key; other nodes are reaped.
func TestReaper_UnreadableValue_NodeKeptAndReportedOnce(t *testing.T) {
	tests := []struct {
		name   string
		bucket string
		key    string
	}{
		{name: "desired", bucket: contract.BucketNodeConfigs, key: contract.DesiredKey("bad")},
		{name: "backup", bucket: contract.BucketNodeConfigs, key: contract.BackupKey("bad")},
		{name: "status", bucket: contract.BucketStatus, key: "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			f.seed(t, "bad")
			f.seed(t, "gone")
			f.putRaw(t, tt.bucket, tt.key, []byte("garbage{"))
			r := f.newReaper(t, c)
			pass(t, r)
			c.Advance(grace + time.Second)
			pass(t, r)
			pass(t, r)
			wantKeys(t, f, "gone")
			if got := f.rawKeys(t, "bad"); got != 3 {
				t.Fatalf("%d keys of the node with an unreadable value left, want 3", got)
			}
			ev := waitEvents(t, f, contract.KindQuarantine, tt.bucket+"."+tt.key, events.TypeValueUnreadable, 1)[0]
			if !strings.Contains(ev.GetReason(), tt.bucket+"/"+tt.key) {
				t.Errorf("reason %q does not name %s/%s", ev.GetReason(), tt.bucket, tt.key)
			}
		})
	}
}

// rawKeys counts node's keys without decoding them.
func (f *fleet) rawKeys(t *testing.T, node string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for _, k := range []struct {
		bucket, key string
	}{{contract.BucketNodeConfigs, contract.DesiredKey(node)}, {contract.BucketNodeConfigs, contract.BackupKey(node)}, {contract.BucketStatus, node}} {
		kv, err := f.env.JS.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, k.key); err == nil {
			n++
		}
	}
	return n
}

// TestReaper_UnreadableActiveRollout_KeepsNodesWithADesiredConfig: without
// knowing the active rollout, only nodes with no desired config are reaped.
// A value of another type decodes as a pointer to no rollout: it is as
// unknown (it used to read as "no rollout is active").
func TestReaper_UnreadableActiveRollout_KeepsNodesWithADesiredConfig(t *testing.T) {
	for _, g := range garbage {
		t.Run(g.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			f.seed(t, "configured")
			if _, err := f.statuses.Create(context.Background(), "status-only", &sluicev1.NodeStatus{Node: "status-only"}); err != nil {
				t.Fatal(err)
			}
			f.putRaw(t, contract.BucketRollouts, contract.KeyActive, []byte(g.value))
			r := f.newReaper(t, c)
			pass(t, r)
			c.Advance(grace + time.Second)
			pass(t, r)
			pass(t, r)
			wantKeys(t, f, "configured", "desired", "backup", "status")
			wantKeys(t, f, "status-only")
			ev := waitEvents(t, f, contract.KindQuarantine, contract.BucketRollouts+"."+contract.KeyActive, events.TypeValueUnreadable, 1)[0]
			if !strings.Contains(ev.GetReason(), contract.BucketRollouts+"/"+contract.KeyActive) {
				t.Errorf("reason %q does not name the key", ev.GetReason())
			}
			waitEvents(t, f, "node", "configured", reaper.EventReapPostponed, 1)
		})
	}
}

// garbage is what a broken writer, a hand edit or another program leaves
// in a key: bytes that are not JSON, nothing at all, and a value of another
// type, which decodes (unknown fields are dropped) as an empty value.
var garbage = []struct{ name, value string }{
	{"not json", "{not json"},
	{"zero bytes", ""},
	{"a value of another type", `{"node":"n1","phase":"NODE_PHASE_PROVISIONED","fingerprint":"abc"}`},
}

// TestReaper_ControlKeys_NeverReaped: "_fence" and other "_" keys are the
// coordinator's, not a node's.
func TestReaper_ControlKeys_NeverReaped(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, b := range []string{contract.BucketNodeConfigs, contract.BucketStatus, contract.BucketRollouts} {
		f.putRaw(t, b, contract.KeyFence, []byte(`{"leaderEpoch": "3"}`))
	}
	f.putRaw(t, contract.BucketNodeConfigs, "_other.desired", []byte(`{}`))
	r := f.newReaper(t, c)
	pass(t, r)
	c.Advance(grace + time.Second)
	pass(t, r)
	ctx := context.Background()
	for _, k := range []struct{ bucket, key string }{
		{contract.BucketNodeConfigs, contract.KeyFence}, {contract.BucketStatus, contract.KeyFence},
		{contract.BucketRollouts, contract.KeyFence}, {contract.BucketNodeConfigs, "_other.desired"},
	} {
		kv, err := f.env.JS.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, k.key); err != nil {
			t.Errorf("%s/%s: %v, want kept", k.bucket, k.key, err)
		}
	}
}

// More than the guard's share of the fleet departing at once is held (an
// outage looks like that): nothing is deleted, one event says why, until
// an operator confirms nodes; a confirmation spent is removed.
func TestReaper_MassDeparture_HeldUntilConfirmed(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, n := range []string{"a", "b", "c", "d"} {
		f.seed(t, n)
	}
	f.arrive(t, "d")
	reg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, Now: c.Now, Grace: grace, HoldShare: 0.5,
		Metrics: reaper.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	held := func() float64 {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, "sluice_reaper_held_nodes")
		if err != nil || n != 1 {
			t.Fatalf("sluice_reaper_held_nodes: %d series, %v", n, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_reaper_held_nodes" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	pass(t, r)
	c.Advance(grace + time.Second)
	pass(t, r)
	pass(t, r)
	for _, n := range []string{"a", "b", "c"} {
		wantKeys(t, f, n, "desired", "backup", "status") // 3 of 4 departed: held
	}
	if got := held(); got != 3 {
		t.Errorf("sluice_reaper_held_nodes = %v while a, b and c are held; want 3", got)
	}
	ev := waitEvents(t, f, contract.KindInstance, contract.InstanceKey(reaper.Component, r.Instance()), reaper.EventReapHeld, 1)[0]
	if !strings.Contains(ev.GetReason(), "3 of the 4 nodes with keys departed") || !strings.Contains(ev.GetReason(), "held: a, b, c") ||
		!strings.Contains(ev.GetReason(), "sluice reaper confirm") {
		t.Errorf("reason %q; want the counts, the held nodes and what to do", ev.GetReason())
	}

	confirms := store.New(f.env.Buckets.Control, func() *sluicev1.ReapConfirm { return &sluicev1.ReapConfirm{} })
	if _, err := confirms.Create(context.Background(), contract.KeyReapConfirm, &sluicev1.ReapConfirm{Nodes: []string{"a", "b"}, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	pass(t, r)
	wantKeys(t, f, "a")
	wantKeys(t, f, "b")
	wantKeys(t, f, "c", "desired", "backup", "status") // not confirmed: still held
	if got := held(); got != 1 {
		t.Errorf("sluice_reaper_held_nodes = %v once a and b were confirmed; want 1 (c)", got)
	}
	pass(t, r)
	if _, err := confirms.Get(context.Background(), contract.KeyReapConfirm); err == nil {
		t.Fatal("the spent confirmation was kept")
	}
}
