package sshsig

import "errors"

// The errors Verify returns, in one place; match them with
// errors.Is.
var (
	// ErrMalformed: the signature is not an SSHSIG envelope that parses.
	ErrMalformed = errors.New("not a well-formed SSH signature")
	// ErrBadSignature: the signature does not verify over the message.
	ErrBadSignature = errors.New("bad signature")
	// ErrUnknownKey: it verifies, by a key no allowed signer has for the namespace.
	ErrUnknownKey = errors.New("signed by a key that is not an allowed signer")
)
