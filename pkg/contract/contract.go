// Package contract is the one home of the contract between sluice's services:
// bucket and stream names, key and subject layouts, and the settings the
// buckets are created with. Services import it; they never import each other.
package contract

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Buckets and streams. Each has exactly one writing service, named beside it.
const (
	BucketIntents      = "sluice-intents"      // configurator: <kind>.<name> → StoredIntent
	BucketRevisions    = "sluice-revisions"    // configurator: <id> → Revision, head → Head
	BucketNodeConfigs  = "sluice-nodeconfigs"  // coordinator: <node>.desired, <node>.backup → DesiredConfig
	BucketFingerprints = "sluice-fingerprints" // coordinator: <sha256> → InvalidFingerprint
	BucketStatus       = "sluice-status"       // agent of <node>: <node> → NodeStatus
	BucketNodes        = "sluice-nodes"        // agent of <node>: <node> → NodePresence (TTL = heartbeat lease)
	BucketRollouts     = "sluice-rollouts"     // coordinator: <id> → Rollout, active / last-applied → RolloutRef
	BucketLeases       = "sluice-leases"       // whoever holds it: <component> → LeaderLease (TTL = leader lease)
	BucketControl      = "sluice-control"      // operators (the CLI): abort.<rollout> → AbortRequest, forgive.<fingerprint> → ForgiveRequest, pause and pause.<rollout> → PauseRequest, reaper.confirm → ReapConfirm, store.confirm → StoreConfirm, store.id → StoreID, registry.<name> → RegistrySpec, registry.<name>.confirm → RegistryConfirm
	BucketInstances    = "sluice-instances"    // each service instance: <component>.<instance> → Instance (TTL = node lease)
	BucketRegistries   = "sluice-registries"   // configurator: <name> → RegistryStatus
	StreamEvents       = "SLUICE_EVENTS"       // everyone: sluice.events.<kind>.<id> → Event
)

// Fixed keys.
const (
	KeyHead          = "head"           // revisions: the revision to roll out
	KeyPending       = "pending"        // revisions: the apply in progress (an ApplyJournal), finished or rolled back after a crash
	KeyActive        = "active"         // rollouts: the rollout in progress
	KeyLastApplied   = "last-applied"   // rollouts: the last rollout that finished
	LeaseCoordinator = "coordinator"    // leases: the rollout-coordinator's leader lease
	KeyPause         = "pause"          // control: the whole control plane's PauseRequest
	KeyReapConfirm   = "reaper.confirm" // control: an operator's ReapConfirm of held node deletions
	KeyStoreConfirm  = "store.confirm"  // control: an operator's StoreConfirm that a lost store is to start from nothing (pkg/storeloss)
	KeyStoreID       = "store.id"       // control: the store's StoreID, created once by the bucket manager (pkg/buckets); a store started afresh has another
)

// KeyFence is the term fence the coordinator keeps in every bucket it writes
// (nodeconfigs, rollouts, fingerprints): a new leader rewrites it when its
// term starts, and every write of a term (a single fenced message, or an
// atomic batch whose last message checks it) requires the fence to be still
// the one its term wrote, so a deposed leader's writes fail on the server. Keys starting with "_" are control keys, never a node, a
// rollout or a fingerprint: listings and the reaper skip them (IsControlKey).
const KeyFence = "_fence"

// IsControlKey reports whether key is a control key (see KeyFence), not data.
func IsControlKey(key string) bool { return strings.HasPrefix(key, "_") }

// Kinds of things events are about: the <kind> token of an event's subject.
const (
	KindNode        = "node"
	KindRollout     = "rollout"
	KindRevision    = "revision"
	KindIntent      = "intent"
	KindFingerprint = "fingerprint"
	KindLeader      = "leader"
	KindInstance    = "instance" // a service instance or agent acknowledging a pause: id <component>.<instance>
	KindRegistry    = "registry" // a registry the configurator syncs: id its name
	KindFreeze      = "freeze"   // an operator's freeze (sluice freeze add/remove): id its id
	KindControl     = "control"  // a control run from the dashboard, naming who: id its action
	KindGate        = "gate"     // a rollout's gate (docs/rollouts.md, "Gates"): id GateEventID
	// KindQuarantine: a stored value refused at intake (ValueUnreadable):
	// id QuarantineID(bucket, key).
	KindQuarantine = "quarantine"
	// KindStore: the store as a whole (id IDStore): found lost, or its loss
	// confirmed by an operator (pkg/storeloss).
	KindStore = "store"
)

// IDStore is the id of every event of kind store.
const IDStore = "store"

