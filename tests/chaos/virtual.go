package chaos

import "os"

// EnvVirtual, set to 1, runs each seed on virtual time: inside a
// testing/synctest bubble, with the nats-server in-process and every
// connection an in-process pipe, so the clock moves only when every
// goroutine of the seed waits, and a seed costs its processor time, not
// its leases and deadlines. docs/chaos.md, "Seeds on virtual time".
const EnvVirtual = "CHAOS_VIRTUAL"

func virtualTime() bool { return os.Getenv(EnvVirtual) == "1" }

// virtualSkip says why sc cannot run on virtual time ("" = it can): an R3
// cluster's servers talk over TCP routes, and a socket is not a wait the
// bubble's clock can see. (The registry seeds' directory is polled there,
// `--poll`, for the same reason: an inotify watch waits on the kernel.)
func virtualSkip(sc Scenario) string {
	if sc.Cluster {
		return "R3 cluster: its routes are TCP (real time only)"
	}
	return ""
}
