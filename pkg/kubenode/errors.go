package kubenode

import "errors"

// The errors Watch returns at start, in one place; match them with
// errors.Is.
var (
	// ErrNodeNotFound: no Node has the name given (--node is not the
	// Kubernetes node name, or the Node was deleted).
	ErrNodeNotFound = errors.New("node not found")
	// ErrForbidden: the credentials may not get, list or watch nodes.
	ErrForbidden = errors.New("not allowed to read nodes")
)
