package embedded

import (
	"testing"
	"time"
)

func TestDecideHeal(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	const werr = "JetStream stream '$G > KV_sluice-leases' write error: no space left on device"
	fresh := healState{wait: healFirst}
	tests := []struct {
		name    string
		given   healState
		trouble string
		free    uint64
		known   bool
		now     time.Time
		want    healState
		wantAct healAction
	}{
		{name: "nothing wrong", given: fresh, now: t0, want: fresh, wantAct: healNone},
		{name: "write error, disk still full: says so", given: fresh, trouble: werr, free: 1 << 20, known: true, now: t0,
			want: healState{wait: healFirst, waiting: true}, wantAct: healWarnWaiting},
		{name: "write error, disk still full, said so already", given: healState{wait: healFirst, waiting: true}, trouble: werr, free: 0, known: true, now: t0,
			want: healState{wait: healFirst, waiting: true}, wantAct: healNone},
		{name: "write error, space free: re-opens and spaces the next", given: healState{wait: healFirst, waiting: true}, trouble: werr, free: healFree, known: true, now: t0,
			want: healState{next: t0.Add(healFirst), wait: 2 * healFirst}, wantAct: healReopen},
		{name: "free space unknown: re-opens", given: fresh, trouble: werr, now: t0,
			want: healState{next: t0.Add(healFirst), wait: 2 * healFirst}, wantAct: healReopen},
		{name: "error back before the spacing ends: waits", given: healState{next: t0.Add(time.Second), wait: 4 * time.Second}, trouble: werr, free: healFree, known: true, now: t0,
			want: healState{next: t0.Add(time.Second), wait: 4 * time.Second}, wantAct: healNone},
		{name: "spacing doubles up to its cap", given: healState{next: t0, wait: healMax}, trouble: werr, free: healFree, known: true, now: t0,
			want: healState{next: t0.Add(healMax), wait: healMax}, wantAct: healReopen},
		{name: "well for longer than the cap: spacing starts over", given: healState{next: t0, wait: healMax}, now: t0.Add(healMax + time.Second),
			want: fresh, wantAct: healNone},
		{name: "well, within the cap: spacing kept", given: healState{next: t0, wait: healMax}, now: t0.Add(time.Second),
			want: healState{next: t0, wait: healMax}, wantAct: healNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, act := decideHeal(tt.given, tt.trouble, tt.free, tt.known, tt.now)
			if got != tt.want || act != tt.wantAct {
				t.Errorf("decideHeal = %+v, %d; want %+v, %d", got, act, tt.want, tt.wantAct)
			}
		})
	}
}

// A server that is shutting down has stopped JetStream itself: that is no
// trouble to heal, or the heal loop re-opens JetStream into a store whose
// owner is removing it.
func TestStoreTrouble_AServerShutDownHasNone(t *testing.T) {
	s, err := Start(Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := storeTrouble(s); got != "" {
		t.Fatalf("a running server: storeTrouble = %q, want none", got)
	}
	s.Shutdown()
	if got := storeTrouble(s); got != "" {
		t.Errorf("after Shutdown: storeTrouble = %q, want none (heal would re-open JetStream)", got)
	}
	if err := reopen(s, t.TempDir()); err != nil {
		t.Errorf("reopen after Shutdown = %v, want nothing done", err)
	}
	if s.JetStreamEnabled() {
		t.Errorf("reopen after Shutdown enabled JetStream")
	}
}
