package creds

import (
	"errors"
	"slices"
	"testing"
)

func TestRolesAllowed_NamesTheRolesThatMayDoWhatWasRefused(t *testing.T) {
	tests := []struct {
		name        string
		err         string
		wantVerb    string
		wantSubject string
		want        []string
		wantOK      bool
	}{
		{
			name:        "readonly apply: the writing roles may",
			err:         `nats: permissions violation: Permissions Violation for Publish to "sluice.api.configurator.apply"`,
			wantVerb:    "publish",
			wantSubject: "sluice.api.configurator.apply",
			want:        []string{RoleConfigurator, RoleCoordinator, RoleReaper, RoleAdmin},
			wantOK:      true,
		},
		{
			name:        "a read the readonly role may do too",
			err:         `nats: permissions violation: Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_sluice-nodes"`,
			wantVerb:    "publish",
			wantSubject: "$JS.API.STREAM.INFO.KV_sluice-nodes",
			want:        []string{RoleConfigurator, RoleCoordinator, RoleReaper, RoleAdmin, RoleReadOnly},
			wantOK:      true,
		},
		{
			name:        "the leader lease: the coordinator only",
			err:         `nats: permissions violation: Permissions Violation for Publish to "$KV.sluice-leases.leader"`,
			wantVerb:    "publish",
			wantSubject: "$KV.sluice-leases.leader",
			want:        []string{RoleCoordinator},
			wantOK:      true,
		},
		{
			name:        "a subscription outside the inbox",
			err:         `nats: permissions violation: Permissions Violation for Subscription to "sluice.events.>" using queue "q"`,
			wantVerb:    "subscribe",
			wantSubject: "sluice.events.>",
			want:        []string{RoleConfigurator, RoleCoordinator, RoleReaper, RoleAdmin},
			wantOK:      true,
		},
		{name: "not a permission error", err: "nats: timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verb, subject, roles, ok := RolesAllowed(errors.New(tt.err))
			if ok != tt.wantOK || verb != tt.wantVerb || subject != tt.wantSubject || !slices.Equal(roles, tt.want) {
				t.Errorf("RolesAllowed = %q, %q, %v, %v; want %q, %q, %v, %v", verb, subject, roles, ok, tt.wantVerb, tt.wantSubject, tt.want, tt.wantOK)
			}
		})
	}
}

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{">", "a", true},
		{">", "a.b", true},
		{"a.>", "a", false},
		{"a.>", "a.b.c", true},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b.c", "a.b", false},
	}
	for _, tt := range tests {
		if got := subjectMatches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}
