package embedded

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// margin: StartCluster and Restart wait up to 30s (readyTimeout, WaitReady)
// for what comes within a second or two.
func TestCluster_StopAndRestartOneServer(t *testing.T) {
	base := t.TempDir()
	dirs := []string{filepath.Join(base, "1"), filepath.Join(base, "2"), filepath.Join(base, "3")}
	c, err := StartCluster(ClusterOptions{Name: "t", StoreDirs: dirs, Ports: []int{-1, -1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	urls := c.ClientURLs()
	if err := c.Restart(1); err == nil || !strings.Contains(err.Error(), "t-2 is running") {
		t.Fatalf("restart of a running server: got %v", err)
	}
	c.Stop(1)
	if c.Server(1) != nil || len(c.Servers()) != 2 {
		t.Fatalf("after stop: %d servers running", len(c.Servers()))
	}
	if err := c.Restart(1); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if len(c.Servers()) != 3 || fmt.Sprint(c.ClientURLs()) != fmt.Sprint(urls) {
		t.Fatalf("after restart: %d servers, URLs %v (were %v)", len(c.Servers()), c.ClientURLs(), urls)
	}
	c.Shutdown()
	c.Shutdown() // safe twice
}