// Store events (kind store, id IDStore).
const (
	// EventStoreLost: the store holds no record of a finished rollout nor
	// the revisions live nodes run (pkg/storeloss); nothing is started
	// until an operator recovers. Emitted once by the configurator.
	EventStoreLost = "StoreLost"
	// EventStoreLossConfirmed: an operator ran `sluice recover
	// --confirm-empty`; the reason names who, and what the rule saw.
	EventStoreLossConfirmed = "StoreLossConfirmed"
	// EventStoreRestored: an operator ran `sluice restore FILE`; the reason
	// names who, the file and when it was taken.
	EventStoreRestored = "StoreRestored"
)

// EventKinds are every kind of event, in the order `sluice events` lists them.
var EventKinds = []string{KindNode, KindRollout, KindRevision, KindIntent, KindFingerprint, KindLeader, KindRegistry, KindInstance, KindFreeze, KindGate, KindControl, KindQuarantine, KindStore}

// GateEventID is the id of an event about gate of rollout: "<rollout>.<gate>".
func GateEventID(rollout, gate string) string { return rollout + "." + gate }

// QuarantineID is the id of the events about the stored value at
// bucket/key (kind quarantine): "<bucket>.<key>".
func QuarantineID(bucket, key string) string { return bucket + "." + key }

// Subjects.
const (
	EventsSubjectPrefix = "sluice.events"
	// NodeConfigSubjectPrefix is where the nodeconfigs bucket republishes every
	// stored write: sluice.nodeconfig.<node>.desired. Agents subscribe here with
	// core NATS instead of holding a JetStream consumer each.
	NodeConfigSubjectPrefix = "sluice.nodeconfig"
	// NodeSubjectPrefix is where an agent answers requests about its own
	// node: sluice.node.<node>.lastgood (LastGoodSubject).
	NodeSubjectPrefix = "sluice.node"

	// ConfiguratorService is the micro service name of the configurator's API.
	ConfiguratorService = "sluice-configurator"
	// SubjectApply takes an ApplyRequest and answers an ApplyResponse (protojson).
	SubjectApply = "sluice.api.configurator.apply"
	// SubjectDelete takes a DeleteRequest and answers a DeleteResponse (protojson).
	SubjectDelete = "sluice.api.configurator.delete"
	// SubjectUndo takes an UndoRequest and answers an UndoResponse (protojson).
	SubjectUndo = "sluice.api.configurator.undo"
	// SubjectPause is where the control bucket republishes control/pause:
	// agents listen here with core NATS (and Get the key on start), as they
	// do for their desired config.
	SubjectPause = "sluice.control.pause"

	// SubjectRetry takes a RetryRequest and answers a RetryResponse (protojson).
	SubjectRetry = "sluice.api.configurator.retry"

	// CoordinatorService is the micro service name every rollout-coordinator
	// instance registers; its metadata says the instance's role (leader or
	// standby) and term.
	CoordinatorService = "sluice-rollout-coordinator"
	// SubjectCoordinatorStatus answers a CoordinatorStatus (JSON) of the
	// instance that takes the request.
	SubjectCoordinatorStatus = "sluice.api.rollout-coordinator.status"
	// ReaperService is the micro service name of the reaper.
	ReaperService = "sluice-reaper"
	// SubjectReaperStatus answers a ReaperStatus (JSON).
	SubjectReaperStatus = "sluice.api.reaper.status"
)

// Leader events (kind leader, id rollout-coordinator): the coordinator emits
// them as its terms start and end; the CLI reads the last one to say since
// when no coordinator leads.
const (
	EventLeadershipAcquired = "LeadershipAcquired" // a term started
	EventLeadershipLost     = "LeadershipLost"     // the lease was taken, expired or could not be renewed in time
	EventLeadershipReleased = "LeadershipReleased" // the leader gave the lease up (it stopped)
)

// CoordinatorStatus is what a rollout-coordinator's status endpoint answers.
type CoordinatorStatus struct {
	Instance string `json:"instance"`
	Version  string `json:"version"`
	// Role is "leader", "standby" or "" while it has not read the lease.
	Role string `json:"role"`
	// Term is the term this instance leads, or the term of the leader it
	// stands by for.
	Term uint64 `json:"term"`
	// LeaseHolder names the instance holding the lease, Since when it has.
	LeaseHolder string    `json:"lease_holder"`
	Since       time.Time `json:"since,omitzero"`
}

// ReaperStatus is what the reaper's status endpoint answers.
type ReaperStatus struct {
	Instance string `json:"instance"`
	Version  string `json:"version"`
	// LastPass is when the last pass ended, zero before the first.
	LastPass time.Time `json:"last_pass,omitzero"`
	// Deleted counts what this process deleted, by kind: nodes, intents, revisions.
	Deleted map[string]uint64 `json:"deleted"`
	// NextPass is when the next pass is due at the latest (the last pass
	// plus the interval; a node's departure brings one sooner).
	NextPass time.Time `json:"next_pass,omitzero"`
	// Kept is why the reaper's last look at the intents marked for deletion
	// (KeptAt) kept each one it did not delete, grouped by reason: the
	// reaper's own decision, which sluice get intents shows.
	Kept   []KeptIntents `json:"kept,omitempty"`
	KeptAt time.Time     `json:"kept_at,omitzero"`
}

