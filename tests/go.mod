module github.com/sluicehq/sluice/tests

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/services/agent v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/services/configurator v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/services/reaper v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/services/rollout-coordinator v0.0.0-00010101000000-000000000000
)

replace (
	github.com/sluicehq/sluice => ../
	github.com/sluicehq/sluice/services/agent => ../services/agent
	github.com/sluicehq/sluice/services/configurator => ../services/configurator
	github.com/sluicehq/sluice/services/reaper => ../services/reaper
	github.com/sluicehq/sluice/services/rollout-coordinator => ../services/rollout-coordinator
)
