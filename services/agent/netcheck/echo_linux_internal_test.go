package netcheck

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A check whose deadline passed before its first echo (a slow preamble on a
// loaded machine) says so, instead of a wait of zero or less.
func TestEcho_DeadlinePassedBeforeTheFirstEcho_SaysNoEchoWasSent(t *testing.T) {
	p, err := openPinger(context.Background(), false, netip.Addr{}, "")
	if err != nil {
		t.Fatalf("open a pinger (needs root): %v", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-50*time.Millisecond))
	defer cancel()
	res := p.echo(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	if len(res) != 1 {
		t.Fatalf("got %d results, want 1", len(res))
	}
	err = res[0].err
	if !errors.Is(err, ErrNoReply) || !strings.Contains(err.Error(), "no echo sent: the check's time ran out ") {
		t.Errorf("err = %v, want ErrNoReply saying no echo was sent", err)
	}
	if res[0].sent != 0 {
		t.Errorf("sent %d echoes after the deadline", res[0].sent)
	}
}
