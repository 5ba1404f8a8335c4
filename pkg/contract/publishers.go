package contract

import (
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
// Kind (sluice.events.<Kind>.<id>). A node's rules are about itself only:
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
	{RoleNode, KindNode, []string{"NodeRegistered", "NodeLabelsChanged", "NodeProvisioning", "NodeProvisioned",
		"NodeInvalid", "NodeRestored", "NodeRestoreFailed", "StaleDesiredIgnored", "NodeStoreReplaced", "NodeBakeCheckPassed", "NodeIncompatible"}},
	{RoleNode, KindInstance, pauseTypes},
	{RoleNode, KindQuarantine, quarantineTypes},

	// The rollout-coordinator: its rollouts, the node outcomes it decides,
	// the gates it measures, the fingerprints it records, its leadership.
	{RoleCoordinator, KindRollout, []string{"RolloutQueued", "RolloutStarted", "RolloutSuperseding", "WaveStarted",
		"DomainStarted", "RolloutBaking", "RolloutWaitingForWindow", "RolloutWindowOpened", "RolloutCheckingGates",
		"RolloutGatesPassed", "RolloutWaitingForBakeChecks", "RolloutPausing", "RolloutPaused", "RolloutUnpaused",
		"RolloutResumed", "RolloutReverting", "RolloutAborting", "DecisionUnsettled", "RolloutRecordsPruned",
		"RolloutSucceeded", "RolloutPartiallyFailed", "RolloutRolledBack", "RolloutAborted", "RolloutHeld"}},
	{RoleCoordinator, KindNode, []string{"NodeConfigured", "NodeFoundStarted", "NodeJoinedRollout", "NodeJoinedRevert",
		"NodeWaitingForPair", "NodeSkipped", "NodeFailed", "NodeTimedOut", "NodeOperationCancelled",
		"NodeRevertTarget", "NodeReverted", "NodeRevertFailed", "NodeRevertDeferred", "DesiredWriteRefused", "NodeIncompatible"}},
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
		"RegistryDeletionCancelled", "RegistryHoldReleased"}},
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

// ParseEventSubject returns the kind and id of an event subject
// (sluice.events.<kind>.<id>; the id may hold dots, as a node name does).
func ParseEventSubject(subject string) (kind, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, EventsSubjectPrefix+".")
	if !found {
		return "", "", false
	}
	kind, id, found = strings.Cut(rest, ".")
	if !found || kind == "" || id == "" {
		return "", "", false
	}
	return kind, id, true
}