// KeptIntents is intents (keys <kind>.<name>, sorted) marked for deletion
// that the reaper kept, and why.
type KeptIntents struct {
	Reason  string   `json:"reason"`
	Intents []string `json:"intents"`
}

// ServiceVersion is a build version as a micro service announces it: micro
// takes semantic versions only, so "v1.2.3" is "1.2.3", and a version that
// is not one ("dev", a commit "905dbcc-dirty") is "0.0.0-<it>" with every
// character semver does not allow replaced by '-'.
func ServiceVersion(build string) string {
	v := strings.TrimPrefix(build, "v")
	if semver.MatchString(v) {
		return v
	}
	var b strings.Builder
	for _, r := range build {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	pre := strings.Trim(b.String(), ".")
	// Empty identifiers ("a..b") and numeric ones with a leading zero are
	// not allowed in a pre-release: keep it one identifier of letters.
	pre = strings.ReplaceAll(pre, ".", "-")
	if pre == "" {
		pre = "unknown"
	}
	if v := "0.0.0-" + pre; semver.MatchString(v) {
		return v
	}
	return "0.0.0-x" + pre
}

// semver is the grammar of semver.org, as nats.go's micro checks it.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// AbortKey is the control key asking the coordinator to abort rollout id.
func AbortKey(rollout string) string { return "abort." + rollout }

// ForgiveKey is the control key asking the coordinator to forgive fingerprint fp.
func ForgiveKey(fp string) string { return "forgive." + fp }

// FreezeKey is the control key of freeze id (a Freeze: no wave starts
// within it).
func FreezeKey(id string) string { return KeyFreezePrefix + "." + id }

// KeyFreezePrefix starts every freeze's control key.
const KeyFreezePrefix = "freeze"

// RolloutPauseKey is the control key pausing one rollout's node operations.
func RolloutPauseKey(rollout string) string { return KeyPause + "." + rollout }

// RegistryKeyPrefix starts every control key of a registry: registry.<name>
// holds its RegistrySpec, registry.<name>.confirm an operator's RegistryConfirm.
const RegistryKeyPrefix = "registry."

// RegistryKey is the control key holding registry name's RegistrySpec.
func RegistryKey(name string) string { return RegistryKeyPrefix + name }

// RegistryConfirmKey is the control key confirming registry name's held deletion.
func RegistryConfirmKey(name string) string { return RegistryKeyPrefix + name + ".confirm" }

// RegistryOfKey returns the registry a control key belongs to and whether it
// is the registry's spec (true) or its confirmation (false).
func RegistryOfKey(key string) (name string, spec, ok bool) {
	rest, found := strings.CutPrefix(key, RegistryKeyPrefix)
	if !found || rest == "" {
		return "", false, false
	}
	if n, isConfirm := strings.CutSuffix(rest, ".confirm"); isConfirm {
		return n, false, n != "" && !strings.Contains(n, ".")
	}
	return rest, true, !strings.Contains(rest, ".")
}

// Intent sources the configurator writes besides registry names.
const (
	SourceAPI  = "api"  // sluice apply: the built-in registry
	SourceUndo = "undo" // sluice undo wrote the intent back
)

// ValidRegistryName checks a registry name: a valid name that is not a
// built-in source.
func ValidRegistryName(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if name == SourceAPI || name == SourceUndo {
		return fmt.Errorf("%q is the name of a built-in source; choose another", name)
	}
	return nil
}

// InstanceKey is the instances key of one service instance.
func InstanceKey(component, instance string) string { return component + "." + instance }

// DesiredKey is the nodeconfigs key holding the config a node should run.
func DesiredKey(node string) string { return node + ".desired" }

// BackupKey is the nodeconfigs key holding the config a node ran before its desired one.
func BackupKey(node string) string { return node + ".backup" }

// NodeOfConfigKey returns the node and the suffix ("desired" or "backup") of a nodeconfigs key.
func NodeOfConfigKey(key string) (node, which string, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i <= 0 {
		return "", "", false
	}
	return key[:i], key[i+1:], true
}

// NodesWithKeys names the nodes that own keys: a status (statusKeys, the
// status bucket's keys) or a desired or backup config (configKeys, the
// nodeconfigs bucket's). Control keys belong to no node.
func NodesWithKeys(statusKeys, configKeys []string) map[string]bool {
	out := map[string]bool{}
	for _, k := range statusKeys {
		if !IsControlKey(k) {
			out[k] = true
		}
	}
	for _, k := range configKeys {
		if n, _, ok := NodeOfConfigKey(k); ok && !IsControlKey(k) {
			out[n] = true
		}
	}
	return out
}

// NodeConfigSubject is the core-NATS subject an agent listens on for its desired config.
func NodeConfigSubject(node string) string {
	return NodeConfigSubjectPrefix + "." + DesiredKey(node)
}

// LastGoodSubject is the core-NATS subject node's agent answers on with
// its last-good config as stored on its disk (a DesiredConfig, protojson;
// `sluice recover --from-nodes` asks it). An agent with no last-good
// answers with the header LastGoodErrorHeader set to its reason and no
// body; one whose last-good does not decode answers the same way.
func LastGoodSubject(node string) string {
	return NodeSubjectPrefix + "." + node + ".lastgood"
}

// LastGoodErrorHeader and LastGoodErrorCodeHeader carry an agent's reason
// for answering LastGoodSubject without a config (the NATS micro error
// headers, so `nats req` shows them): code 404 when the node holds no
// last-good, 500 when it cannot be read.
const (
	LastGoodErrorHeader     = "Nats-Service-Error"
	LastGoodErrorCodeHeader = "Nats-Service-Error-Code"
)

// EventSubject is the subject of an event about id of the given kind.
func EventSubject(kind, id string) string {
	return fmt.Sprintf("%s.%s.%s", EventsSubjectPrefix, kind, id)
}

// ValidName reports whether s can name a node, an intent or a rollout: it must be
// usable as one token of a KV key and a subject, and readable in a shell.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if err := CheckPrintable("the name", s); err != nil {
		return err
	}
	if len(s) > 63 {
		return fmt.Errorf("%s is %s characters, longer than 63", Clip(s), Thousands(len(s)))
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(s)-1:
		default:
			return fmt.Errorf("%q must be lower-case letters, digits and inner '-' (like a DNS label)", s)
		}
	}
	return nil
}

