package gate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/promtest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/gate"
)

const linkRules = `groups:
  - name: links
    rules:
      - alert: LinkDown
        expr: link_down > 0
`

// Against a real Prometheus: the values of a query over the lookback, no
// values for a series that does not exist, a refused query and a stopped
// server as errors, and a firing alert by name.
func TestClient_AgainstPrometheus(t *testing.T) {
	e := promtest.NewExporter(t)
	e.Set("error_ratio", 0.25)
	e.Set("link_down", 0)
	p := promtest.Start(t, promtest.Scrape(e.Addr()), promtest.Rules(linkRules))
	p.WaitFor("error_ratio", 30*time.Second)
	c := gate.Client{}
	ctx := context.Background()
	g := contract.Gate{Name: "e", URL: p.URL(), Query: "max(error_ratio)", Lookback: 5 * time.Second, Step: time.Second}

	var m gate.Measurement
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if m, err = c.Measure(ctx, g, time.Now()); err != nil {
			t.Fatal(err)
		}
		if m.Samples >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if m.Samples < 3 || m.Samples > 6 || m.Max != 0.25 || m.Min != 0.25 || m.Series != 1 {
		t.Fatalf("measured %+v; want 3 to 6 samples (5s at 1s) of 0.25", m)
	}

	// Every window gives lookback/step + 1 values, the most min-samples
	// may ask: at a time between two multiples of the step as on one (a
	// subquery's points are aligned to the multiples, one fewer between).
	w := g
	w.Lookback, w.Step = 2*time.Second, time.Second
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// Until the series has three seconds of history.
		if m, err := c.Measure(ctx, w, time.Now().Add(-time.Second)); err != nil || m.Samples == 3 || time.Now().After(deadline) {
			break
		}
	}
	whole := time.Now().Truncate(time.Second) // data since at least 3s before it
	for _, at := range []time.Time{whole, whole.Add(250 * time.Millisecond), whole.Add(500 * time.Millisecond)} {
		m, err := c.Measure(ctx, w, at)
		if err != nil {
			t.Fatal(err)
		}
		if m.Samples != 3 {
			t.Errorf("a lookback of 2s at a step of 1s ending at %s: %d samples; want 3, every time", at.Format("15:04:05.000"), m.Samples)
		}
	}

	g.Query = "nothing_here"
	if m, err := c.Measure(ctx, g, time.Now()); err != nil || m.Samples != 0 {
		t.Fatalf("a series that does not exist: %+v, %v; want 0 samples, no error", m, err)
	}
	g.Query = "rate(error_ratio"
	if _, err := c.Measure(ctx, g, time.Now()); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Fatalf("a query that does not parse: %v; want Prometheus's bad_data error", err)
	}

	a := contract.Gate{Name: "links", URL: p.URL(), Alerts: []string{"LinkDown", "Other"}}
	if f, err := c.Firing(ctx, a); err != nil || len(f) != 0 {
		t.Fatalf("nothing fires yet: %v, %v", f, err)
	}
	e.Set("link_down", 1)
	deadline = time.Now().Add(30 * time.Second)
	for {
		f, err := c.Firing(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(f, []string{"LinkDown"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LinkDown never fired: %v", f)
		}
		time.Sleep(200 * time.Millisecond)
	}

	p.Stop()
	if _, err := c.Measure(ctx, g, time.Now()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a stopped Prometheus: %v; want connection refused", err)
	}
}
