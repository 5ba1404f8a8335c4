package rollout

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The state keeps small structs instead of the decoded values (facts.go):
// whatever it writes back from them must be the value it read.
func TestDesired_WritesBackWhatItRead(t *testing.T) {
	rev := testRev("aaaa1111")
	cfg := render0(rev)
	fp := render.Fingerprint(cfg)
	id := rolloutID(head(1, rev.Id, ""))
	at := timestamppb.New(t0)
	full := func(op string, edit func(d *sluicev1.DesiredConfig)) *sluicev1.DesiredConfig {
		d := &sluicev1.DesiredConfig{Node: "n1", Revision: rev.Id, Rollout: id, Fingerprint: fp, Config: cfg, WrittenAt: at,
			LeaderEpoch: 7, Operation: op, Deadline: durationpb.New(90 * time.Second)}
		if edit != nil {
			edit(d)
		}
		return d
	}
	tests := []struct {
		name  string
		given *sluicev1.DesiredConfig
	}{
		{"an apply", full(contract.OperationID(id, "n1", contract.OpApply), nil)},
		{"a revert", full(contract.OperationID(id, "n1", contract.OpRevert), func(d *sluicev1.DesiredConfig) { d.Revert = true })},
		{"a node configured outside a rollout", full(contract.ConfigureOperationID(fp), func(d *sluicev1.DesiredConfig) { d.Rollout = "" })},
		{"an operation id of another node's", full(contract.OperationID(id, "n2", contract.OpApply), nil)},
		{"an operation id of another form", full("made/up", nil)},
		{"no operation id", full("", nil)},
		{"a proven backup, cancelled", full(contract.OperationID(id, "n1", contract.OpApply), func(d *sluicev1.DesiredConfig) {
			d.Proven, d.Cancel = true, true
		})},
		{"no time, deadline or config", &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "old", Revision: "r0"}},
		{"a zero time and deadline", full("", func(d *sluicev1.DesiredConfig) {
			d.WrittenAt, d.Deadline = &timestamppb.Timestamp{}, &durationpb.Duration{}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			if got := s.keepDesired(tt.given).message("n1"); !proto.Equal(got, tt.given) {
				t.Errorf("written back:\n got %v\nwant %v", got, tt.given)
			}
		})
	}
}

func TestReport_KeepsWhyOnlyForAnInvalidReport(t *testing.T) {
	s := NewState()
	li := &sluicev1.InvalidReport{Fingerprint: "fp0", Rollout: "r", Check: "ping", At: timestamppb.New(t0)}
	bad := &sluicev1.NodeStatus{Node: "n1", Phase: invalid, Fingerprint: "fp1", Rollout: "r", Revision: "rev",
		FailedCheck: "ping", CheckOutput: "100% loss", Message: "ping failed", LastInvalid: li}
	r := s.keepReport(bad)
	if r.GetPhase() != invalid || r.GetFingerprint() != "fp1" || r.GetRollout() != "r" || r.GetRevision() != "rev" ||
		r.GetFailedCheck() != "ping" || r.GetCheckOutput() != "100% loss" || r.GetMessage() != "ping failed" || r.GetLastInvalid() != li {
		t.Errorf("an Invalid report kept as %+v (failed %+v)", r, r.failed)
	}
	good := proto.Clone(bad).(*sluicev1.NodeStatus)
	good.Phase = provisioned
	if r := s.keepReport(good); r.failed != nil || r.GetLastInvalid().GetCheck() != "ping" {
		t.Errorf("a Provisioned report kept as %+v (failed %+v); want no why, and the Invalid report it carries", r, r.failed)
	}
	var none *report
	if none.GetPhase() != sluicev1.NodePhase_NODE_PHASE_UNSPECIFIED || none.GetMessage() != "" || none.GetLastInvalid() != nil {
		t.Error("no report must read as an empty status")
	}
}

