package netcheck

import (
	"net/netip"
	"strings"
)

// Flags the kernel reports that package net does not name, from
// linux/if.h and linux/if_addr.h (spelled out so the package builds on
// every OS).
const (
	iffLowerUp       = 0x10000 // IFF_LOWER_UP: the device has carrier
	ifaFlagDADFailed = 0x08    // IFA_F_DADFAILED
	ifaFlagTentative = 0x40    // IFA_F_TENTATIVE: duplicate address detection is running
)

// ifaceAddr is an address on an interface.
type ifaceAddr struct {
	prefix netip.Prefix
	flags  int
}

// usable reports whether packets can be sent from a: it is not waiting for
// or failed duplicate address detection.
func (a ifaceAddr) usable() bool { return a.flags&(ifaFlagTentative|ifaFlagDADFailed) == 0 }

// state says why a is not usable ("" when it is).
func (a ifaceAddr) state() string {
	switch {
	case a.flags&ifaFlagDADFailed != 0:
		return "duplicate address detection failed"
	case a.flags&ifaFlagTentative != 0:
		return "tentative: duplicate address detection has not finished"
	}
	return ""
}

// prefixes lists as for messages: "10.100.0.11/24, fd00::11/64" or "none".
func prefixes(as []ifaceAddr) string {
	if len(as) == 0 {
		return "none"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.prefix.String()
	}
	return strings.Join(s, ", ")
}
