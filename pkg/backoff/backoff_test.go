package backoff

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func constRand(x float64) func() float64 { return func() float64 { return x } }

func TestPolicy_GrowsExponentiallyFromBase(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Cap: time.Hour}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}
	for n, w := range want {
		if got := p.Ceiling(n); got != w {
			t.Errorf("Ceiling(%d) = %s, want %s", n, got, w)
		}
	}
}

func TestPolicy_NeverAboveCap(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want time.Duration // the ceiling reached
	}{
		{name: "doubling reaches the cap", p: Policy{Base: 50 * time.Millisecond, Cap: 5 * time.Second}, want: 5 * time.Second},
		{name: "a cap below the base is the base", p: Policy{Base: time.Second, Cap: time.Millisecond}, want: time.Second},
		{name: "no cap is the base", p: Policy{Base: time.Second}, want: time.Second},
		{name: "a huge cap does not overflow", p: Policy{Base: time.Nanosecond, Cap: 1<<63 - 1}, want: 1<<63 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, j := range []Jitter{Equal, Full} {
				p := tt.p
				p.Jitter, p.Rand = j, constRand(1)
				for n := range 200 { // far past the cap: 2^200 would overflow
					if d := p.Delay(n); d > tt.want || d < 0 {
						t.Fatalf("jitter %d: Delay(%d) = %s, want within [0, %s]", j, n, d, tt.want)
					}
				}
				if got := p.Ceiling(1000); got != tt.want {
					t.Errorf("Ceiling(1000) = %s, want %s", got, tt.want)
				}
			}
		})
	}
}

func TestPolicy_FullJitterSpreadsFromZero(t *testing.T) {
	p := Policy{Base: time.Second, Cap: time.Second, Jitter: Full}
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, 0}, {0.25, 250 * time.Millisecond}, {0.5, 500 * time.Millisecond}} {
		p.Rand = constRand(tt.r)
		if got := p.Delay(0); got != tt.want {
			t.Errorf("rand %.2f: Delay = %s, want %s", tt.r, got, tt.want)
		}
	}
	p.Rand = nil // the real source: every delay in [0, 1s), not all alike
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(0)
		if d < 0 || d >= time.Second {
			t.Fatalf("Delay = %s, want within [0, 1s)", d)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Errorf("%d distinct delays in 1000: not jittered", len(seen))
	}
}

func TestPolicy_EqualJitterKeepsAtLeastHalf(t *testing.T) {
	p := Policy{Base: time.Second, Cap: time.Second} // Equal is the default
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, 500 * time.Millisecond}, {0.5, 750 * time.Millisecond}, {1, time.Second}} {
		p.Rand = constRand(tt.r)
		if got := p.Delay(0); got != tt.want {
			t.Errorf("rand %.2f: Delay = %s, want %s", tt.r, got, tt.want)
		}
	}
	p.Rand = nil
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(0)
		if d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("Delay = %s, want within [500ms, 1s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Errorf("%d distinct delays in 1000: not jittered", len(seen))
	}
}

func TestBackoff_NextGrowsAndResetStartsAgain(t *testing.T) {
	b := New(Policy{Base: 100 * time.Millisecond, Cap: 400 * time.Millisecond, Jitter: Full, Rand: constRand(1)})
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Next ×5 = %v, want %v", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Errorf("Next after Reset = %s, want the base 100ms", d)
	}
}

func TestBackoff_WaitSleepsOnTheInjectedClockAndEndsWithCtx(t *testing.T) {
	var slept []time.Duration
	fired := make(chan time.Time)
	close(fired) // every wait ends at once
	b := New(Policy{Base: time.Second, Cap: 4 * time.Second, Rand: constRand(0),
		After: func(d time.Duration) <-chan time.Time { slept = append(slept, d); return fired }})
	for range 3 {
		if err := b.Wait(context.Background()); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} // equal jitter, rand 0: half of each
	for i := range want {
		if len(slept) != len(want) || slept[i] != want[i] {
			t.Fatalf("slept %v, want %v", slept, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := New(Policy{Base: time.Hour, After: func(time.Duration) <-chan time.Time { return nil }})
	if err := never.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with ctx cancelled = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, time.Hour, nil); !errors.Is(err, context.Canceled) { // the real timer
		t.Errorf("Sleep with ctx cancelled = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond, nil); err != nil {
		t.Errorf("Sleep 1ms = %v", err)
	}
}

func TestBackoff_SharedByGoroutines(t *testing.T) {
	b := New(Policy{Base: time.Millisecond, Cap: time.Second, Rand: constRand(1)})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if d := b.Next(); d > time.Second {
					t.Errorf("Next = %s, above the cap", d)
				}
			}
		})
	}
	wg.Wait()
	if d := b.Next(); d != time.Second {
		t.Errorf("after 800 retries Next = %s, want the cap", d)
	}
}

func TestSpread_StaysWithinTheShareAroundTheMean(t *testing.T) {
	d := 50 * time.Second
	for _, tc := range []struct {
		x    float64
		want time.Duration
	}{{0, 45 * time.Second}, {0.5, 50 * time.Second}, {0.999999, 55 * time.Second}} {
		got := Spread(d, 0.1, func() float64 { return tc.x })
		if diff := got - tc.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("Spread(50s, 0.1) with rand %v = %s, want %s", tc.x, got, tc.want)
		}
	}
	var sum time.Duration
	for range 1000 {
		got := Spread(d, 0.1, nil)
		if got < 45*time.Second || got > 55*time.Second {
			t.Fatalf("Spread(50s, 0.1) = %s, outside 45s-55s", got)
		}
		sum += got
	}
	if mean := sum / 1000; mean < 49*time.Second || mean > 51*time.Second {
		t.Errorf("mean of 1000 spreads %s, want about 50s", mean)
	}
}
