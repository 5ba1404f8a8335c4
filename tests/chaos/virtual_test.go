package chaos

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	_ "github.com/nats-io/nats-server/v2/server/ats"
)

// nats-server's stores read the time from its access-time service (package
// ats): a goroutine that stores time.Now every 100 ms, started by the first
// store and stopped, through the package-level channel atsDone, by the last.
// On virtual time it must run inside the seed's bubble, or the stores would
// stamp and expire messages on the real clock while everything else runs on
// the bubble's (every key with a TTL expired at the first check). A channel
// made outside the bubble is no durable wait for a goroutine inside it (the
// clock would stand still), so each bubble gets its own atsDone, made in it
// (inBubbleAccessTime), and the refcount must be back to 0 between bubbles.
//
//go:linkname atsDone github.com/nats-io/nats-server/v2/server/ats.done
var atsDone chan struct{}

//go:linkname atsRefs github.com/nats-io/nats-server/v2/server/ats.refs
var atsRefs atomic.Int64

// inBubbleAccessTime, called inside a seed's bubble before its server
// starts, gives nats-server's access-time service a stop channel of this
// bubble. It panics if an earlier seed's server still holds the service.
func inBubbleAccessTime() {
	if n := atsRefs.Load(); n != 0 {
		panic(fmt.Sprintf("nats-server's access-time service is still held %d time(s) by an earlier seed's stores", n))
	}
	atsDone = make(chan struct{}, 1)
}

// stuckAfter is how long, in real time, a seed on virtual time may take.
// A passing seed takes a second or two; one that takes this long has a
// goroutine waiting on something the bubble's clock does not count (a
// sync.Mutex held across a sleep, a socket), so its clock stands still and
// it would never end.
const stuckAfter = 90 * time.Second

// watchdog, started outside the seed's bubble, prints every goroutine and
// ends the run when seed has not ended within stuckAfter of real time.
func watchdog(seed uint64) *time.Timer {
	return time.AfterFunc(stuckAfter, func() {
		fmt.Fprintf(os.Stderr, "CHAOS HARNESS FAIL seed=%d: still running after %s of real time on virtual time: its clock stands still, some goroutine waits on what the bubble cannot see (below: the goroutine not \"durable\"); repro: CHAOS_VIRTUAL=1 %s\n", seed, stuckAfter, Repro(seed))
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		os.Exit(3)
	})
}
