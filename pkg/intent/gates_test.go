package intent

import (
	"strings"
	"testing"
	"time"
)

func TestParseGates(t *testing.T) {
	tests := []struct {
		name    string
		given   string
		want    []string // gate names, in order
		wantErr []string // each in the error
	}{
		{
			name: "a metric gate and an alert gate",
			given: `gates:
- name: error-rate
  prometheus: http://prom:9090
  query: sum(rate(http_errors_total[1m]))
  max: 0.01
  lookback: 5m
  step: 30s
  minSamples: 5
  deadline: 15m
- name: links
  prometheus: http://prom:9090
  alerts: [LinkDown, BGPSessionDown]
  interval: 5s
`,
			want: []string{"error-rate", "links"},
		},
		{name: "JSON is YAML too", given: `{"gates": [{"name": "e", "prometheus": "http://p:9090", "query": "x", "min": 1}]}`, want: []string{"e"}},
		{name: "not YAML", given: "gates: [\n", wantErr: []string{"gates.yaml: not YAML"}},
		{name: "an unknown field", given: "gates:\n- name: e\n  prometheus: http://p:9090\n  query: x\n  maxx: 1\n", wantErr: []string{`gates.yaml: unknown field "maxx"`}},
		{name: "no gates", given: "gates: []\n", wantErr: []string{"gates.yaml: gates: no gate in the file"}},
		{name: "a duration that does not parse", given: "gates:\n- name: e\n  prometheus: http://p:9090\n  query: x\n  max: 1\n  lookback: five minutes\n",
			wantErr: []string{`gates.yaml: gates[0] (e): lookback "five minutes": want a duration like 5m or 90s`}},
		{name: "no threshold", given: "gates:\n- name: e\n  prometheus: http://p:9090\n  query: x\n",
			wantErr: []string{"gates.yaml: gates[0] (e): no threshold"}},
		{
			name: "every bad gate named, by index",
			given: `gates:
- name: ok
  prometheus: http://p:9090
  alerts: [A]
- name: Bad Name
  prometheus: http://p:9090
  alerts: [A]
- name: both
  prometheus: http://p:9090
  query: x
  alerts: [A]
`,
			wantErr: []string{`gates.yaml: gates[1] (Bad Name): name "Bad Name"`, "gates.yaml: gates[2] (both): a gate follows a query or alerts, not both"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gates, err := ParseGates("gates.yaml", []byte(tc.given))
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error; want %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, g := range gates {
				names = append(names, g.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("gates %v, want %v", names, tc.want)
			}
		})
	}
	gates, err := ParseGates("gates.yaml", []byte("gates:\n- name: e\n  prometheus: http://p:9090\n  query: x\n  max: 0.01\n  lookback: 5m\n  minSamples: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := gates[0]; g.GetMax().GetValue() != 0.01 || g.GetLookback().AsDuration() != 5*time.Minute || g.GetMinSamples() != 5 || g.GetMin() != nil {
		t.Fatalf("gate %v: want max 0.01, lookback 5m, 5 samples, no min", g)
	}
}
