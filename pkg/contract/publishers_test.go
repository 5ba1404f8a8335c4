package contract

import (
	"slices"
	"strings"
	"testing"
)

// TestEventSubjects_EachRoleHasItsOwn: a shared kind's events of every role
// but the node role are on subjects naming the role, which parse back to
// the role, kind and id; the node role's, and an unshared kind's, are on
// the plain layout. Role tokens are never kind tokens, or a subject would
// be read as two things.
func TestEventSubjects_EachRoleHasItsOwn(t *testing.T) {
	for _, role := range publishingRoles() {
		if slices.Contains(EventKinds, role) && role != RoleNode {
			t.Fatalf("role %q is also a kind: its subjects would parse as that kind's", role)
		}
	}
	tests := []struct {
		role, kind, id string
		want           string
	}{
		{RoleNode, KindNode, "node-01", "sluice.events.node.node-01"},
		{RoleCoordinator, KindNode, "worker-1.eu", "sluice.events.coordinator.node.worker-1.eu"},
		{RoleReaper, KindNode, "node-01", "sluice.events.reaper.node.node-01"},
		{RoleAdmin, KindNode, "node-01", "sluice.events.admin.node.node-01"},
		{RoleCoordinator, KindQuarantine, "sluice-status.node-01", "sluice.events.coordinator.quarantine.sluice-status.node-01"},
		{RoleConfigurator, KindIntent, "vrf.blue", "sluice.events.configurator.intent.vrf.blue"},
		{RoleCoordinator, KindRollout, "1-0123456789ab", "sluice.events.rollout.1-0123456789ab"},
		{"", KindNode, "node-01", "sluice.events.node.node-01"},
	}
	for _, tt := range tests {
		got := EventSubjectOf(tt.role, tt.kind, tt.id)
		if got != tt.want {
			t.Errorf("EventSubjectOf(%q, %q, %q) = %q, want %q", tt.role, tt.kind, tt.id, got, tt.want)
		}
		role, kind, id, ok := ParseEventSubject(got)
		wantRole := tt.role
		if !SharedEventKind(tt.kind) || tt.role == RoleNode {
			wantRole = ""
		}
		if !ok || role != wantRole || kind != tt.kind || id != tt.id {
			t.Errorf("ParseEventSubject(%q) = %q, %q, %q, %v", got, role, kind, id, ok)
		}
	}
	// A reader filtering by node finds every role's events about it.
	got := EventFilterSubjects(KindNode, "node-01")
	want := []string{"sluice.events.node.node-01", "sluice.events.coordinator.node.node-01",
		"sluice.events.reaper.node.node-01", "sluice.events.admin.node.node-01"}
	if !slices.Equal(got, want) {
		t.Errorf("EventFilterSubjects(node, node-01) = %q, want %q", got, want)
	}
}

// TestOthersEventSubjects_DenyEveryoneElsesSubjects: what a role's
// permissions deny covers every other role's subjects and no subject of its
// own, for every row of the table.
func TestOthersEventSubjects_DenyEveryoneElsesSubjects(t *testing.T) {
	matches := func(filter, subject string) bool {
		prefix, wild := strings.CutSuffix(filter, ">")
		return subject == filter || (wild && strings.HasPrefix(subject, prefix))
	}
	for _, role := range publishingRoles() {
		deny := OthersEventSubjects(role)
		for _, r := range eventRules {
			subject := EventSubjectOf(r.Role, r.Kind, "x")
			denied := slices.ContainsFunc(deny, func(f string) bool { return matches(f, subject) })
			if role == RoleNode {
				if denied {
					t.Errorf("the node role is denied %s", subject)
				}
				continue
			}
			if want := r.Role != role; denied != want {
				t.Errorf("role %s: %s (role %s, kind %s) denied %v, want %v", role, subject, r.Role, r.Kind, denied, want)
			}
		}
	}
}
