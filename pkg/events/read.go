package events

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ErrNotItsSubjects: a message of the events stream decodes, but is not an
// event its subject's publishers may send (see Read). Readers show it as
// unreadable, as they show a message that does not decode.
var ErrNotItsSubjects = errors.New("not an event its subject's publishers may send")

// Read is how every reader of the events stream (`sluice events`, describe,
// the dashboard) reads one message stored on subject: the event, or an
// error saying why it is shown as unreadable instead. The server lets a
// role publish only on its subjects (a node only on its own node's, see
// contract.NodeEventIDs; every other role on its own, see
// contract.EventSubjectOf), so who sent an event and what it is about come
// from its subject, never from its payload alone:
//   - the payload's kind and id are the subject's;
//   - its type is one the table (contract.EventRules) lets the subject's
//     role publish on that kind, and the component it names connects as
//     that role. A plain subject (sluice.events.<kind>.<id>) some node may
//     publish on is the node role's: another role's type there is
//     unreadable, whoever stored it (one stored before the roles had
//     subjects of their own, or a node's forgery: they look the same). On
//     another plain subject the roles the table gives the kind may speak;
//   - the fields that name what the subject names (the node of a node
//     event, the rollout of a rollout or gate event, the bucket and key of
//     a quarantine event, the component of an instance event) agree with it.
//
// A message that does not decode returns an error matching
// store.ErrUndecodable; one that fails a check, ErrNotItsSubjects.
func Read(subject string, data []byte) (*sluicev1.Event, error) {
	role, kind, id, ok := contract.ParseEventSubject(subject)
	if !ok {
		return nil, fmt.Errorf("%w: subject %q is not %s.<kind>.<id> nor %s.<role>.<kind>.<id>", ErrNotItsSubjects, subject,
			contract.EventsSubjectPrefix, contract.EventsSubjectPrefix)
	}
	ev := &sluicev1.Event{}
	if err := store.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUndecodable, err)
	}
	if err := check(role, kind, id, ev); err != nil {
		return nil, fmt.Errorf("%w: on %s, %s", ErrNotItsSubjects, subject, err)
	}
	return ev, nil
}

// check says what in ev disagrees with its subject's role, kind and id, or
// with what the role of the component it names may publish.
func check(role, kind, id string, ev *sluicev1.Event) error {
	if ev.GetKind() != kind || ev.GetId() != id {
		return fmt.Errorf("the payload says %s/%s", ev.GetKind(), ev.GetId())
	}
	roles := contract.EventPublishers(kind, ev.GetType())
	if len(roles) == 0 {
		return fmt.Errorf("type %q is not a %s event any role may publish", ev.GetType(), kind)
	}
	switch {
	case role != "":
		if !slices.Contains(roles, role) {
			return fmt.Errorf("%s is published by the %s role, not on the %s role's subjects", ev.GetType(), strings.Join(roles, " or "), role)
		}
		roles = []string{role}
	case contract.NodeMayPublishOn(kind, id):
		if !slices.Contains(roles, contract.RoleNode) {
			return fmt.Errorf("%s is published by the %s role on its own subjects (%s); a node's credentials may publish here",
				ev.GetType(), strings.Join(roles, " or "), contract.EventSubjectOf(roles[0], kind, id))
		}
		roles = []string{contract.RoleNode}
	}
	if role := contract.RoleOfComponent(ev.GetComponent()); !slices.Contains(roles, role) {
		return fmt.Errorf("%s is published by the %s role, not by component %q", ev.GetType(), strings.Join(roles, " or "), ev.GetComponent())
	}
	same := func(field, got, want string) error {
		if got != "" && got != want {
			return fmt.Errorf("its %s is %q, not the subject's %q", field, got, want)
		}
		return nil
	}
	switch kind {
	case contract.KindNode:
		return same("node", ev.GetNode(), id)
	case contract.KindRollout:
		return same("rollout", ev.GetRollout(), id)
	case contract.KindFingerprint:
		return same("fingerprint", ev.GetFingerprint(), id)
	case contract.KindRevision:
		if id != contract.KeyPending {
			return same("revision", ev.GetRevision(), id)
		}
	case contract.KindGate:
		if ev.GetRollout() != "" || ev.GetGate() != "" {
			return same("rollout and gate", contract.GateEventID(ev.GetRollout(), ev.GetGate()), id)
		}
	case contract.KindInstance:
		component, instance, _ := strings.Cut(id, ".")
		if ev.GetComponent() != component {
			return fmt.Errorf("its component is %q, the subject's instance is of %q", ev.GetComponent(), component)
		}
		if component == contract.ComponentAgent {
			return same("node", ev.GetNode(), instance)
		}
		if ev.GetNode() != "" {
			return fmt.Errorf("an instance of %s names node %q", component, ev.GetNode())
		}
	case contract.KindQuarantine:
		if got := contract.QuarantineID(ev.GetBucket(), ev.GetKey()); got != id {
			return fmt.Errorf("its bucket and key are %s, not the subject's %s", got, id)
		}
		if want := nodeOf(ev.GetBucket(), ev.GetKey()); ev.GetNode() != want {
			return fmt.Errorf("its node is %q, the key's is %q", ev.GetNode(), want)
		}
	}
	return nil
}
