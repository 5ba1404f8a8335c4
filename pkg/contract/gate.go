package contract

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Gate defaults, documented in docs/rollouts.md ("Gates").
const (
	DefaultGateLookback   = 5 * time.Minute
	DefaultGateStep       = 15 * time.Second
	DefaultGateMinSamples = 1
	DefaultGateDeadline   = 10 * time.Minute
	DefaultAlertInterval  = 10 * time.Second
)

// GateEnd is what a metric gate checked after the last wave stands before:
// the rollout's end.
const GateEnd = "the end"

// GateWaitPrefix starts a rollout's waiting line when a gate holds it
// ("waiting for gate error-rate: 2 of 5 samples over 5m"); its
// waiting_until is then when the gate gives up and fails.
const GateWaitPrefix = "waiting for gate "

// Gate verdicts, as a rollout's record (GateResult.verdict) says them.
const (
	GatePassed  = "passed"
	GateFailed  = "failed"
	GateWaiting = "waiting" // no answer, or too few samples: neither passes nor fails
	GateFiring  = "firing"  // an alert gate: a named alert fires
	GateClear   = "clear"   // an alert gate: none of its alerts fires
)

// Gate is a strategy's gate resolved: defaults applied, checked.
type Gate struct {
	Name       string
	URL        string // Prometheus HTTP API base, no trailing slash
	Query      string // metric gate
	Max, Min   *float64
	Lookback   time.Duration
	Step       time.Duration
	MinSamples int
	Alerts     []string // alert gate
	Interval   time.Duration
	Deadline   time.Duration
}

// IsAlert says whether g follows alerts rather than a query.
func (g Gate) IsAlert() bool { return len(g.Alerts) > 0 }

// Describe is g in a line: "error-rate: max(...) <= 0.01 over 5m".
func (g Gate) Describe() string {
	if g.IsAlert() {
		return fmt.Sprintf("%s: alerts %s not firing", g.Name, strings.Join(g.Alerts, ", "))
	}
	var parts []string
	if g.Max != nil {
		parts = append(parts, "<= "+FormatValue(*g.Max))
	}
	if g.Min != nil {
		parts = append(parts, ">= "+FormatValue(*g.Min))
	}
	return fmt.Sprintf("%s: %s %s over %s (at least %d samples)", g.Name, g.Query, strings.Join(parts, " and "), g.Lookback, g.MinSamples)
}

// FormatValue prints a gate's value or threshold the way operators wrote it.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

var (
	gateName  = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	alertName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
)

