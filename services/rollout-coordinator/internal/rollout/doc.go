// Package rollout is the rollout-coordinator's whole decision logic, as a
// pure function: Decide(state, event, now) updates the state and returns the
// actions for the loop to perform. It does no I/O, reads no clock and never
// depends on map iteration order; its imports are limited to proto, render
// and contract. Every effect is explicit: the loop performs the actions in
// order and never re-derives a decision from a phase.
//
// The files follow the concerns: state.go (what is known of each node),
// facts.go (what is kept of each stored value, and what nodes share),
// lifecycle.go (load, start, resume), place.go (where each node stands
// when a rollout starts or resumes), finish.go (how a rollout ends and the
// records kept), scheduling.go (waves, domains), bake.go (the bake
// between stages, across pauses and terms), outcomes.go (agents' reports and what the record keeps of them),
// deadlines.go (pickup and apply deadlines, timeouts), presence.go (nodes
// joining, coming back, leaving), flight.go (the nodes in flight and their
// deadlines), queue.go (the pending and revert queues),
// revert.go and guards.go (known-bad fingerprints, nodes outside a rollout),
// pairs.go (redundancy groups), domains.go (failure-domain stages of up to
// maxUnprovenDomains values), bakechecks.go (re-run checks while baking),
// gates.go (metric and alert gates), rereads.go (what the loop is asked to
// read again, and the answers), storeloss.go (no rollout starts while the
// store is lost), incompatible.go (nodes whose agent cannot read their
// target).
// docs/rollouts.md draws the state machine.
//
// Cost: the state keeps about 700 bytes per node, and no event but a
// term's load, a rollout's start or end, or an operator's pause or resume
// costs work that grows with the fleet or with maxParallel (cost_test.go,
// memory_test.go).
//
// # The loop's contract
//
// What the loop (services/rollout-coordinator/loop.go) and Decide promise
// each other:
//
//   - One step: the loop turns one thing that happened (the term's load,
//     a watched change, a timer tick, a gate measurement, a landed write)
//     into an Event and calls Decide(state, event, now). Decide
//     changes the state and returns []Action; the loop performs them in
//     the order returned (the writes through its effects interface,
//     effects.go) and never looks at a phase or decides anything itself.
//   - Events after the writes they describe: a step's actions are the
//     ones it queued (writes, reads, AckPause, WatchGates), in the order
//     decided, then SaveRollout when the record changed (Flush set when
//     the step emits events: written before them), then one Emit per
//     event (its time, unless set, the step's now). A WriteDesired
//     carries its node's events, emitted once that write landed; each
//     landed write comes back as a Written event, after the step.
//   - Reads are answered after the step: the answers of a step's reads
//     (ReadStatuses → Rechecked, ReadDesired → DesiredRead) are decided,
//     in order, only after every action of the step was performed, never
//     between two of them.
//   - Settle: one Decide fills and finishes until the rollout in progress
//     stays the same, at most settleRounds (4) rounds; a chain still moving
//     then is reported as a DecisionUnsettled event, and the next event
//     continues it (settle_test.go).
//   - Reach: the package imports only the standard library, protobuf
//     (proto, durationpb, timestamppb), proto/sluicev1, pkg/contract and
//     pkg/render (tests/layers, TestDeciderImports).
package rollout
