// Package gate measures a rollout's gates against Prometheus's HTTP API:
// Measure evaluates a metric gate's query over its lookback (one range
// query from at-LOOKBACK to at every STEP, GET /api/v1/query_range) and
// Firing reads which of an alert gate's alerts fire (GET /api/v1/alerts).
// It measures only: the rollout-coordinator's decider judges the numbers
// (internal/rollout/gates.go). Every request is bounded by its context.
package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
)

// maxBody bounds an answer read from Prometheus.
const maxBody = 8 << 20

// Measurement is what a metric gate's query gave over its lookback.
type Measurement struct {
	// Samples is the number of values of the series with the fewest (a
	// query should aggregate to one series; with several, each must have
	// enough); 0 when the query returned none. NaN values do not count.
	Samples  int
	Max, Min float64 // the highest and lowest value of any series
	Series   int
}

// Client queries Prometheus. HTTP nil is http.DefaultClient.
type Client struct {
	HTTP *http.Client
}

// Measure evaluates g's query at every step of the lookback ending at at:
// at at-lookback, then every step up to at, lookback/step + 1 points when
// the step divides the lookback, so a gate's min-samples (at most that,
// contract.ResolveGate) is a number every window can give. A subquery
// (QUERY)[LOOKBACK:STEP] would not do: its points are aligned to
// multiples of the step, one fewer than that whenever at is not on one.
func (c Client) Measure(ctx context.Context, g contract.Gate, at time.Time) (Measurement, error) {
	q := url.Values{}
	q.Set("query", g.Query)
	q.Set("start", promTime(at.Add(-g.Lookback)))
	q.Set("end", promTime(at))
	q.Set("step", promDuration(g.Step))
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	if err := c.get(ctx, g.URL+"/api/v1/query_range?"+q.Encode(), &data); err != nil {
		return Measurement{}, err
	}
	if data.ResultType != "matrix" {
		return Measurement{}, fmt.Errorf("the query gave a %s, not a range of values", data.ResultType)
	}
	m := Measurement{Max: math.Inf(-1), Min: math.Inf(1), Series: len(data.Result)}
	for i, series := range data.Result {
		n := 0
		for _, p := range series.Values {
			s, ok := p[1].(string)
			if !ok {
				return Measurement{}, fmt.Errorf("a value %v is not a string", p[1])
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return Measurement{}, fmt.Errorf("value %q: %w", s, err)
			}
			if math.IsNaN(v) {
				continue
			}
			n++
			m.Max, m.Min = max(m.Max, v), min(m.Min, v)
		}
		if i == 0 || n < m.Samples {
			m.Samples = n
		}
	}
	if m.Samples == 0 {
		m.Max, m.Min = 0, 0
	}
	return m, nil
}

// Firing returns the alerts of g that fire now, sorted (an alert still
// pending its "for" does not fire yet).
func (c Client) Firing(ctx context.Context, g contract.Gate) ([]string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := c.get(ctx, g.URL+"/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	var firing []string
	for _, a := range data.Alerts {
		name := a.Labels["alertname"]
		if a.State == "firing" && slices.Contains(g.Alerts, name) && !slices.Contains(firing, name) {
			firing = append(firing, name)
		}
	}
	slices.Sort(firing)
	return firing, nil
}

// get fetches an API answer and decodes its data, or says why not in a
// line an operator can act on.
func (c Client) get(ctx context.Context, u string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the gate already
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("HTTP %d, not a Prometheus API answer", resp.StatusCode)
	}
	if env.Status != "success" {
		return fmt.Errorf("HTTP %d: %s: %s", resp.StatusCode, env.ErrorType, env.Error)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

// promTime writes t as the API's Unix seconds, to the millisecond.
func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// promDuration writes d in PromQL's syntax (whole milliseconds at least).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(max(int64(d/time.Millisecond), 1), 10) + "ms"
}
