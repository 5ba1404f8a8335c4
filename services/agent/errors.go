package agent

import "errors"

// The errors of package agent that a caller branches on, in one place;
// match them with errors.Is.

// ErrNodeFault is matched by a Validator's error when the node cannot apply
// any config now (the FRR applier: FRR is not installed, not running, or
// does not answer), found before anything on the node changed. Only at
// validate does it make a failure the node's: the same error from an apply
// or a check, after the config changed something, stays the config's (it
// may be what stopped the daemon).
var ErrNodeFault = errors.New("the node cannot apply any config")