// ValidNodeName reports whether s can name a node: like a Kubernetes node
// name, DNS labels (see ValidName) joined by dots, at most 253 characters.
// Keys and subjects take the dots as separators, and every consumer of a
// node's keys matches them whole (see NodeOfConfigKey), so dots are safe.
func ValidNodeName(s string) error {
	if err := CheckPrintable("the node name", s); err != nil {
		return err
	}
	if len(s) > 253 {
		return fmt.Errorf("%s is %s characters, longer than 253", Clip(s), Thousands(len(s)))
	}
	for _, label := range strings.Split(s, ".") {
		if err := ValidName(label); err != nil {
			return fmt.Errorf("node name %q: each dot-separated part %w", s, err)
		}
	}
	return nil
}

// RolloutID names the rollout of head generation gen of revision rev: the
// generation, then the revision id's first 12 characters ("3-7dffdf3ff99d").
// A restarted coordinator computes the same id, and the configurator finds
// the head's rollout by it.
func RolloutID(gen uint64, rev string) string {
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%d-%s", gen, rev)
}

// RolloutGeneration is the head generation a rollout id (RolloutID) names;
// false for a key that is no rollout id (last-applied, say).
func RolloutGeneration(id string) (uint64, bool) {
	gen, rev, ok := strings.Cut(id, "-")
	if !ok || rev == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(gen, 10, 64)
	return n, err == nil && n > 0
}

// FailedCheckDeadline is the failed_check of a node operation stopped at
// its deadline (OperationDeadline): by its agent (which then restores
// last-good) or, when the agent does not answer, given up by the
// coordinator. Either way the node timed out.
const FailedCheckDeadline = "deadline"

// Operation kinds (the last token of an operation id).
const (
	OpApply  = "apply"
	OpRevert = "revert"
)

// OperationID names the node operation a desired-config write asks for:
// "<rollout>/<node>/apply" or "<rollout>/<node>/revert". A new leader
// computes the same id for the same write.
func OperationID(rollout, node, kind string) string { return rollout + "/" + node + "/" + kind }

// ConfigureOperationID names the operation giving a node outside any rollout
// the configuration in force (fingerprint fp).
func ConfigureOperationID(fp string) string {
	if len(fp) > 12 {
		fp = fp[:12]
	}
	return "configure/" + fp
}

// OperationDeadline is a node operation's deadline, the coordinator's
// DesiredConfig.deadline: how long an agent lets the operation run, once
// it acknowledged it, before stopping it on its own — twice the strategy's
// apply deadline. At the apply deadline itself the coordinator gives the
// node up (timed out) and cancels the operation; the agent's own stop is
// the backstop for when no coordinator leads to do so — time without a
// leader does not count against a node, so it is longer. Within it the
// agent bounds each step itself (services/agent Config: ApplierTimeout,
// ValidateTimeout, CheckDeadline).
func OperationDeadline(applyDeadline time.Duration) time.Duration { return 2 * applyDeadline }