// Nodes of equal labels share one label set and what it renders to; equal
// fingerprints share one config, but only an equal one.
func TestState_SharesWhatNodesHaveInCommon(t *testing.T) {
	rev := testRev("aaaa1111")
	s := NewState()
	a, b, c := s.nodeOf("a"), s.nodeOf("b"), s.nodeOf("c")
	s.setLabels(a, map[string]string{"zone": "a", "rack": "1"})
	s.setLabels(b, map[string]string{"rack": "1", "zone": "a"})
	s.setLabels(c, map[string]string{"zone": "b"})
	if a.labels != b.labels || a.labels == c.labels || a.labels.refs != 2 {
		t.Fatalf("label sets: a %p, b %p, c %p (a's refs %d); want a and b to share one", a.labels, b.labels, c.labels, a.labels.refs)
	}
	fa, ca := s.renderFor(rev, a)
	fb, cb := s.renderFor(rev, b)
	if fa != targetOf(rev) || fb != fa || ca != cb {
		t.Errorf("a and b render to %s (%p) and %s (%p); want one config, %s", fa, ca, fb, cb, targetOf(rev))
	}
	// A label change leaves the old set to the nodes still holding it.
	s.setLabels(b, map[string]string{"zone": "b"})
	if b.labels != c.labels || a.labels.refs != 1 || len(s.labelSets) != 2 {
		t.Errorf("after b's move: b %p, c %p, a's refs %d, %d sets; want b with c", b.labels, c.labels, a.labels.refs, len(s.labelSets))
	}
	s.setLabels(a, map[string]string{"zone": "b"})
	if len(s.labelSets) != 1 {
		t.Errorf("%d label sets once no node has a's; want 1", len(s.labelSets))
	}

	d1 := s.keepDesired(&sluicev1.DesiredConfig{Node: "a", Fingerprint: fa, Config: render0(rev)})
	d2 := s.keepDesired(&sluicev1.DesiredConfig{Node: "b", Fingerprint: fa, Config: render0(rev)})
	other := s.keepDesired(&sluicev1.DesiredConfig{Node: "c", Fingerprint: fa, Config: &sluicev1.NodeConfig{}})
	if d1.config != ca || d2.config != ca || other.config == ca || !proto.Equal(other.config, &sluicev1.NodeConfig{}) {
		t.Errorf("configs: %p, %p, %p; want the first two shared with the rendered %p, the third (not equal) its own", d1.config, d2.config, other.config, ca)
	}
}

// The loop takes the nodes' values in as it reads them (Intake): the term
// must decide exactly as from the lists.
func TestIntake_DecidesAsTheLists(t *testing.T) {
	viaLists := memFleet(40)
	viaIntake := memFleet(40)
	in := NewIntake()
	for _, p := range viaIntake.Presence {
		in.Presence(p)
	}
	for _, st := range viaIntake.Status {
		in.Status(st)
	}
	for _, d := range viaIntake.Desired {
		in.Desired(d)
	}
	for _, b := range viaIntake.Backups {
		in.Backup(b)
	}
	viaIntake.Presence, viaIntake.Status, viaIntake.Desired, viaIntake.Backups, viaIntake.Intake = nil, nil, nil, nil, in
	a, b := Decide(NewState(), viaLists, t0), Decide(NewState(), viaIntake, t0)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d actions from the lists, %d from the intake", len(a), len(b))
	}
	for i := range a {
		wa, oka := a[i].(WriteDesired)
		wb, okb := b[i].(WriteDesired)
		switch {
		case oka != okb:
			t.Fatalf("action %d: %T from the lists, %T from the intake", i, a[i], b[i])
		case oka && (!proto.Equal(wa.Desired, wb.Desired) || !proto.Equal(wa.Backup, wb.Backup)):
			t.Errorf("write %d: %v (backup %v) from the lists, %v (backup %v) from the intake", i, wa.Desired, wa.Backup, wb.Desired, wb.Backup)
		}
	}
	if got, want := summarize(b), summarize(a); !slices.Equal(got, want) {
		t.Errorf("actions %v from the intake, %v from the lists", got, want)
	}
	if in.s != nil {
		t.Error("the intake is not spent once its Loaded event was decided")
	}
}
