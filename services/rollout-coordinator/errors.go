package coordinator

import "errors"

// The errors of the rollout-coordinator that a caller branches on, in one
// place; match them with errors.Is.

// ErrDuplicateInstance is returned by Run when acquiring the leader lease
// finds it held and renewed by another live coordinator that runs with the
// same --instance name (a dead predecessor of that name is waited out).
var ErrDuplicateInstance = errors.New("another rollout-coordinator is running with the same --instance name")
