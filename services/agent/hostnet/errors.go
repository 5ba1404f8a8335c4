package hostnet

import "errors"

// Errors of this package; match them with errors.Is.
var (
	// ErrInvalidHost is wrapped by every error of Host.Validate.
	ErrInvalidHost = errors.New("invalid host network settings")
	// ErrInvalidConfig is wrapped by the errors of Render: a config this
	// host cannot put in force.
	ErrInvalidConfig = errors.New("config cannot be rendered for this host")
	// ErrNoVRFSupport means the kernel cannot create VRF devices.
	ErrNoVRFSupport = errors.New("kernel has no VRF support (CONFIG_NET_VRF); set vrfs: off in the agent's netlink settings")
	// ErrNameTaken means a link the config needs exists on the host but is
	// not owned by sluice (it lacks the alias "sluice"): the applier never
	// touches it.
	ErrNameTaken = errors.New("link name is taken by a link sluice does not own")
	// ErrTableTaken means a VRF of the config would be on the kernel table
	// of a VRF device sluice does not own.
	ErrTableTaken = errors.New("kernel table is taken by a VRF sluice does not own")
)
