package contract

import (
	"fmt"
	"slices"
	"strings"
)

// Roles: who a NATS user is in secure mode. pkg/creds issues users of these
// roles, each with its own permissions; the events table below says what
// each may publish on the events stream.
const (
	RoleConfigurator = "configurator"
	RoleCoordinator  = "coordinator"
	RoleReaper       = "reaper"
	RoleAdmin        = "admin"    // the CLI and the dashboard, everything but the leader lease
	RoleReadOnly     = "readonly" // the CLI's get, events, rollout status: publishes no event
	RoleNode         = "node"     // one agent: its own keys and subjects only
)

// componentRoles is the role each component connects as, and so the role
// of the component an event names.
var componentRoles = map[string]string{
	ComponentAgent:        RoleNode,
	ComponentCoordinator:  RoleCoordinator,
	ComponentConfigurator: RoleConfigurator,
	ComponentReaper:       RoleReaper,
	ComponentCLI:          RoleAdmin,
}

// RoleOfComponent is the role component connects as; "" for no component.
func RoleOfComponent(component string) string { return componentRoles[component] }

// EventRule says that Role may publish events of Types on the subjects of
// Kind it may publish on (EventSubjectOf). A node's rules are about itself only:
// the ids of NodeEventIDs, which its credentials allow and nothing else.
type EventRule struct {
	Role  string
	Kind  string
	Types []string
}

// Types every component publishes about itself: its pause acknowledgement
// (kind instance, pkg/pause) and the stored values it refused at intake
// (kind quarantine, pkg/events).
var (
	pauseTypes      = []string{"PauseReached", "ResumeReached"}
	quarantineTypes = []string{"ValueUnreadable", "ValueRewritten"}
)

// eventRules is the one table of who may say what on the events stream. A
// reader (pkg/events.Read) shows an event only if a rule allows its type on
// its subject's kind to the role of the component it names; a test walks
// every type the code publishes and fails on one without a rule.
var eventRules = []EventRule{
	// The agent: its own node's transitions, as it applies and checks.
	{RoleNode, KindNode, []string{"NodeRegistered", "NodeLabelsChanged", "NodeLeft", "NodeProvisioning", "NodeProvisioned",
		"NodeInvalid", "NodeRestored", "NodeRestoreFailed", "StaleDesiredIgnored", "NodeStoreReplaced", "NodeBakeCheckPassed", "NodeIncompatible"}},
	{RoleNode, KindInstance, pauseTypes},
	{RoleNode, KindQuarantine, quarantineTypes},

	// The rollout-coordinator: its rollouts, the node outcomes it decides,
	// the gates it measures, the fingerprints it records, its leadership.
	{RoleCoordinator, KindRollout, []string{"RolloutQueued", "RolloutStarted", "RolloutSuperseding", "WaveStarted",
		"DomainStarted", "RolloutBaking", "RolloutBakeHeld", "RolloutBakeResumed", "RolloutWaitingForWindow", "RolloutWindowOpened", "RolloutCheckingGates",
		"RolloutGatesPassed", "RolloutWaitingForBakeChecks", "RolloutPausing", "RolloutPaused", "RolloutUnpaused",
		"RolloutResumed", "RolloutReverting", "RolloutAborting", "DecisionUnsettled", "RolloutRecordsPruned",
		"RolloutSucceeded", "RolloutPartiallyFailed", "RolloutRolledBack", "RolloutAborted", "RolloutHeld"}},
	{RoleCoordinator, KindNode, []string{"NodeConfigured", "NodeFoundStarted", "NodeJoinedRollout", "NodeJoinedRevert",
		"NodeWaitingForPair", "NodeSkipped", "NodeFailed", "NodeTimedOut", "NodeOperationCancelled",
		"NodeRevertTarget", "NodeReverted", "NodeRevertFailed", "NodeRevertDeferred", "DesiredWriteRefused", "NodeIncompatible", "NodeNotConfigured"}},
	{RoleCoordinator, KindGate, []string{"GateWaiting", "GatePassed", "GateClear", "GateFailed"}},
	{RoleCoordinator, KindFingerprint, []string{"FingerprintInvalid", "FingerprintForgiven"}},
	{RoleCoordinator, KindLeader, []string{EventLeadershipAcquired, EventLeadershipLost, EventLeadershipReleased}},
	{RoleCoordinator, KindInstance, pauseTypes},
	{RoleCoordinator, KindQuarantine, quarantineTypes},

	// The configurator: intents, revisions and the registries it syncs.
	{RoleConfigurator, KindIntent, []string{"IntentCreated", "IntentUpdated", "IntentUnmarked", "IntentMarkedForDeletion",
		"IntentConflict", "UnreadableIntentDeleted"}},
	{RoleConfigurator, KindRevision, []string{"RevisionCreated", "HeadMoved", "ApplyRolledBack"}},
	{RoleConfigurator, KindRegistry, []string{"RegistrySynced", "RegistryReachable", "RegistryUnreachable", "RegistryRemoved",
		"RegistryIntentsInvalid", "RegistryDeletionPending", "RegistryDeletionHeld", "RegistryDeletionConfirmed",
		"RegistryDeletionCancelled", "RegistryHoldReleased", "RegistryAnswerHeld", "RegistryAnswerReleased"}},
	{RoleConfigurator, KindStore, []string{EventStoreLost}},
	{RoleConfigurator, KindInstance, pauseTypes},
	{RoleConfigurator, KindQuarantine, quarantineTypes},

	// The reaper: what it deletes, postpones or holds.
	{RoleReaper, KindNode, []string{"NodeReaped", "ReapPostponed"}},
	{RoleReaper, KindIntent, []string{"IntentReaped"}},
	{RoleReaper, KindRevision, []string{"RevisionsReaped"}},
	{RoleReaper, KindInstance, append([]string{"ReapHeld"}, pauseTypes...)},
	{RoleReaper, KindQuarantine, quarantineTypes},

	// An operator (sluice creds revoke, sluice freeze, the dashboard's controls).
	{RoleAdmin, KindNode, []string{"NodeRevoked"}},
	{RoleAdmin, KindFreeze, []string{"FreezeAdded", "FreezeRemoved"}},
	{RoleAdmin, KindControl, []string{"ControlRan", "ControlFailed"}},
	{RoleAdmin, KindStore, []string{EventStoreLossConfirmed, EventStoreRestored}},
}

