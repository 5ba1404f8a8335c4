package netcheck

import (
	"errors"
	"fmt"
)

// What a check found wrong, in one place: every error Gateway, Peer and
// Uplink return wraps one of these sentinels; match them with errors.Is.
var (
	// ErrLinkMissing: an interface the check needs does not exist.
	ErrLinkMissing = errors.New("not found")
	// ErrLinkDown: an interface is administratively or operationally down.
	ErrLinkDown = errors.New("down")
	// ErrNoCarrier: an interface is up but has no carrier.
	ErrNoCarrier = errors.New("no carrier")
	// ErrAddressMissing: an address the config puts on an interface is not
	// there, or there is no address to send from.
	ErrAddressMissing = errors.New("address missing")
	// ErrNotInVRF: a network's VRF device exists, but is no VRF or its
	// bridge or gateway device is not in it.
	ErrNotInVRF = errors.New("not in its VRF")
	// ErrNoReply: an echo got no reply in time.
	ErrNoReply = errors.New("no reply")
	// ErrUnreachable: an ICMP error (destination unreachable, time
	// exceeded) came back instead of a reply, or a connection was refused.
	ErrUnreachable = errors.New("unreachable")
)

// failure is an error of one of the kinds above in its own words: its
// message reads naturally ("bridge br.v100 is down") and errors.Is still
// matches its kind.
type failure struct {
	msg  string
	kind error
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Unwrap() error { return f.kind }

// fail returns a failure of kind.
func fail(kind error, format string, a ...any) error {
	return &failure{msg: fmt.Sprintf(format, a...), kind: kind}
}
