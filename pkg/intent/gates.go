package intent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A gates file declares a strategy's gates in YAML (or JSON), for `sluice
// apply --gates-file` — the same gates `--gate` takes in one line each
// (docs/rollouts.md, "Gates file"):
//
//	gates:
//	- name: error-rate
//	  prometheus: http://prom:9090
//	  query: sum(rate(http_errors_total[1m]))
//	  max: 0.01
//	  lookback: 5m
//	  minSamples: 5
//	- name: links
//	  prometheus: http://prom:9090
//	  alerts: [LinkDown]
//
// Durations are Go durations ("5m", "90s"). Unknown fields are refused.

// gateDoc is one gate as a gates file writes it.
type gateDoc struct {
	Name       string   `json:"name"`
	Prometheus string   `json:"prometheus"`
	Query      string   `json:"query"`
	Max        *float64 `json:"max"`
	Min        *float64 `json:"min"`
	Lookback   string   `json:"lookback"`
	Step       string   `json:"step"`
	MinSamples uint32   `json:"minSamples"`
	Alerts     []string `json:"alerts"`
	Interval   string   `json:"interval"`
	Deadline   string   `json:"deadline"`
}

// ParseGates reads a gates file's content b (file names it in errors). It
// returns every gate, each checked as the configurator checks a strategy's
// gates, or every problem found, each naming the file, the gate
// (gates[i], its name) and the field.
func ParseGates(file string, b []byte) ([]*sluicev1.Gate, error) {
	js, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", file, err)
	}
	var doc struct {
		Gates []gateDoc `json:"gates"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		// "json: unknown field \"maxx\"": say it as the file's field.
		return nil, fmt.Errorf("%s: %s (want gates: a list of gates with name, prometheus, query, max, min, lookback, step, minSamples, alerts, interval, deadline)",
			file, strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(doc.Gates) == 0 {
		return nil, fmt.Errorf("%s: gates: no gate in the file", file)
	}
	var gates []*sluicev1.Gate
	var errs []error
	for i, d := range doc.Gates {
		where := fmt.Sprintf("%s: gates[%d]", file, i)
		if d.Name != "" {
			where += " (" + d.Name + ")"
		}
		g := &sluicev1.Gate{Name: d.Name, Prometheus: d.Prometheus, Query: d.Query, MinSamples: d.MinSamples, Alerts: d.Alerts}
		if d.Max != nil {
			g.Max = wrapperspb.Double(*d.Max)
		}
		if d.Min != nil {
			g.Min = wrapperspb.Double(*d.Min)
		}
		bad := false
		for _, f := range []struct {
			field, text string
			dst         **durationpb.Duration
		}{{"lookback", d.Lookback, &g.Lookback}, {"step", d.Step, &g.Step}, {"interval", d.Interval, &g.Interval}, {"deadline", d.Deadline, &g.Deadline}} {
			if f.text == "" {
				continue
			}
			v, err := time.ParseDuration(f.text)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %q: want a duration like 5m or 90s", where, f.field, f.text))
				bad = true
				continue
			}
			*f.dst = durationpb.New(v)
		}
		if bad {
			continue
		}
		if _, err := contract.ResolveGate(g); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		gates = append(gates, g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return gates, nil
}
