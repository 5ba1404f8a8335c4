package chaos

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBubbleWaits(t *testing.T) {
	const (
		durable = "goroutine 7 [select (durable), 1 minutes, synctest bubble 1]:\nmain.f()\n\n"
		mutex   = "goroutine 340 [sync.RWMutex.RLock, synctest bubble 1]:\nnats.useOldRequestStyle()\n\n"
		outside = "goroutine 2 [chan receive]:\ntesting.tRunner()\n\ngoroutine 1 [running]:\nmain.watchdog()\n\n"
	)
	for _, tc := range []struct {
		name, dump, want string
	}{
		{"every goroutine of the bubble waits durably", durable + outside, ""},
		{"one waits on a lock, none runs", durable + mutex + outside, "goroutine 340 [sync.RWMutex.RLock"},
		{"one waits on a lock while another runs", durable + mutex + "goroutine 9 [running, synctest bubble 1]:\n\n", ""},
		{"one waits on a lock while another is runnable", mutex + "goroutine 9 [runnable, synctest bubble 1]:\n\n", ""},
		{"one waits on a lock while another is in a system call", mutex + "goroutine 9 [syscall, synctest bubble 1]:\n\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bubbleWaits(tc.dump); got != tc.want {
				t.Fatalf("bubbleWaits = %q, want %q", got, tc.want)
			}
		})
	}
}

// envWatchdogChild names the bubble TestWatchdog runs in a child process.
const envWatchdogChild = "CHAOS_WATCHDOG_CHILD"

// The watchdog ends a bubble whose clock stands still within seconds, and
// never one whose clock stands still because a goroutine of it works long
// between two ticks (a loaded machine).
func TestWatchdog(t *testing.T) {
	if kind := os.Getenv(envWatchdogChild); kind != "" {
		lookAfter, stillFor = time.Second, 20*time.Second
		watchdogChild(t, kind)
		return
	}
	for _, tc := range []struct {
		kind      string
		wantExit  int
		wantMatch string
	}{
		{"still", 3, `CHAOS HARNESS FAIL seed=0: still running on virtual time: its clock has not moved for \ds of real time and no goroutine of it runs; repro: .*\nwaiting on what the clock cannot see .*\ngoroutine \d+ \[sync.Mutex.Lock\n`},
		{"slow", 0, `its clock stood still at most [2-9]\.\d+s of real time`},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestWatchdog$", "-test.count", "1", "-test.v")
			cmd.Env = append(os.Environ(), envWatchdogChild+"="+tc.kind)
			out, _ := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the child did not end within 15 s:\n%s", out)
			}
			if got := cmd.ProcessState.ExitCode(); got != tc.wantExit {
				t.Fatalf("exit %d, want %d:\n%s", got, tc.wantExit, out)
			}
			if !regexp.MustCompile(tc.wantMatch).Match(out) {
				t.Fatalf("output does not match %q:\n%s", tc.wantMatch, firstLines(string(out), 20))
			}
		})
	}
}

// watchdogChild runs a bubble as a seed does, watched: "still" stands its
// clock still (a sync.Mutex held across a sleep), "slow" holds it 3 s of
// real time with a goroutine that works.
func watchdogChild(t *testing.T, kind string) {
	var clock bubbleClock
	stop := watchdog(0, &clock)
	var spun atomic.Bool
	spin := make(chan struct{})                                           // made outside the bubble: closing it inside is no wait
	go func() { <-spin; time.Sleep(3 * time.Second); spun.Store(true) }() // real time, from the spin's start
	synctest.Test(t, func(t *testing.T) {
		ticks := make(chan struct{})
		t.Cleanup(func() { close(ticks) })
		go clock.tick(ticks)
		time.Sleep(time.Second)
		switch kind {
		case "still":
			var mu sync.Mutex
			mu.Lock()
			go func() { time.Sleep(time.Second); mu.Unlock() }()
			mu.Lock() // not a durable wait: the sleeper's second never comes
			mu.Unlock()
		case "slow":
			close(spin)
			for !spun.Load() { // work that holds the clock 3 s
			}
		}
		time.Sleep(time.Second)
	})
	t.Logf("seed 0: its clock stood still at most %s", stop())
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
