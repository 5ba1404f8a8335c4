//go:build unix

package testaddr_test

import (
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testaddr"
)

// A held address refuses connections, and a listener started on it later
// binds it.
func TestHeld_RefusesThenCanBeListenedOn(t *testing.T) {
	addr := testaddr.Held(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("a connection to the held %s was accepted", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the held %s: %v", addr, err)
	}
	ln.Close()
}