// EventRules returns the table of who may publish which events, in the
// order docs/security.md lists it.
func EventRules() []EventRule {
	out := make([]EventRule, len(eventRules))
	for i, r := range eventRules {
		out[i] = EventRule{Role: r.Role, Kind: r.Kind, Types: slices.Clone(r.Types)}
	}
	return out
}

// MayPublishEvent reports whether role may publish events of type typ on
// the subjects of kind.
func MayPublishEvent(role, kind, typ string) bool {
	for _, r := range eventRules {
		if r.Role == role && r.Kind == kind && slices.Contains(r.Types, typ) {
			return true
		}
	}
	return false
}

// EventPublishers are the roles that may publish events of type typ on the
// subjects of kind, in the table's order; none for a type of another kind.
func EventPublishers(kind, typ string) []string {
	var out []string
	for _, r := range eventRules {
		if r.Kind == kind && slices.Contains(r.Types, typ) && !slices.Contains(out, r.Role) {
			out = append(out, r.Role)
		}
	}
	return out
}

// NodeEventIDs are the ids, by kind, that node's agent publishes events
// about: its node, its pause acknowledgement, and the keys it reads or owns
// when one of their values is refused. Its credentials may publish on these
// subjects only (pkg/creds).
func NodeEventIDs(node string) map[string][]string {
	return map[string][]string{
		KindNode:     {node},
		KindInstance: {InstanceKey(ComponentAgent, node)},
		KindQuarantine: {
			QuarantineID(BucketNodeConfigs, DesiredKey(node)), QuarantineID(BucketStatus, node),
			QuarantineID(BucketNodes, node), QuarantineID(BucketControl, KeyPause),
		},
	}
}

// NodeEventSubjects are the event subjects of NodeEventIDs(node), sorted.
func NodeEventSubjects(node string) []string {
	var out []string
	for kind, ids := range NodeEventIDs(node) {
		for _, id := range ids {
			out = append(out, EventSubject(kind, id))
		}
	}
	slices.Sort(out)
	return out
}

// Event subjects. The node role publishes on sluice.events.<kind>.<id>,
// exactly the subjects of NodeEventIDs (what an agent's credentials allow).
// Every other role publishes the kinds more than one role publishes on
// (node, instance, quarantine, intent, revision, store) on subjects of its
// own, sluice.events.<role>.<kind>.<id>, and the kinds only it publishes
// on sluice.events.<kind>.<id>: so each role's credentials allow its own
// subjects only, and no node can write where the coordinator says
// NodeReverted about it. Role tokens are never kind tokens (a test).

