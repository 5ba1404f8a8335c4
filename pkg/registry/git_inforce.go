// The commit in force of a git registry lives in the registry (git.go)
// only while it is open: a registry opened anew (a configurator that
// starts, a spec stored anew) knows none. The configurator seeds it from
// the registry's stored status before the first fetch, so that a branch
// rewound or rewritten while no configurator watched it is held as a live
// rewind is, not taken as a first answer.

package registry

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
)

// InForceSeeder is a registry whose commit in force can be given from
// what is stored, before its first answer (the git registry).
type InForceSeeder interface {
	// SeedInForce makes hash the commit in force: a head that does not
	// descend from it is ErrHeld. It does nothing once an answer was read.
	SeedInForce(hash string) error
	// HoldUnknown says the commit in force is not known (why): every head
	// is ErrHeld, until the registry is opened anew.
	HoldUnknown(why string)
}

// SeedInForce makes hash the commit in force until an answer is read.
func (r *gitRegistry) SeedInForce(hash string) error {
	if !plumbing.IsHash(hash) {
		return fmt.Errorf("commit in force %q: not a commit hash (40 hexadecimal digits)", hash)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inForce.IsZero() {
		r.inForce = plumbing.NewHash(hash)
	}
	return nil
}

// HoldUnknown holds every head: nothing shows what it must descend from.
func (r *gitRegistry) HoldUnknown(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inForce.IsZero() {
		r.unknown = why
	}
}

// heldUnknown is the error of a head read while the commit in force is unknown.
func (r *gitRegistry) heldUnknown(head plumbing.Hash, msg string) error {
	return fmt.Errorf("%w: the commit in force of branch %s is not known (%s): its head %s (%s) cannot be shown to descend from it; nothing is synced from it — "+
		"to accept the branch as it is re-add the registry (sluice registry add --update)",
		ErrHeld, r.branch, r.unknown, short(head), subject(msg))
}
