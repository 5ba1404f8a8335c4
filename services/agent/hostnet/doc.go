// Package hostnet puts a node's config in force on the host's network
// through netlink. Render turns a NodeConfig and the host's parameters
// (Host) into the Linux objects it means — a pure function; Diff compares
// them with the owned objects read from the host and returns the ordered
// ops; an Applier (New, NewAt) reads, renders, diffs and performs them, and
// is the agent's netlink applier.
//
// What each intent becomes, for a layer2 network with VLAN v:
//
//   - Layer2Network: a VXLAN device sl.v<v> (its VNI; the host's VTEP
//     address and/or uplink as source, the VXLAN port, learning off, the
//     network's MTU, 1500 when unset) enslaved to a bridge br.v<v> (same
//     MTU, a MAC of its own). The bridge carries this node's own address in
//     the network, Host.NodeAddresses[v], if any. With anycast gateways, a
//     macvlan gw.v<v> on the bridge has Host.AnycastMAC — the same on every
//     node — and the gateway addresses, IPv4 and IPv6, without duplicate
//     address detection; the bridge keeps a local FDB entry for that MAC.
//     Bridge and gateway answer ARP only for their own addresses. With the
//     network's VRF and vrfs: kernel, both are enslaved to the VRF's device.
//     With Host.FloodPeers, the VXLAN device has an all-zeros FDB entry per
//     peer.
//   - Every VRF a layer2 network or VRF route names: a VRF device vrf-<name>
//     (VRFName) bound to its table — the table id of the RoutingTable intent
//     of the same name plus Host.TableOffset, else Host.VRFTableBase +
//     FNV-32a(name) % 100000 (VRFTables, which the FRR applier shares).
//     Two VRF devices on one table are an error.
//   - RoutingTable: a VRF device tbl.<id> bound to table id + TableOffset,
//     unless a VRF of the intent's name is bound to it.
//   - VRFRoute: nothing in the kernel, which has no route maps: an entry in
//     the routing-daemon document (RoutingConfig), written to
//     Host.RoutingDaemonFile for FRR or similar.
//
// With vrfs: off there are no VRF or table devices and everything routes in
// the main table: no isolation between tenants.
//
// The anycast gateway is a device of its own, not the bridge's address,
// because a node's own address must send from a MAC of its own: a peer
// answers a request from the anycast MAC to that MAC, which is its own
// bridge's, and the answer never leaves the peer. So the bridge has a
// unique MAC and the node address; the gateway answers with the anycast
// MAC. When the node address's prefix covers a gateway's, the gateway
// address adds no prefix route, so traffic into the network leaves from
// the bridge with the node's own address and MAC.
//
// Every link the applier creates has a deterministic name with a sluice
// prefix (names.go) and carries the link alias Alias. It owns exactly the
// links that have both — their MTU, MAC, ARP policy, master, up state,
// addresses (except IPv6 link-local ones, which the kernel adds) and FDB
// entries (on VXLAN devices only the all-zeros ones, and only with
// FloodPeers) — and never touches any other link. A foreign link enslaved to
// an owned bridge stays enslaved.
package hostnet
