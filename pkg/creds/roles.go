package creds

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Roles: who a user is. Each role has its own scoped signing key in the
// account: the key can only issue users with the role's permissions (the
// template below), whatever the user JWT says, so a stolen node signing key
// mints node users and nothing else.
// The names are the contract's (contract.Role…), where the table of the
// events each role may publish lives.
const (
	RoleConfigurator = contract.RoleConfigurator
	RoleCoordinator  = contract.RoleCoordinator
	RoleReaper       = contract.RoleReaper
	RoleAdmin        = contract.RoleAdmin    // the CLI, everything but the leader lease
	RoleReadOnly     = contract.RoleReadOnly // the CLI's get, events, rollout status
	RoleNode         = contract.RoleNode     // one agent: its own keys and subjects only
)

// Roles lists every role, in the order `sluice creds` shows them.
var Roles = []string{RoleConfigurator, RoleCoordinator, RoleReaper, RoleAdmin, RoleReadOnly, RoleNode}

// Tags on a node user's JWT, read by the node role's permission template:
// node:<name> and inbox:<name with dots as underscores>.
const (
	tagNode  = "node"
	tagInbox = "inbox"
)

// NodeInboxPrefix is the inbox prefix a node's connection must use
// (nats.CustomInboxPrefix): replies to its requests arrive under it, and it
// may subscribe to nothing else of the kind. Dots become underscores so
// that no node's prefix is a prefix of another's (node "a" and node "a.b"
// would otherwise share _INBOX_a.>); node names have no underscores.
func NodeInboxPrefix(node string) string { return "_INBOX_" + inboxToken(node) }

func inboxToken(node string) string {
	b := []byte(node)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// leaseWrites are the subjects that change the leader lease; only the
// coordinator may publish to them.
func leaseWrites() []string {
	s := contract.StreamOfBucket(contract.BucketLeases)
	return []string{
		"$KV." + contract.BucketLeases + ".>",
		"$JS.API.STREAM.CREATE." + s, "$JS.API.STREAM.UPDATE." + s, "$JS.API.STREAM.DELETE." + s,
		"$JS.API.STREAM.PURGE." + s, "$JS.API.STREAM.MSG.DELETE." + s,
	}
}

// permissions is each role's template: what its users may publish and
// subscribe to. Everything not allowed is denied.
func permissions(role string) (jwt.Permissions, error) {
	var p jwt.Permissions
	switch role {
	case RoleCoordinator:
		p.Pub.Allow.Add(">")
		// Events on its own subjects only (contract.EventSubjectOf): a
		// role's events are told apart by where they are, not by what
		// they claim.
		p.Pub.Deny.Add(contract.OthersEventSubjects(role)...)
		p.Sub.Allow.Add(">")
	case RoleConfigurator, RoleReaper, RoleAdmin:
		p.Pub.Allow.Add(">")
		p.Pub.Deny.Add(leaseWrites()...)
		p.Pub.Deny.Add(contract.OthersEventSubjects(role)...)
		p.Sub.Allow.Add(">")
	case RoleReadOnly:
		p.Pub.Allow.Add(
			"$JS.API.INFO", "$JS.API.STREAM.INFO.>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
			"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>",
			// Ordered consumers: KV listings and watches, `sluice events`.
			"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DELETE.>", "$JS.API.CONSUMER.INFO.>",
			"$JS.API.CONSUMER.MSG.NEXT.>", "$JS.FC.>",
			// `nats micro` discovery and the services' status endpoints.
			"$SRV.>", contract.SubjectCoordinatorStatus, contract.SubjectReaperStatus,
		)
		p.Sub.Allow.Add("_INBOX.>")
	case RoleNode:
		node, inbox := "{{tag("+tagNode+")}}", "{{tag("+tagInbox+")}}"
		kv := func(bucket, key string) string { return "$KV." + bucket + "." + key }
		get := func(bucket, key string) string {
			return "$JS.API.DIRECT.GET." + contract.StreamOfBucket(bucket) + "." + kv(bucket, key)
		}
		for _, name := range contract.AgentBinds() {
			p.Pub.Allow.Add("$JS.API.STREAM.INFO." + name)
		}
		p.Pub.Allow.Add(
			"$JS.API.INFO",
			get(contract.BucketNodeConfigs, contract.DesiredKey(node)),
			get(contract.BucketStatus, node),
			get(contract.BucketNodes, node),
			get(contract.BucketControl, contract.KeyPause),
			get(contract.BucketControl, contract.KeyStoreID),
			kv(contract.BucketStatus, node),
			kv(contract.BucketNodes, node),
		)
		// Its events: about its own node, its pause acknowledgement, the
		// values it refused of the keys it reads or owns; no other event
		// subject (a rollout's, another node's). Readers check the rest:
		// what types a node may publish there (pkg/events.Read).
		p.Pub.Allow.Add(contract.NodeEventSubjects(node)...)
		// Its last-good, asked by `sluice recover --from-nodes`: it
		// subscribes to its own subject only, and answers through the
		// response permission (one reply to a message it received, within
		// a minute), never by publishing to an inbox of its choosing. The
		// other subjects it hears (its desired config, the pause) are
		// republished by JetStream without a reply subject.
		p.Sub.Allow.Add(contract.NodeConfigSubject(node), contract.SubjectPause, contract.LastGoodSubject(node), "_INBOX_"+inbox+".>")
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	default:
		return p, fmt.Errorf("role %q: want one of %v", role, Roles)
	}
	return p, nil
}

// ValidRole says whether role names a role.
func ValidRole(role string) error {
	if !slices.Contains(Roles, role) {
		return fmt.Errorf("role %q: want one of %v", role, Roles)
	}
	return nil
}

// RoleOf reads the role a credentials file's user was issued with ("" for
// a user of no sluice role, such as the system account's).
func RoleOf(credsFile string) (string, error) {
	b, err := os.ReadFile(credsFile)
	if err != nil {
		return "", fmt.Errorf("read credentials %s: %w", credsFile, err)
	}
	uc, err := userClaims(b)
	if err != nil {
		return "", fmt.Errorf("credentials %s: %w", credsFile, err)
	}
	for _, t := range uc.Tags {
		if role, ok := strings.CutPrefix(t, "role:"); ok {
			return role, nil
		}
	}
	return "", nil
}
