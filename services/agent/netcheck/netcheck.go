// Package netcheck holds the agent's built-in connectivity checks, which let
// a node prove its network still works after an apply without a user
// script: Gateway (the anycast gateways of the applied layer2 networks are in
// place and reach their targets), Peer (an ICMP echo or TCP connect to one
// address, optionally inside a VRF) and Uplink (an interface is up and has
// carrier). Each is an agent.Check; the agent's CheckSpec gives it its
// timeout and retries.
//
// The checks read the host through netlink and raw ICMP sockets (the agent
// runs as root) in the network namespace of the calling thread, so they
// work in whatever namespace the process runs in.
package netcheck

import (
	"time"
)

// DefaultWait is how long a probe waits for an echo reply.
const DefaultWait = time.Second
