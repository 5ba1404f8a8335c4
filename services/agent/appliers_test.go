package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// refuser is a recorder that is also a Validator refusing one fingerprint.
type refuser struct {
	*recorder
	refuse    string
	refusal   error // its refusal (nil: FRR's parser refusing a line)
	validated []string
}

func (r *refuser) Validate(_ context.Context, cfg *sluicev1.DesiredConfig) error {
	r.validated = append(r.validated, cfg.GetFingerprint())
	if cfg.GetFingerprint() == r.refuse {
		if r.refusal != nil {
			return r.refusal
		}
		return errors.New("line 7: % Unknown command: route-map x permit 65540")
	}
	return nil
}

// An Applier that is a Validator is asked before anything is applied; its
// refusal is the node's Invalid record with its words, and no part of
// Appliers applies anything.
func TestAgent_ValidatorRefuses_InvalidAndNothingApplied(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	links, routing := &recorder{}, &refuser{recorder: &recorder{}}
	good, bad := desiredConfig("n1", "good", 100), desiredConfig("n1", "bad", 200)
	routing.refuse = bad.GetFingerprint()
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(),
		Applier: agent.Appliers{{Name: "netlink", Applier: links}, {Name: "frr", Applier: routing}}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "good provisioned", provisioned(good.GetFingerprint()))
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "bad invalid", invalid(bad.GetFingerprint()))
	if st.GetFailedCheck() != "validate" || !strings.Contains(st.GetCheckOutput(), "frr applier: line 7: % Unknown command: route-map x permit 65540") ||
		!strings.HasSuffix(st.GetMessage(), "; not applied") {
		t.Errorf("status: check %q, output %q, message %q; want validate with the applier's words, not applied", st.GetFailedCheck(), st.GetCheckOutput(), st.GetMessage())
	}
	if st.GetNodeFault() != "" || st.GetLastInvalid().GetNodeFault() != "" {
		t.Errorf("node fault %q (carried %q); want none: the config is what FRR refused", st.GetNodeFault(), st.GetLastInvalid().GetNodeFault())
	}
	for name, r := range map[string]*recorder{"netlink": links, "frr": routing.recorder} {
		if got := r.fingerprints(); !slices.Equal(got, []string{good.GetFingerprint()}) {
			t.Errorf("%s applied %q, want only the good config", name, got)
		}
	}
	if st.GetAppliedFingerprint() != good.GetFingerprint() {
		t.Errorf("applied fingerprint %s, want the good one", st.GetAppliedFingerprint())
	}
}

// A Validator that finds the node unable to apply anything (its FRR is not
// running: agent.ErrNodeFault) makes the config Invalid with node_fault set,
// in the status and in the report it carries, and nothing is applied: the
// node's fault, not the config's (I9).
func TestAgent_ValidatorFindsNodeFault_InvalidAsNodeFaultNothingApplied(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	links := &recorder{}
	routing := &refuser{recorder: &recorder{},
		refusal: fmt.Errorf("frr instance n1: show version: %w: no daemon answers on the sockets in /var/run/frr/n1", agent.ErrNodeFault)}
	good, next := desiredConfig("n1", "good", 100), desiredConfig("n1", "next", 200)
	routing.refuse = next.GetFingerprint()
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(),
		Applier: agent.Appliers{{Name: "netlink", Applier: links}, {Name: "frr", Applier: routing}}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "good provisioned", provisioned(good.GetFingerprint()))
	f.writeDesired(t, next)
	st := f.waitStatus(t, "n1", "next invalid", invalid(next.GetFingerprint()))
	want := "no daemon answers on the sockets in /var/run/frr/n1"
	if st.GetFailedCheck() != "validate" || !strings.Contains(st.GetNodeFault(), want) {
		t.Errorf("status: check %q, node fault %q; want validate, a node fault saying %q", st.GetFailedCheck(), st.GetNodeFault(), want)
	}
	if li := st.GetLastInvalid(); li.GetFingerprint() != next.GetFingerprint() || li.GetNodeFault() != st.GetNodeFault() {
		t.Errorf("carried report: %s with node fault %q; want %s with the status's", li.GetFingerprint(), li.GetNodeFault(), next.GetFingerprint())
	}
	if !strings.Contains(st.GetMessage(), "not applied: the node cannot apply any config now") {
		t.Errorf("message %q does not say the node, not the config, is at fault", st.GetMessage())
	}
	for name, r := range map[string]*recorder{"netlink": links, "frr": routing.recorder} {
		if got := r.fingerprints(); !slices.Equal(got, []string{good.GetFingerprint()}) {
			t.Errorf("%s applied %q, want only the good config", name, got)
		}
	}
	if st.GetAppliedFingerprint() != good.GetFingerprint() {
		t.Errorf("applied fingerprint %s, want the good one", st.GetAppliedFingerprint())
	}
}

// The same node fault seen by an apply, after a part changed the node, is
// the config's: node_fault stays empty (the config may have stopped FRR).
func TestAgent_NodeFaultAtApply_IsTheConfigs(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	good, bad := desiredConfig("n1", "good", 100), desiredConfig("n1", "bad", 200)
	links := &recorder{}
	routing := &recorder{err: fmt.Errorf("frr-reload: %w", agent.ErrNodeFault), failFP: bad.GetFingerprint()}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(),
		Applier: agent.Appliers{{Name: "netlink", Applier: links}, {Name: "frr", Applier: routing}}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "good provisioned", provisioned(good.GetFingerprint()))
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "bad invalid", invalid(bad.GetFingerprint()))
	if st.GetFailedCheck() != "apply" || st.GetNodeFault() != "" || st.GetLastInvalid().GetNodeFault() != "" {
		t.Errorf("status: check %q, node fault %q (carried %q); want apply, no node fault", st.GetFailedCheck(), st.GetNodeFault(), st.GetLastInvalid().GetNodeFault())
	}
}

// A part that fails stops Appliers there, naming it; the agent then
// restores last-good through every part, the one before the failure too.
func TestAgent_AppliersPartFails_RestoresLastGoodThroughEveryPart(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	good, bad := desiredConfig("n1", "good", 100), desiredConfig("n1", "bad", 200)
	links, routing := &recorder{}, &recorder{err: errors.New("frr-reload: bgpd is not running"), failFP: bad.GetFingerprint()}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(),
		Applier: agent.Appliers{{Name: "netlink", Applier: links}, {Name: "frr", Applier: routing}}})

	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "good provisioned", provisioned(good.GetFingerprint()))
	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "bad invalid", invalid(bad.GetFingerprint()))
	if want := "frr applier (after netlink applied): frr-reload: bgpd is not running"; st.GetFailedCheck() != "apply" || !strings.Contains(st.GetCheckOutput(), want) {
		t.Errorf("status: check %q, output %q; want apply, %q", st.GetFailedCheck(), st.GetCheckOutput(), want)
	}
	want := []string{good.GetFingerprint(), bad.GetFingerprint(), good.GetFingerprint()}
	for name, r := range map[string]*recorder{"netlink": links, "frr": routing} {
		if got := r.fingerprints(); !slices.Equal(got, want) {
			t.Errorf("%s was asked for %q, want good, bad, good (the restore)", name, got)
		}
	}
	if st.GetAppliedFingerprint() != good.GetFingerprint() || !strings.Contains(st.GetMessage(), "restored last-good") {
		t.Errorf("applied %s, message %q; want last-good restored", st.GetAppliedFingerprint(), st.GetMessage())
	}
}
