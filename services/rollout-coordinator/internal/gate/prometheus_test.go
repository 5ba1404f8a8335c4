package gate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/promtest"
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
