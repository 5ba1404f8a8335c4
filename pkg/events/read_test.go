package events

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestRead_ShowsAnEventOnlyAsItsSubjectsPublishersMaySay is I11 as a
// table: what an event is about comes from its subject, and its type from
// what the table lets that kind's roles say (contract.EventRules).
func TestRead_ShowsAnEventOnlyAsItsSubjectsPublishersMaySay(t *testing.T) {
	const rollout = "3-0123456789ab"
	node := func(node string) string { return contract.EventSubject(contract.KindNode, node) }
	nodeBy := func(role, node string) string { return contract.EventSubjectOf(role, contract.KindNode, node) }
	ev := func(component, kind, id, typ string) *sluicev1.Event {
		return &sluicev1.Event{Component: component, Kind: kind, Id: id, Type: typ, Reason: "because"}
	}
	with := func(e *sluicev1.Event, f func(*sluicev1.Event)) *sluicev1.Event { f(e); return e }
	tests := []struct {
		name    string
		subject string
		given   *sluicev1.Event
		wantErr string // "" for an event shown as it is
	}{
		// What the services publish.
		{"an agent's own node event", node("node-01"),
			with(ev("agent", "node", "node-01", "NodeInvalid"), func(e *sluicev1.Event) { e.Node, e.Rollout = "node-01", rollout }), ""},
		{"a node name with dots", node("worker-1.eu.example.com"),
			with(ev("agent", "node", "worker-1.eu.example.com", "NodeProvisioned"), func(e *sluicev1.Event) { e.Node = "worker-1.eu.example.com" }), ""},
		{"the coordinator's node outcome", nodeBy(contract.RoleCoordinator, "node-02"),
			with(ev("rollout-coordinator", "node", "node-02", "NodeFailed"), func(e *sluicev1.Event) { e.Node, e.Rollout = "node-02", rollout }), ""},
		{"the coordinator's rollout event", contract.EventSubject(contract.KindRollout, rollout),
			with(ev("rollout-coordinator", "rollout", rollout, "RolloutSucceeded"), func(e *sluicev1.Event) { e.Rollout = rollout }), ""},
		{"a gate", contract.EventSubject(contract.KindGate, contract.GateEventID(rollout, "alerts")),
			with(ev("rollout-coordinator", "gate", rollout+".alerts", "GatePassed"), func(e *sluicev1.Event) { e.Rollout, e.Gate = rollout, "alerts" }), ""},
		{"the reaper's node event", nodeBy(contract.RoleReaper, "node-03"), ev("reaper", "node", "node-03", "NodeReaped"), ""},
		{"an operator's revocation", nodeBy(contract.RoleAdmin, "node-03"), ev("cli", "node", "node-03", "NodeRevoked"), ""},
		{"the coordinator's refusal of a node's status", contract.EventSubjectOf(contract.RoleCoordinator, contract.KindQuarantine, "sluice-status.node-01"),
			with(ev("rollout-coordinator", "quarantine", "sluice-status.node-01", "ValueUnreadable"), func(e *sluicev1.Event) {
				e.Bucket, e.Key, e.Node = contract.BucketStatus, "node-01", "node-01"
			}), ""},
		{"a rollout event stored on the plain subject", contract.EventSubject(contract.KindRollout, rollout),
			with(ev("rollout-coordinator", "rollout", rollout, "RolloutStarted"), func(e *sluicev1.Event) { e.Rollout = rollout }), ""},
		{"an intent event stored before the roles had subjects of their own", contract.EventSubject(contract.KindIntent, "vrf.blue"),
			ev("configurator", "intent", "vrf.blue", "IntentCreated"), ""},
		{"an agent's pause acknowledgement", contract.EventSubject(contract.KindInstance, "agent.node-01"),
			ev("agent", "instance", "agent.node-01", "PauseReached"), ""},
		{"a value an agent refused", contract.EventSubject(contract.KindQuarantine, "sluice-status.node-01"),
			with(ev("agent", "quarantine", "sluice-status.node-01", "ValueUnreadable"), func(e *sluicev1.Event) {
				e.Bucket, e.Key, e.Node = contract.BucketStatus, "node-01", "node-01"
			}), ""},
		{"the pending apply rolled back", contract.EventSubject(contract.KindRevision, contract.KeyPending),
			ev("configurator", "revision", contract.KeyPending, "ApplyRolledBack"), ""},

		// What node-01's credentials can put on node-01's subjects.
		{"a rollout's success on a node's subject", node("node-01"),
			with(ev("rollout-coordinator", "rollout", rollout, "RolloutSucceeded"), func(e *sluicev1.Event) { e.Rollout = rollout }),
			"the payload says rollout/" + rollout},
		{"a rollout type with the subject's kind and id", node("node-01"),
			ev("rollout-coordinator", "node", "node-01", "RolloutSucceeded"), `type "RolloutSucceeded" is not a node event any role may publish`},
		{"another node's failure on a node's subject", node("node-01"),
			with(ev("agent", "node", "node-02", "NodeInvalid"), func(e *sluicev1.Event) { e.Node = "node-02" }), "the payload says node/node-02"},
		{"another node named in its own event", node("node-01"),
			with(ev("agent", "node", "node-01", "NodeInvalid"), func(e *sluicev1.Event) { e.Node = "node-02" }), `its node is "node-02", not the subject's "node-01"`},
		{"an agent saying what only the coordinator says", node("node-01"),
			ev("agent", "node", "node-01", "NodeFailed"), `NodeFailed is published by the coordinator role on its own subjects (sluice.events.coordinator.node.node-01); a node's credentials may publish here`},
		// A coordinator's type about node-01 on node-01's own subject:
		// node-01's forgery, or one stored before the roles had subjects
		// of their own; they cannot be told apart.
		{"a coordinator's revert on the node's own subject", node("node-01"),
			with(ev("rollout-coordinator", "node", "node-01", "NodeReverted"), func(e *sluicev1.Event) { e.Node, e.Rollout = "node-01", rollout }),
			`NodeReverted is published by the coordinator role on its own subjects`},
		{"a type both publish, on the node's subject, naming the coordinator", node("node-01"),
			ev("rollout-coordinator", "node", "node-01", "NodeIncompatible"), `NodeIncompatible is published by the node role, not by component "rollout-coordinator"`},
		{"a coordinator's refusal of a node's status on the node's subject", contract.EventSubject(contract.KindQuarantine, "sluice-status.node-01"),
			with(ev("rollout-coordinator", "quarantine", "sluice-status.node-01", "ValueUnreadable"), func(e *sluicev1.Event) {
				e.Bucket, e.Key, e.Node = contract.BucketStatus, "node-01", "node-01"
			}), `not by component "rollout-coordinator"`},
		{"an agent's type on the coordinator's subject", nodeBy(contract.RoleCoordinator, "node-01"),
			ev("agent", "node", "node-01", "NodeProvisioned"), `NodeProvisioned is published by the node role, not on the coordinator role's subjects`},
		{"the reaper's type on the coordinator's subject", nodeBy(contract.RoleCoordinator, "node-01"),
			ev("reaper", "node", "node-01", "NodeReaped"), `not on the coordinator role's subjects`},
		{"another component on the coordinator's subject", nodeBy(contract.RoleCoordinator, "node-01"),
			ev("reaper", "node", "node-01", "NodeReverted"), `not by component "reaper"`},
		{"a role's subject of a kind only one role publishes", "sluice.events.coordinator.rollout." + rollout,
			ev("rollout-coordinator", "rollout", rollout, "RolloutStarted"), "is not sluice.events.<kind>.<id>"},
		{"a coordinator's event naming no component", node("node-01"),
			ev("", "node", "node-01", "NodeInvalid"), `not by component ""`},
		{"an instance of another component", contract.EventSubject(contract.KindInstance, "agent.node-01"),
			ev("rollout-coordinator", "instance", "agent.node-01", "PauseReached"), `PauseReached is published by the node role, not by component "rollout-coordinator"`},
		{"an instance of another component on a role's subject", contract.EventSubjectOf(contract.RoleCoordinator, contract.KindInstance, "configurator.c1"),
			ev("rollout-coordinator", "instance", "configurator.c1", "PauseReached"), `its component is "rollout-coordinator"`},
		{"a refused value naming another node", contract.EventSubject(contract.KindQuarantine, "sluice-status.node-01"),
			with(ev("agent", "quarantine", "sluice-status.node-01", "ValueUnreadable"), func(e *sluicev1.Event) {
				e.Bucket, e.Key, e.Node = contract.BucketStatus, "node-01", "node-02"
			}), `its node is "node-02", the key's is "node-01"`},
		{"a refused value of another key", contract.EventSubject(contract.KindQuarantine, "sluice-status.node-01"),
			with(ev("agent", "quarantine", "sluice-status.node-01", "ValueUnreadable"), func(e *sluicev1.Event) {
				e.Bucket, e.Key, e.Node = contract.BucketStatus, "node-02", "node-02"
			}), "its bucket and key are sluice-status.node-02"},
		{"a type nobody publishes", node("node-01"), ev("agent", "node", "node-01", "NodeHacked"), `type "NodeHacked"`},
		{"a subject outside the stream's layout", "sluice.events.node", ev("agent", "node", "node-01", "NodeInvalid"), "is not sluice.events.<kind>.<id>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := store.Marshal(tt.given)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Read(tt.subject, b)
			if tt.wantErr == "" {
				if err != nil || !proto.Equal(got, tt.given) {
					t.Fatalf("Read = %v, %v; want the event as published", got, err)
				}
				return
			}
			if !errors.Is(err, ErrNotItsSubjects) || !strings.Contains(err.Error(), tt.wantErr) || got != nil {
				t.Fatalf("Read = %v, %v; want ErrNotItsSubjects saying %q", got, err, tt.wantErr)
			}
		})
	}
}

