// Package containers runs sluice as it is deployed: the images `make images`
// builds, on a private Docker network of this machine's engine, through
// testcontainers-go — a three-server NATS JetStream cluster with R3 buckets,
// two rollout-coordinators, the configurator, the reaper and four agents in
// two zones of two racks. Its tests put faults into that system (a NATS
// server killed, the leading coordinator killed, an agent cut off the
// network, an agent restarted mid-apply) and check the invariants from the
// outside, through the buckets, as an operator's tools would see them; one
// test runs the nats CLI against it.
//
// The tests carry the build tag "containers", so `make test` does not run
// them; `make e2e-containers` builds the images and the nats CLI, then runs
//
//	go test -tags containers -count=1 -timeout 30m ./tests/containers/...
//
// Images are sluice/<binary>:<tag> (SLUICE_IMAGE_PREFIX, default "sluice";
// SLUICE_IMAGE_TAG, default "dev"); nothing is pulled. The nats CLI is
// bin/nats (SLUICE_NATSCLI overrides). docs/deploy.md ("Container tests")
// describes each scenario and what it asserts.
package containers
