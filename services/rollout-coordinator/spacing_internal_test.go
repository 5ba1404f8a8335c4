package coordinator

import (
	"fmt"
	"testing"
	"time"
)

// Terms that keep ending at once are spaced further and further apart, up
// to termRetryCap; a term that lasted termRetryCap starts again from the
// renew interval. Each wait is jittered within [ceiling/2, ceiling].
func TestTermSpacing_GrowsWhileTermsFailAtOnceAndResetsAfterALongTerm(t *testing.T) {
	renew := 500 * time.Millisecond
	sp := newTermSpacing(renew)
	within := func(step string, got, ceiling time.Duration) {
		t.Helper()
		if got < ceiling/2 || got > ceiling {
			t.Fatalf("%s: waited %s, want between %s and %s", step, got, ceiling/2, ceiling)
		}
	}
	ceilings := []time.Duration{renew, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, termRetryCap, termRetryCap}
	for i, c := range ceilings {
		within(fmt.Sprintf("short term %d", i+1), sp.after(100*time.Millisecond), c)
	}
	within("a term that lasted the cap", sp.after(termRetryCap), renew)
	within("a short term after it", sp.after(time.Second), time.Second)
	within("a term just short of the cap", sp.after(termRetryCap-time.Millisecond), 2*time.Second)
}