func TestRead_AMessageThatDoesNotDecode_SaysSo(t *testing.T) {
	_, err := Read(contract.EventSubject(contract.KindNode, "node-01"), []byte("not an event"))
	if !errors.Is(err, store.ErrUndecodable) || errors.Is(err, ErrNotItsSubjects) {
		t.Fatalf("Read = %v; want store.ErrUndecodable", err)
	}
}

// TestEmit_ATypeItsRoleMayNotPublish_IsLoggedAsAnError: a component that
// emits a type the table does not give its role is told so at once (its
// readers would show the event as unreadable); one that may, is not.
func TestEmit_ATypeItsRoleMayNotPublish_IsLoggedAsAnError(t *testing.T) {
	var logs bytes.Buffer
	em := NewEmitter(nil, zerolog.New(&logs), contract.ComponentAgent, nil)
	em.Emit(&sluicev1.Event{Kind: contract.KindNode, Id: "node-01", Type: "NodeInvalid", Node: "node-01"})
	if strings.Contains(logs.String(), `"level":"error"`) {
		t.Fatalf("an agent's NodeInvalid logged an error:\n%s", logs.String())
	}
	em.Emit(&sluicev1.Event{Kind: contract.KindRollout, Id: "1-0123456789ab", Type: "RolloutSucceeded"})
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "pkg/contract/publishers.go") {
		t.Fatalf("an agent's RolloutSucceeded logged no error naming the table:\n%s", logs.String())
	}
}
