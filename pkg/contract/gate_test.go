package contract

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestParseGate(t *testing.T) {
	tests := []struct {
		name, spec string
		want       func(g Gate) bool
		wantErr    string
	}{
		{name: "a metric gate, the query as written (+, spaces, quotes, & inside)",
			spec: `error-rate=prometheus:http://prom:9090?query=sum(rate(errs{job="a b"}[1m])) / sum(rate(reqs[1m])) + 0 and on() vector(1)&max=0.01&lookback=1m&step=5s&min-samples=5&deadline=2m`,
			want: func(g Gate) bool {
				return g.Name == "error-rate" && g.URL == "http://prom:9090" && *g.Max == 0.01 && g.Min == nil &&
					g.Query == `sum(rate(errs{job="a b"}[1m])) / sum(rate(reqs[1m])) + 0 and on() vector(1)` &&
					g.Lookback == time.Minute && g.Step == 5*time.Second && g.MinSamples == 5 && g.Deadline == 2*time.Minute
			}},
		{name: "defaults", spec: `lat=prometheus:https://prom.example/?query=x&min=3`,
			want: func(g Gate) bool {
				return g.URL == "https://prom.example" && *g.Min == 3 && g.Lookback == DefaultGateLookback && g.Step == DefaultGateStep &&
					g.MinSamples == DefaultGateMinSamples && g.Deadline == DefaultGateDeadline
			}},
		{name: "an alert gate, alerts repeated and comma-separated", spec: `links=prometheus:http://p:9090?alert=LinkDown,BGPDown&alert=Flap&interval=5s`,
			want: func(g Gate) bool {
				return g.IsAlert() && strings.Join(g.Alerts, " ") == "LinkDown BGPDown Flap" && g.Interval == 5*time.Second
			}},
		{name: "no name", spec: `=prometheus:http://p?query=x&max=1`, wantErr: "want NAME=prometheus:URL"},
		{name: "no kind", spec: `e=http://p:9090?query=x&max=1`, wantErr: `"http" is not a gate kind`},
		{name: "no parameters", spec: `e=prometheus:http://p:9090`, wantErr: "no parameters after the URL"},
		{name: "unknown first parameter", spec: `e=prometheus:http://p?q=x&max=1`, wantErr: `"q" is not a parameter`},
		{name: "bad number", spec: `e=prometheus:http://p?query=x&max=1%`, wantErr: "max=1%: want a number"},
		{name: "bad duration", spec: `e=prometheus:http://p?query=x&max=1&lookback=5`, wantErr: "lookback=5: want a duration"},
		{name: "zero samples", spec: `e=prometheus:http://p?query=x&max=1&min-samples=0`, wantErr: "min-samples=0: want a count of at least 1"},
		{name: "twice", spec: `e=prometheus:http://p?query=x&max=1&max=2`, wantErr: "max is given twice"},
		{name: "no threshold", spec: `e=prometheus:http://p?query=x`, wantErr: "no threshold: set max="},
		{name: "min above max", spec: `e=prometheus:http://p?query=x&max=1&min=2`, wantErr: "min 2 is above max 1"},
		{name: "query and alert", spec: `e=prometheus:http://p?query=x&max=1&alert=A`, wantErr: "not both"},
		{name: "threshold on an alert gate", spec: `e=prometheus:http://p?alert=A&max=1`, wantErr: "belong to a query gate"},
		{name: "interval on a query gate", spec: `e=prometheus:http://p?query=x&max=1&interval=5s`, wantErr: "interval belongs to an alert gate"},
		{name: "more samples than the lookback holds", spec: `e=prometheus:http://p?query=x&max=1&lookback=1m&step=15s&min-samples=6`, wantErr: "has at most 5"},
		{name: "step over lookback", spec: `e=prometheus:http://p?query=x&max=1&lookback=10s&step=15s`, wantErr: "step 15s is longer than the lookback"},
		{name: "not http", spec: `e=prometheus:ftp://p?query=x&max=1`, wantErr: "want an http:// or https:// URL"},
		{name: "bad name", spec: `Error Rate=prometheus:http://p?query=x&max=1`, wantErr: `name "Error Rate"`},
		{name: "bad alert name", spec: `e=prometheus:http://p?alert=link-down`, wantErr: `alert "link-down" is not an alert name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg, err := ParseGate(tt.spec)
			var g Gate
			if err == nil {
				g, err = ResolveGate(pg)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.want(g) {
				t.Fatalf("got %+v, %v", g, err)
			}
			back, err := ParseGate(FormatGate(pg))
			if err != nil || !proto.Equal(back, pg) {
				t.Fatalf("FormatGate does not read back: %s → %v, %v", FormatGate(pg), back, err)
			}
		})
	}
}

func TestResolveGates_RefusesTwoOfOneName(t *testing.T) {
	g, _ := ParseGate(`e=prometheus:http://p?query=x&max=1`)
	_, err := ResolveGates(&sluicev1.Strategy{Gates: []*sluicev1.Gate{g, g}})
	if err == nil || !strings.Contains(err.Error(), `strategy.gates[1]: gate e: name "e": two gates have it`) {
		t.Fatalf("error %v", err)
	}
}

// Whatever the flag's text, ParseGate never panics, and a gate it reads
// and ResolveGate accepts is written back by FormatGate as the same gate.
func FuzzParseGate(f *testing.F) {
	for _, s := range []string{
		`error-rate=prometheus:http://prom:9090?query=sum(rate(e[1m]))+1&max=0.01&lookback=5m&min-samples=5`,
		`links=prometheus:http://p:9090?alert=LinkDown,BGPDown&interval=5s&deadline=1m`,
		`x=prometheus:http://p?query=a&b=c&min=-1&max=1e9&step=1s`, `=`, `a=prometheus:?`, `a=prometheus:http://p?query=&max=`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		g, err := ParseGate(spec)
		if err != nil {
			return
		}
		if _, err := ResolveGate(g); err != nil {
			return
		}
		back, err := ParseGate(FormatGate(g))
		if err != nil {
			t.Fatalf("%q reads as %v, written as %q, which does not read: %v", spec, g, FormatGate(g), err)
		}
		if _, err := ResolveGate(back); err != nil || FormatGate(back) != FormatGate(g) {
			t.Fatalf("%q: written %q, read back as %q (%v)", spec, FormatGate(g), FormatGate(back), err)
		}
	})
}
