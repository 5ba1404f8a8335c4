// Package frr puts a node's routing in force through FRR. Entry point:
// NewApplier, the agent's FRR applier (--applier frr, or netlink,frr as
// agent.Appliers). Render turns a NodeConfig and the node's Settings into
// the FRR configuration sluice owns (pure, deterministic); Merge puts it
// into the operator's base file (--frr-base) between markers, keeping
// every line of the base; Validate has FRR itself check the merged file
// (vtysh -C) before anything is applied, so a file FRR refuses makes the
// node Invalid with FRR's line and message; Instance runs vtysh and
// frr-reload.py against one pathspace; the BGP and Route checks read FRR's
// state. Files: applier.go (the applier), render.go, merge.go,
// validate.go, reload.go and vtysh.go (Instance), refresh.go (after a
// reload), state.go and check.go
// (FRR's JSON state, the checks), settings.go, errors.go.
//
// # Applying
//
// Applier.Validate (the agent's pre-apply validation, agent.Validator)
// first asks FRR to answer (Ping): ErrNotRunning, ErrNotInstalled and
// ErrNoAnswer match agent.ErrNodeFault, and seen there, before anything
// applied, they make the failure the node's, not the config's. Then it
// renders, merges and runs vtysh -C, unless that file was accepted or
// reloaded before. Applier.Apply reloads with frr-reload.py only when the
// merged file differs from the last one it reloaded successfully: the
// same file again costs no reload (only Validate's ping). No Diff (frr-reload --test,
// ≈ 0.4 s) is ever run by the applier: after the agent's restart, or
// after a reload that failed (it may have applied part of the file),
// nothing is remembered and the next Apply reloads, frr-reload computing
// the difference itself. A change made by hand to the running config is
// therefore corrected only by the next change of the file or a restart.
// After each reload Apply fires bgpd's pending route-map update (the
// route-map delay timer set to 0 and back to the file's own value), runs
// `clear bgp [vrf X] * soft` and waits Settle (refresh.go): bgpd re-runs
// a changed route map or prefix list — on its sessions and on what
// `import vrf route-map` leaks into a VRF — only when that timer fires
// (5 s), and a soft clear re-runs the neighbours' maps alone, so a route
// check run at once would still see a route the new policy drops. The
// base file is read once, at
// the agent's start; Preflight refuses one FRR rejects there, so a base
// file can never make a config Invalid.
//
// # What sluice renders
//
// Every name it renders starts with NamePrefix ("sluice_"), or, for VRFs,
// with hostnet.PrefixVRF ("vrf-", the VRF devices of the netlink
// applier). The cluster VRF (Settings.ClusterVRF, the default VRF unless
// set) is the VRF every tenant VRF leaks to and from; its BGP instance
// has the neighbours (Settings.Neighbors).
//
// With kernel VRFs (vrfs: kernel, the default), following the layout of
// das-schiff-network-operator's agent-cra-frr template
// (config/agent-cra-frr/frr.conf.tpl; the prefix-list and route-map
// layout of its VRFRouteConfiguration era, pkg/frr/tpl at v0.2.24):
//
//   - Each VRF a layer2 network or VRF route names is a BGP instance
//     `router bgp ASN vrf vrf-<name>` — the kernel VRF device the netlink
//     applier creates, on the table hostnet.VRFTables gives (noted in a
//     comment; FRR learns the table from the device) — that redistributes
//     its connected and static routes in ipv4 and ipv6 unicast.
//   - A VRF route's import items are `ip`/`ipv6 prefix-list
//     sluice_<vrf>_import_<sequence>`, its export items
//     sluice_<vrf>_export_<sequence> (entries seq 5, 10, …, canonical and
//     sorted). Route maps sluice_<vrf>_import_v4/_v6 and
//     sluice_<vrf>_export_v4/_v6 have one `permit <sequence>` entry per
//     route that matches its prefix list; export entries `set community`.
//   - Leaking into a VRF: its instance has `import vrf <cluster>` with
//     `import vrf route-map sluice_<vrf>_import_<fam>`. Out of it: the
//     cluster instance has `import vrf vrf-<name>` for each VRF with
//     exports and one `import vrf route-map sluice_import_<fam>` whose
//     entries `match source-vrf vrf-<name>` and `call` that VRF's export
//     map — das-schiff's rm_<vrf>_import / match source-vrf / call. Only a
//     family with items imports at all: leaking is an allow-list.
//   - The cluster instance has `no bgp ebgp-requires-policy`, as
//     das-schiff's: its policy is at the VRF boundary, not on the
//     neighbours, which get `no bgp default ipv4-unicast` and an explicit
//     `activate` in their address's family (both for an interface).
//
// Where sluice differs from das-schiff: no EVPN (route targets, L3 VNIs:
// no intent carries one, and a layer2 network's VNI is an L2 VNI, which
// must not become a VRF's `vni`), so no `vrf X` block is rendered — FRR
// drops an empty one from its running config, and rendering it would make
// every reload see a change; no management VRF, fabric tagging or
// aggregates; names carry sluice's prefix instead of rm_/pl_; v0.2's veth
// pairs between VRFs are replaced by `import vrf` as in das-schiff's
// current template.
//
// Without kernel VRFs (vrfs: off, e.g. a kernel without CONFIG_NET_VRF,
// like this project's CI hosts) everything routes in the default VRF, as
// the netlink applier does then, and the VRF routes become the policy on
// the neighbours: one `router bgp ASN` (connected and static routes
// redistributed) whose neighbours have `route-map sluice_import_<fam> in`
// (every VRF's import items: what the node accepts) and `route-map
// sluice_export_<fam> out` (every export item, with its community: what
// it announces). Their entries are ordered by sequence (VRF and intent
// name break ties) and numbered 10, 20, …, since sequences of different
// VRFs may coincide; a map with no entries is `deny 65535`. FRR's largest
// entry is 65535, so Render refuses a config with more than 6553 routes
// with items of one direction and family (and, with kernel VRFs, more
// than 6553 VRFs exporting a family: the cluster import map's entries),
// naming the first route past it. FRR's
// eBGP-requires-policy default stays on: every neighbour has a policy.
// FRR's netns-VRF backend (zebra -n) was not chosen: the netlink applier
// puts nothing in per-VRF namespaces, and FRR cannot leak routes between
// namespace VRFs (no next hop across namespaces), which is the point of a
// VRF route.
//
// The rendered text is FRR's own form (indentation, order of neighbours,
// `call` before `match`, IPv4 prefix lists before IPv6), so that after a
// reload `frr-reload.py --test` against the running config shows no line
// of sluice's block (measured with FRR 8.4.4 for both layouts).
//
// # Merge and the base file
//
// The merged file is the base file with one block between BeginMarker and
// EndMarker. A base that defines a sluice-prefixed name, a vrf-* VRF or a
// `router bgp` of a VRF sluice has an instance for is refused with the
// line (Merge's doc). The operator may refer to sluice's maps.
//
// # Validation
//
// Validate runs `vtysh -C -f FILE [-N pathspace]` on a temporary copy of
// the merged file: FRR's parser, no daemon, ≈ 80 ms. It checks syntax in
// context; value rules only the daemons enforce (prefix-list ge/le
// ranges) Render checks itself, with FRR 8.4's rule (mask length <= ge <=
// le).
package frr