// sharedKinds are the kinds the table gives to more than one role.
var sharedKinds = func() map[string]bool {
	roles := map[string]map[string]bool{}
	for _, r := range eventRules {
		if roles[r.Kind] == nil {
			roles[r.Kind] = map[string]bool{}
		}
		roles[r.Kind][r.Role] = true
	}
	out := map[string]bool{}
	for kind, rs := range roles {
		out[kind] = len(rs) > 1
	}
	return out
}()

// publishingRoles are the roles with a row in the table, in its order.
func publishingRoles() []string { return tableRoles }

var tableRoles = func() []string {
	var out []string
	for _, r := range eventRules {
		if !slices.Contains(out, r.Role) {
			out = append(out, r.Role)
		}
	}
	return out
}()

// SharedEventKind reports whether more than one role publishes events of
// kind: its events carry their publisher's role in the subject (but the
// node role's).
func SharedEventKind(kind string) bool { return sharedKinds[kind] }

// EventSubjectOf is the subject role publishes an event about id of kind
// on: EventSubject(kind, id) for the node role, for a kind only role
// publishes and for no role (""); sluice.events.<role>.<kind>.<id> for
// another role's event of a shared kind.
func EventSubjectOf(role, kind, id string) string {
	if role == "" || role == RoleNode || !sharedKinds[kind] {
		return EventSubject(kind, id)
	}
	return fmt.Sprintf("%s.%s.%s.%s", EventsSubjectPrefix, role, kind, id)
}

// EventFilterSubjects are the subjects of every role's events about id of
// kind (id ">" for every id of kind), for a consumer's FilterSubjects: the
// plain subject (the node role's, a kind's only publisher's, and events
// stored before the roles had subjects of their own) and each other role's.
// They never overlap.
func EventFilterSubjects(kind, id string) []string {
	out := []string{EventSubject(kind, id)}
	if !sharedKinds[kind] {
		return out
	}
	for _, role := range publishingRoles() {
		if role != RoleNode && MayPublishKind(role, kind) {
			out = append(out, EventSubjectOf(role, kind, id))
		}
	}
	return out
}

// MayPublishKind reports whether the table gives role any type of kind.
func MayPublishKind(role, kind string) bool {
	return slices.ContainsFunc(eventRules, func(r EventRule) bool { return r.Role == role && r.Kind == kind })
}

// OthersEventSubjects are the event subjects role must not publish on, as
// NATS subject filters (its permissions deny them; pkg/creds): every other
// role's own subjects, and the plain subjects of every kind that is shared
// (the node role's) or that role does not publish. Nil for the node role,
// which is allowed its own subjects only (NodeEventSubjects).
func OthersEventSubjects(role string) []string {
	if role == RoleNode {
		return nil
	}
	var out []string
	for _, kind := range EventKinds {
		if sharedKinds[kind] || !MayPublishKind(role, kind) {
			out = append(out, EventSubject(kind, ">"))
		}
	}
	for _, other := range publishingRoles() {
		if other != role && other != RoleNode {
			out = append(out, EventsSubjectPrefix+"."+other+".>")
		}
	}
	return out
}

// NodeMayPublishOn reports whether some node's credentials may publish on
// the plain subject of id of kind (NodeEventIDs of some node): every node
// subject, an agent's instance, a refused value of a key some node reads.
// Only the node role's events are believed there (pkg/events.Read).
func NodeMayPublishOn(kind, id string) bool {
	switch kind {
	case KindNode:
		return true
	case KindInstance:
		return strings.HasPrefix(id, ComponentAgent+".")
	case KindQuarantine:
		bucket, key, _ := strings.Cut(id, ".")
		switch bucket {
		case BucketStatus, BucketNodes:
			return true
		case BucketNodeConfigs:
			n, _, ok := NodeOfConfigKey(key)
			return ok && key == DesiredKey(n)
		case BucketControl:
			return key == KeyPause
		}
	}
	return false
}

// ParseEventSubject returns the publishing role (for a role's own subject,
// sluice.events.<role>.<kind>.<id>; "" for sluice.events.<kind>.<id>), the
// kind and the id of an event subject. The id may hold dots, as a node
// name does.
func ParseEventSubject(subject string) (role, kind, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, EventsSubjectPrefix+".")
	if !found {
		return "", "", "", false
	}
	first, rest, found := strings.Cut(rest, ".")
	if found && first != RoleNode && slices.Contains(publishingRoles(), first) {
		role = first
		if kind, id, found = strings.Cut(rest, "."); !found || kind == "" || id == "" || !sharedKinds[kind] {
			return "", "", "", false
		}
		return role, kind, id, true
	}
	if !found || first == "" || rest == "" {
		return "", "", "", false
	}
	return "", first, rest, true
}