// ResolveGate checks g and applies the defaults. Its errors name the part
// of the gate that is wrong, for a field error or a flag's usage error.
func ResolveGate(g *sluicev1.Gate) (Gate, error) {
	r := Gate{Name: g.GetName(), Query: strings.TrimSpace(g.GetQuery()), Alerts: g.GetAlerts(), MinSamples: int(g.GetMinSamples()),
		Lookback: durationOr(g.GetLookback(), DefaultGateLookback), Step: durationOr(g.GetStep(), DefaultGateStep),
		Interval: durationOr(g.GetInterval(), DefaultAlertInterval), Deadline: durationOr(g.GetDeadline(), DefaultGateDeadline)}
	if g.GetMax() != nil {
		v := g.GetMax().GetValue()
		r.Max = &v
	}
	if g.GetMin() != nil {
		v := g.GetMin().GetValue()
		r.Min = &v
	}
	if r.MinSamples == 0 {
		r.MinSamples = DefaultGateMinSamples
	}
	if !gateName.MatchString(r.Name) {
		return r, fmt.Errorf("name %q: want lower-case letters, digits, '.', '_' or '-', at most 63, e.g. error-rate", r.Name)
	}
	u, err := url.Parse(g.GetPrometheus())
	switch {
	case g.GetPrometheus() == "":
		return r, fmt.Errorf("prometheus: the Prometheus URL is missing (prometheus:http://HOST:9090)")
	case err != nil:
		return r, fmt.Errorf("prometheus %q: %w", g.GetPrometheus(), err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return r, fmt.Errorf("prometheus %q: want an http:// or https:// URL with a host", g.GetPrometheus())
	case u.RawQuery != "" || u.Fragment != "":
		return r, fmt.Errorf("prometheus %q: the base URL takes no query or fragment", g.GetPrometheus())
	}
	r.URL = strings.TrimSuffix(g.GetPrometheus(), "/")
	for _, d := range []struct {
		name string
		d    *durationpb.Duration
	}{{"lookback", g.GetLookback()}, {"step", g.GetStep()}, {"interval", g.GetInterval()}, {"deadline", g.GetDeadline()}} {
		if d.d != nil && (d.d.CheckValid() != nil || d.d.AsDuration() <= 0) {
			return r, fmt.Errorf("%s %s: want a duration above zero", d.name, d.d.AsDuration())
		}
	}
	switch {
	case r.Query != "" && len(r.Alerts) > 0:
		return r, fmt.Errorf("a gate follows a query or alerts, not both: make two gates")
	case r.Query == "" && len(r.Alerts) == 0:
		return r, fmt.Errorf("no query= and no alert=: a gate needs one")
	case len(r.Alerts) > 0:
		for _, a := range r.Alerts {
			if !alertName.MatchString(a) {
				return r, fmt.Errorf("alert %q is not an alert name", a)
			}
		}
		if r.Max != nil || r.Min != nil || g.GetLookback() != nil || g.GetStep() != nil || g.GetMinSamples() != 0 {
			return r, fmt.Errorf("max, min, lookback, step and min-samples belong to a query gate, not an alert gate")
		}
		return r, nil
	}
	if g.GetInterval() != nil {
		return r, fmt.Errorf("interval belongs to an alert gate (a query gate is checked before each wave)")
	}
	if r.Max == nil && r.Min == nil {
		return r, fmt.Errorf("no threshold: set max= (the query's values must stay at or below it) or min=")
	}
	for _, t := range []struct {
		name string
		v    *float64
	}{{"max", r.Max}, {"min", r.Min}} {
		if t.v != nil && (math.IsNaN(*t.v) || math.IsInf(*t.v, 0)) {
			return r, fmt.Errorf("%s %g: want a number", t.name, *t.v)
		}
	}
	if r.Max != nil && r.Min != nil && *r.Min > *r.Max {
		return r, fmt.Errorf("min %s is above max %s: no value could pass", FormatValue(*r.Min), FormatValue(*r.Max))
	}
	if r.Step > r.Lookback {
		return r, fmt.Errorf("step %s is longer than the lookback %s", r.Step, r.Lookback)
	}
	if most := int(r.Lookback/r.Step) + 1; r.MinSamples > most {
		return r, fmt.Errorf("min-samples %d: a lookback of %s at a step of %s has at most %d", r.MinSamples, r.Lookback, r.Step, most)
	}
	return r, nil
}

// ResolveGates resolves every gate of st, refusing two of one name.
func ResolveGates(st *sluicev1.Strategy) ([]Gate, error) {
	var gs []Gate
	for i, g := range st.GetGates() {
		r, err := ResolveGate(g)
		if err != nil {
			return nil, fmt.Errorf("strategy.gates[%d]: gate %s: %w", i, g.GetName(), err)
		}
		if slices.ContainsFunc(gs, func(o Gate) bool { return o.Name == r.Name }) {
			return nil, fmt.Errorf("strategy.gates[%d]: gate %s: name %q: two gates have it", i, r.Name, r.Name)
		}
		gs = append(gs, r)
	}
	return gs, nil
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil || d.AsDuration() <= 0 {
		return def
	}
	return d.AsDuration()
}

// gateParams are the parameters of a --gate spec, in the order FormatGate
// writes them.
var gateParams = []string{"query", "max", "min", "lookback", "step", "min-samples", "alert", "interval", "deadline"}

// ParseGate reads sluice apply's --gate value:
//
//	NAME=prometheus:URL?query=PROMQL&max=N&min=N&lookback=D&step=D&min-samples=N&deadline=D
//	NAME=prometheus:URL?alert=ALERT[,ALERT...]&interval=D&deadline=D
//
// Values are taken as written, not URL-decoded, so a query needs no
// escaping: a value runs to the next "&" that starts a known parameter
// ("&max=", "&lookback=", …). ParseGate checks only the syntax; ResolveGate
// checks the gate.
func ParseGate(spec string) (*sluicev1.Gate, error) {
	name, rest, ok := strings.Cut(spec, "=")
	if !ok || name == "" {
		return nil, fmt.Errorf("want NAME=prometheus:URL?query=…&max=… or NAME=prometheus:URL?alert=NAME")
	}
	g := &sluicev1.Gate{Name: strings.TrimSpace(name)}
	kind, rest, ok := strings.Cut(rest, ":")
	if !ok || kind != "prometheus" {
		return nil, fmt.Errorf("gate %s: %q is not a gate kind: the one kind is prometheus (NAME=prometheus:URL?…)", g.Name, kind)
	}
	base, params, ok := strings.Cut(rest, "?")
	if !ok || params == "" {
		return nil, fmt.Errorf("gate %s: no parameters after the URL: add ?query=…&max=… or ?alert=NAME", g.Name)
	}
	g.Prometheus = base
	seen := map[string]bool{}
	for params != "" {
		key, v, ok := strings.Cut(params, "=")
		if !ok || !slices.Contains(gateParams, key) {
			return nil, fmt.Errorf("gate %s: %q is not a parameter: want %s", g.Name, strings.SplitN(params, "=", 2)[0], strings.Join(gateParams, ", "))
		}
		end := len(v)
		for _, k := range gateParams {
			if i := strings.Index(v, "&"+k+"="); i >= 0 && i < end {
				end = i
			}
		}
		val := v[:end]
		params = strings.TrimPrefix(v[end:], "&")
		if seen[key] && key != "alert" {
			return nil, fmt.Errorf("gate %s: %s is given twice", g.Name, key)
		}
		seen[key] = true
		if err := setGateParam(g, key, val); err != nil {
			return nil, fmt.Errorf("gate %s: %s=%s: %w", g.Name, key, val, err)
		}
	}
	return g, nil
}

func setGateParam(g *sluicev1.Gate, key, val string) error {
	dur := func(dst **durationpb.Duration) error {
		d, err := time.ParseDuration(val)
		if err != nil {
			return fmt.Errorf("want a duration like 5m or 30s")
		}
		*dst = durationpb.New(d)
		return nil
	}
	num := func(dst **wrapperspb.DoubleValue) error {
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("want a number like 0.01")
		}
		*dst = wrapperspb.Double(f)
		return nil
	}
	switch key {
	case "query":
		g.Query = val
	case "max":
		return num(&g.Max)
	case "min":
		return num(&g.Min)
	case "lookback":
		return dur(&g.Lookback)
	case "step":
		return dur(&g.Step)
	case "interval":
		return dur(&g.Interval)
	case "deadline":
		return dur(&g.Deadline)
	case "min-samples":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a count of at least 1")
		}
		g.MinSamples = uint32(n)
	case "alert":
		for _, a := range strings.Split(val, ",") {
			if a = strings.TrimSpace(a); a != "" {
				g.Alerts = append(g.Alerts, a)
			}
		}
	}
	return nil
}

