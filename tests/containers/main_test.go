//go:build containers

package containers

import (
	"os"
	"testing"

	tclog "github.com/testcontainers/testcontainers-go/log"
)

// TestMain sets testcontainers up before anything of it runs:
//
//   - its reaper (Ryuk) is off: its image would have to be pulled, and
//     nothing can be pulled here. Every test removes its containers and
//     network itself (cluster.cleanup, through t.Cleanup);
//   - published ports are reached on 127.0.0.1, where the tests publish
//     them. testcontainers would otherwise take a machine with /.dockerenv
//     (this one has it) for a container and dial the Docker bridge's
//     gateway instead;
//   - its own progress lines are dropped: the tests log what they do, and
//     dump every container's log when they fail.
func TestMain(m *testing.M) {
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	tclog.SetDefault(tclog.NewNoopLogger())
	os.Exit(m.Run())
}
