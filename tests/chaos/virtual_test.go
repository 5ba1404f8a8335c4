package chaos

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
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

// A seed on virtual time stands still when a goroutine of its bubble waits
// on what the bubble's clock does not count (a sync.Mutex held by one that
// waits on a timer, a socket): the clock stops, and the seed would never
// end. The watchdog, outside the bubble, sees the clock through ticks, a
// goroutine inside it that stores the bubble's time every tickEvery of
// virtual time (it sleeps: a durable wait that never holds the clock).
// While the seed runs and that time has not moved for lookAfter of real
// time, the watchdog looks at the bubble's goroutines every second; two
// looks in a row that find none of them running, runnable or in a system
// call, and the same ones waiting on something not durable, mean the
// clock stands still. A slow seed (a loaded machine, a long stretch of
// work between two ticks) always has a goroutine running or runnable, so
// it is never taken for one standing still however slow it is. stillFor
// ends a seed whose clock has not moved for that long whatever its
// goroutines do (one spinning forever), stuckAfter one still running then.
// (Variables only so that the watchdog's own test can shorten them.)
var (
	tickEvery  = 100 * time.Millisecond
	lookAfter  = 5 * time.Second
	stillFor   = time.Minute
	stuckAfter = 5 * time.Minute
)

// bubbleClock is a bubble's time as its ticks last stored it (Unix ns).
type bubbleClock struct{ now atomic.Int64 }

// tick, run in the bubble, stores the bubble's time every tickEvery until
// stop is closed.
func (c *bubbleClock) tick(stop <-chan struct{}) {
	t := time.NewTimer(tickEvery)
	defer t.Stop()
	for {
		c.now.Store(time.Now().UnixNano())
		select {
		case <-stop:
			return
		case <-t.C:
			t.Reset(tickEvery)
		}
	}
}

// stillest is the longest a bubble's clock stood still: for how long in
// real time, and when in its virtual time (from its first tick).
type stillest struct{ real, at time.Duration }

func (s stillest) String() string {
	return fmt.Sprintf("%s of real time (%s into the seed's virtual time)", s.real.Round(10*time.Millisecond), s.at.Round(10*time.Millisecond))
}

// watchdog, started outside the seed's bubble, prints every goroutine and
// ends the run when the bubble's clock stands still (above); stop ends it
// and says when its clock stood still longest.
func watchdog(seed uint64, clock *bubbleClock) (stop func() stillest) {
	done := make(chan stillest)
	go func() {
		start := time.Now()
		// last is 0 until the watchdog first sees a tick, which then
		// counts as a move: a bubble that ticked (its virtual sleeps take
		// no real time) before this goroutine first ran is still watched.
		var last int64
		since := start
		var first int64 // the bubble's first tick seen
		var longest stillest
		var prev string // the bubble's non-durable waits at the last look, "" = busy
		var looked time.Time
		tk := time.NewTicker(tickEvery)
		defer tk.Stop()
		for {
			select {
			case done <- longest:
				return
			case <-tk.C:
			}
			if n := clock.now.Load(); n != last {
				if first == 0 {
					first = n
				}
				last, since, prev = n, time.Now(), ""
			}
			still := time.Since(since)
			if still > longest.real && first != 0 {
				longest = stillest{real: still, at: time.Duration(last - first)}
			}
			var why, waits string
			switch {
			case time.Since(start) >= stuckAfter:
				why = fmt.Sprintf("still running after %s of real time", stuckAfter)
			case still >= stillFor:
				why = fmt.Sprintf("its clock has not moved for %s of real time", still.Round(time.Second))
			case still >= lookAfter && time.Since(looked) >= time.Second:
				looked = time.Now()
				if waits = standingStill(); waits != "" && waits == prev {
					why = fmt.Sprintf("its clock has not moved for %s of real time and no goroutine of it runs", still.Round(time.Second))
				}
				prev = waits
			}
			if why != "" {
				fmt.Fprintf(os.Stderr, "CHAOS HARNESS FAIL seed=%d: still running on virtual time: %s; repro: CHAOS_VIRTUAL=1 %s\nwaiting on what the clock cannot see (below, every goroutine; those of the bubble not \"durable\" hold its clock):\n%s\n\n", seed, why, Repro(seed), waits)
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
				os.Exit(3)
			}
		}
	}()
	return func() stillest { return <-done }
}

// standingStill lists the goroutines of the bubble that wait on something
// not durable ("goroutine 340 [sync.RWMutex.RLock"), one a line, when no
// goroutine of it runs, is runnable or is in a system call; "" otherwise.
func standingStill() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return bubbleWaits(b.String())
}

// bubbleWaits is standingStill on a goroutine dump.
func bubbleWaits(dump string) string {
	var waits []string
	for _, line := range strings.Split(dump, "\n") {
		head, ok := strings.CutPrefix(line, "goroutine ")
		if !ok || !strings.HasSuffix(head, "]:") || !strings.Contains(head, ", synctest bubble ") {
			continue
		}
		id, state, _ := strings.Cut(strings.TrimSuffix(head, "]:"), " [")
		status, _, _ := strings.Cut(state, ",") // "select (durable)", "sync.Mutex.Lock", "running"
		switch {
		case strings.HasPrefix(status, "running"), strings.HasPrefix(status, "runnable"), strings.HasPrefix(status, "syscall"):
			return ""
		case !strings.Contains(status, "(durable)"):
			waits = append(waits, "goroutine "+id+" ["+status)
		}
	}
	return strings.Join(waits, "\n")
}
