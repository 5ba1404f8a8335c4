package frr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/services/agent"
)

// Errors of this package, in one place; match them with errors.Is (and
// *RefusedError with errors.As).
var (
	// ErrInvalidSettings is wrapped by every error of Settings.Validate.
	ErrInvalidSettings = errors.New("invalid FRR settings")
	// ErrInvalidConfig is wrapped by the errors of Render: a config that
	// cannot be rendered to FRR configuration with these settings.
	ErrInvalidConfig = errors.New("config cannot be rendered to FRR configuration")
	// ErrBaseConflict is wrapped by the errors of Merge: the operator's base
	// file defines something sluice renders, or its sluice markers are broken.
	ErrBaseConflict = errors.New("FRR base file conflicts with what sluice renders")
)

// What went wrong talking to FRR. The first three say the node is at fault
// and also match agent.ErrNodeFault: seen by Applier.Validate, before
// anything changed, they keep the config from being blamed (the agent
// reports node_fault).
var (
	// ErrNotInstalled: vtysh or frr-reload.py is not on this host.
	ErrNotInstalled error = &nodeFault{"FRR is not installed"}
	// ErrNotRunning: the instance's daemons (or the one a command needs)
	// do not answer on their sockets.
	ErrNotRunning error = &nodeFault{"FRR is not running"}
	// ErrNoAnswer: vtysh or frr-reload did not finish before the deadline;
	// it was killed.
	ErrNoAnswer error = &nodeFault{"FRR did not answer in time"}
	// ErrRefused: FRR refused a command or a config file (a reload, or
	// Validate's *RefusedError).
	ErrRefused = errors.New("FRR refused it")
)

// What a check found wrong; a check's error wraps one of these, or
// ErrNotRunning / ErrNotInstalled / ErrNoAnswer when it could not ask FRR.
var (
	// ErrNotEstablished: a BGP neighbour's session is not up.
	ErrNotEstablished = errors.New("not established")
	// ErrFewPrefixes: a BGP neighbour sent fewer prefixes than required.
	ErrFewPrefixes = errors.New("too few prefixes")
	// ErrNoNeighbors: FRR has no BGP neighbour at all to check.
	ErrNoNeighbors = errors.New("no BGP neighbour")
	// ErrRouteMissing: a prefix is not in FRR's routing table of its VRF
	// (or no route to it there is selected).
	ErrRouteMissing = errors.New("route missing")
	// ErrNotInKernel: FRR has the route but the kernel's table does not.
	ErrNotInKernel = errors.New("not in the kernel")
)

// nodeFault is an error of FRR itself, not of a config: its text is its
// own and it matches agent.ErrNodeFault.
type nodeFault struct{ msg string }

func (e *nodeFault) Error() string { return e.msg }
func (e *nodeFault) Unwrap() error { return agent.ErrNodeFault }

// RefusedError is FRR's refusal of a file: each line it refused, and its
// whole output. It matches ErrRefused.
type RefusedError struct {
	Problems []Problem
	// Output is vtysh's output, for the node's Invalid record.
	Output string
}

func (e *RefusedError) Error() string {
	if len(e.Problems) == 0 {
		return fmt.Sprintf("%v (vtysh -C): %s", ErrRefused, e.Output)
	}
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return fmt.Sprintf("%v (vtysh -C): %s", ErrRefused, strings.Join(parts, "; "))
}

func (e *RefusedError) Unwrap() error { return ErrRefused }
