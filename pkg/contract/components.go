package contract

import (
	"slices"
)

// Components: who opens the buckets. Each bucket and stream has exactly one
// managing component (Manager); every other component binds to it.
const (
	ComponentConfigurator = "configurator"
	ComponentCoordinator  = "rollout-coordinator"
	ComponentAgent        = "agent"
	ComponentReaper       = "reaper"
	ComponentCLI          = "cli"
)

// allBuckets lists every bucket in the order they are opened.
var allBuckets = []string{
	BucketIntents, BucketRevisions, BucketNodeConfigs, BucketFingerprints,
	BucketStatus, BucketNodes, BucketRollouts, BucketLeases, BucketControl, BucketInstances, BucketRegistries,
}

// managers is the one map of who creates and updates what.
var managers = map[string]string{
	BucketIntents:      ComponentConfigurator,
	BucketRevisions:    ComponentConfigurator,
	StreamEvents:       ComponentConfigurator,
	BucketNodeConfigs:  ComponentCoordinator,
	BucketFingerprints: ComponentCoordinator,
	BucketRollouts:     ComponentCoordinator,
	BucketLeases:       ComponentCoordinator,
	BucketControl:      ComponentCoordinator,
	BucketStatus:       ComponentCoordinator,
	BucketNodes:        ComponentCoordinator,
	BucketInstances:    ComponentCoordinator,
	BucketRegistries:   ComponentConfigurator,
}

// uses lists what a component binds when it uses less than everything.
var uses = map[string][]string{
	ComponentAgent: {BucketNodeConfigs, BucketStatus, BucketNodes, BucketControl, StreamEvents},
}

// atomicBuckets are the buckets whose streams allow atomic batch publishing:
// the coordinator writes them in batches fenced by KeyFence; the reaper
// deletes old revisions in batches fenced on revisions/head.
var atomicBuckets = []string{BucketNodeConfigs, BucketRollouts, BucketFingerprints, BucketRevisions}

// AllBuckets lists every KV bucket sluice has, in the order they are opened.
func AllBuckets() []string { return slices.Clone(allBuckets) }

// AgentBinds lists the streams an agent binds (asks the info of), by
// stream name: its credentials allow exactly these.
func AgentBinds() []string {
	var out []string
	for _, name := range uses[ComponentAgent] {
		if name == StreamEvents {
			out = append(out, name)
		} else {
			out = append(out, StreamOfBucket(name))
		}
	}
	return out
}

// Manager returns the component that creates and updates the bucket or
// stream name, "" if sluice has no such bucket or stream.
func Manager(name string) string { return managers[name] }

// AllowsAtomicPublish reports whether bucket's stream must allow atomic
// batch publishing (JetStream's AllowAtomicPublish).
func AllowsAtomicPublish(bucket string) bool { return slices.Contains(atomicBuckets, bucket) }

// StreamOfBucket is the name of the JetStream stream behind a KV bucket.
func StreamOfBucket(bucket string) string { return "KV_" + bucket }

// Uses lists the buckets and streams component binds, by name: all of them
// for every component but the agent.
func Uses(component string) []string {
	if u := uses[component]; u != nil {
		return slices.Clone(u)
	}
	return append(slices.Clone(allBuckets), StreamEvents)
}

// ValidComponent reports whether name is one of the components above.
func ValidComponent(name string) bool {
	switch name {
	case ComponentConfigurator, ComponentCoordinator, ComponentAgent, ComponentReaper, ComponentCLI:
		return true
	}
	return false
}