// FormatGate writes g back in ParseGate's syntax.
func FormatGate(g *sluicev1.Gate) string {
	var ps []string
	add := func(k, v string) { ps = append(ps, k+"="+v) }
	if g.GetQuery() != "" {
		add("query", g.GetQuery())
	}
	if g.GetMax() != nil {
		add("max", FormatValue(g.GetMax().GetValue()))
	}
	if g.GetMin() != nil {
		add("min", FormatValue(g.GetMin().GetValue()))
	}
	for _, d := range []struct {
		k string
		d *durationpb.Duration
	}{{"lookback", g.GetLookback()}, {"step", g.GetStep()}} {
		if d.d != nil {
			add(d.k, d.d.AsDuration().String())
		}
	}
	if g.GetMinSamples() > 0 {
		add("min-samples", strconv.Itoa(int(g.GetMinSamples())))
	}
	if len(g.GetAlerts()) > 0 {
		add("alert", strings.Join(g.GetAlerts(), ","))
	}
	for _, d := range []struct {
		k string
		d *durationpb.Duration
	}{{"interval", g.GetInterval()}, {"deadline", g.GetDeadline()}} {
		if d.d != nil {
			add(d.k, d.d.AsDuration().String())
		}
	}
	return fmt.Sprintf("%s=prometheus:%s?%s", g.GetName(), g.GetPrometheus(), strings.Join(ps, "&"))
}
