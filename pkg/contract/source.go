package contract

import (
	"fmt"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Provenance: the configurator records in the head where the change that
// moved it came from (Head.source: the registry, and for a git registry the
// commit its sync read), and the coordinator copies it into the rollout it
// starts from that head (Rollout.source). SourceLine is how the events,
// the CLI and the dashboard say it, so that they all say it the same way.

// ShortHash is a commit's hash as git log --oneline shows it: 12 digits.
func ShortHash(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// SourceLine says where a head or rollout came from: "git registry gitops
// commit 0123456789ab (Ada Admin: add tenant a)" for a git registry's
// sync, "registry redis1" for another registry's; "" when src is unset (a
// change made through the API, or a record written before provenance).
func SourceLine(src *sluicev1.Source) string {
	if src.GetRegistry() == "" {
		return ""
	}
	c := src.GetCommit()
	if c == nil {
		return "registry " + src.GetRegistry()
	}
	who, _, _ := strings.Cut(c.GetAuthor(), " <")
	return fmt.Sprintf("git registry %s commit %s (%s: %s)", src.GetRegistry(), ShortHash(c.GetHash()), who, c.GetSubject())
}
