// Package chaos is sluice's seeded fault-schedule suite. A seed picks a
// scenario (fleet size, strategy, which nodes fail their check, are slow or
// never answer) and a fault schedule (leader kills and takeovers, a
// configurator crash, agent kills, leaves and rejoins, a NATS restart,
// garbage values written into the buckets, a registry whose answers drop
// intents and trickle them back, or hold a mass deletion until the harness
// confirms it); the harness runs every real service in
// this process on an embedded nats-server, drives intents through the
// configurator's API (and a directory registry) like a user, and at
// quiescence checks the brief's invariants I1–I8 and the outcome the
// scenario implies (check.go, a pure function over an Observation).
//
// Entry point: TestChaos (CHAOS_SEEDS=n seeds, or CHAOS_SEED=s for one);
// `make chaos SEEDS=n`. See docs/chaos.md.
package chaos
