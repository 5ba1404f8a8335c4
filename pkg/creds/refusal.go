package creds

import (
	"regexp"
	"slices"
	"strings"
)

// violation is the server's permission error as nats.go passes it on:
// `nats: permissions violation: Permissions Violation for Publish to "X"`
// (or `for Subscription to "X"`, with ` using queue "Q"` after it).
var violation = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// RolesAllowed reads a permission error of the server and returns what was
// refused — "publish" or "subscribe" — the subject, and the roles whose users
// may do it, in the order of Roles. The node role, whose permissions name
// the user's own node, is never among them. ok is false when err is not a
// permission error of the server's.
func RolesAllowed(err error) (verb, subject string, roles []string, ok bool) {
	m := violation.FindStringSubmatch(err.Error())
	if m == nil {
		return "", "", nil, false
	}
	verb, subject = "publish", m[2]
	if m[1] == "Subscription" {
		verb = "subscribe"
	}
	for _, role := range Roles {
		if role == RoleNode {
			continue
		}
		p, perr := permissions(role)
		if perr != nil {
			continue
		}
		allow, deny := p.Pub.Allow, p.Pub.Deny
		if verb == "subscribe" {
			allow, deny = p.Sub.Allow, p.Sub.Deny
		}
		if slices.ContainsFunc(allow, func(f string) bool { return subjectMatches(f, subject) }) &&
			!slices.ContainsFunc(deny, func(f string) bool { return subjectMatches(f, subject) }) {
			roles = append(roles, role)
		}
	}
	return verb, subject, roles, true
}

// subjectMatches says whether the literal subject matches filter, whose
// tokens may be * (one token) and, last, > (one or more).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return i == len(ft)-1 && len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}
