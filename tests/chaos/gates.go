package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Gates against a stub of Prometheus's HTTP API that the harness runs and
// the seed controls: its answers are the fault injected (pass, a failing
// value, too few samples, HTTP 500, nobody listening, an alert that fires
// while the change's wave runs). The e2e tests run a real Prometheus
// (internal/testkit/promtest); here what matters is which answer the coordinator gets,
// when, and that is what a stub decides and records.

// GateMode is how the stub answers one gate.
type GateMode string

const (
	GatePass        GateMode = "pass"        // metric: 5 samples under max; alert: none of its alerts fires
	GateFail        GateMode = "fail"        // metric: 5 samples over max
	GateFewSamples  GateMode = "few-samples" // metric: 1 sample, 3 needed
	GateError       GateMode = "error"       // HTTP 500 with a Prometheus error
	GateUnreachable GateMode = "unreachable" // nobody listens at its URL
	GateFiresMid    GateMode = "fires-mid"   // alert: clear until a node begins to apply the change's config, then firing
)

// missing reports whether the mode never gives the gate data.
func (m GateMode) missing() bool {
	return m == GateFewSamples || m == GateError || m == GateUnreachable
}

// GatePlan is one gate of a change.
type GatePlan struct {
	Name  string
	Alert bool
	Mode  GateMode
}

func (g GatePlan) String() string {
	kind := "metric"
	if g.Alert {
		kind = "alert"
	}
	return fmt.Sprintf("%s %s gate %s", g.Mode, kind, g.Name)
}

// Gate timing: short, so that a gate that gets no data costs a seed its
// deadline only.
const (
	metricGateDeadline = time.Second
	alertGateDeadline  = time.Second
	alertInterval      = 200 * time.Millisecond
	gateMax            = 0.01
	gateMinSamples     = 3
	firingAlert        = "ChaosLinkDown"
)

// pickGates draws one change's gates: a metric gate (three in four changes)
// and an alert gate (one in two).
func pickGates(rng *rand.Rand) []GatePlan {
	var gs []GatePlan
	if rng.IntN(4) != 0 {
		gs = append(gs, GatePlan{Name: "errors", Mode: []GateMode{GatePass, GatePass, GateFail, GateFewSamples, GateFewSamples, GateError, GateUnreachable}[rng.IntN(7)]})
	}
	if rng.IntN(2) == 0 {
		gs = append(gs, GatePlan{Name: "links", Alert: true, Mode: []GateMode{GatePass, GatePass, GateFiresMid, GateError}[rng.IntN(4)]})
	}
	return gs
}

// GateAnswer is one answer the stub gave.
type GateAnswer struct {
	At   time.Time
	Data bool   // an answer the gate can judge: enough samples, or the alerts
	What string // "5 samples, worst 0.05", "HTTP 500", "firing ChaosLinkDown"
}

// promStub is the harness's Prometheus: /c<change>/<gate>/api/v1/query_range and
// …/api/v1/alerts, answering as the scenario says, recording every answer
// by the gate's base URL.
type promStub struct {
	sys     *system
	addr    string
	closed  string // an address nobody listens on (unreachable gates)
	srv     *http.Server
	mu      sync.Mutex
	answers map[string][]GateAnswer
}

func newPromStub(t *testing.T, s *system) *promStub {
	if s.virtual {
		// No socket on virtual time: the coordinators' gate requests are
		// served in-process (client, coordinator.Config.GateHTTP).
		return &promStub{sys: s, addr: "prometheus.chaos", closed: "prometheus-down.chaos", answers: map[string][]GateAnswer{}}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &promStub{sys: s, addr: l.Addr().String(), closed: freeAddr(t), answers: map[string][]GateAnswer{}}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// url is gate g of change i's base URL.
func (p *promStub) url(i int, g GatePlan) string {
	addr := p.addr
	if g.Mode == GateUnreachable {
		addr = p.closed
	}
	return fmt.Sprintf("http://%s/c%d/%s", addr, i, g.Name)
}

func (p *promStub) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3) // c<i>, gate, api/v1/…
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "c") {
		http.NotFound(w, r)
		return
	}
	i, err := strconv.Atoi(strings.TrimPrefix(parts[0], "c"))
	gs := p.sys.sc.Extras.Gates[i]
	k := slices.IndexFunc(gs, func(g GatePlan) bool { return g.Name == parts[1] })
	if err != nil || k < 0 {
		http.NotFound(w, r)
		return
	}
	g := gs[k]
	base := p.url(i, g)
	ans := GateAnswer{At: time.Now()}
	var data any
	switch {
	case g.Mode == GateError:
		ans.What = "HTTP 500"
		p.record(base, ans)
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "internal", "error": "chaos: storage unavailable"})
		return
	case g.Alert:
		alerts := []map[string]any{ // an alert the gate does not name fires, and its own is pending
			{"labels": map[string]string{"alertname": "ChaosOther"}, "state": "firing"},
			{"labels": map[string]string{"alertname": firingAlert}, "state": "pending"}}
		ans.Data, ans.What = true, "none firing"
		if g.Mode == GateFiresMid && p.sys.isFiring(i) {
			alerts[1]["state"], ans.What = "firing", "firing "+firingAlert
		}
		data = map[string]any{"alerts": alerts}
	default:
		n, v := 5, gateMax/10
		switch g.Mode {
		case GateFail:
			v = gateMax * 5
		case GateFewSamples:
			n = 1
		}
		vals := make([][2]any, n)
		for j := range vals {
			vals[j] = [2]any{float64(time.Now().Unix() - int64(15*(n-j))), strconv.FormatFloat(v, 'g', -1, 64)}
		}
		ans.Data, ans.What = n >= gateMinSamples, fmt.Sprintf("%d samples, worst %g", n, v)
		data = map[string]any{"resultType": "matrix", "result": []map[string]any{{"metric": map[string]string{}, "values": vals}}}
	}
	p.record(base, ans)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
}

func (p *promStub) record(base string, a GateAnswer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers[base] = append(p.answers[base], a)
}

func (p *promStub) all() map[string][]GateAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]GateAnswer{}
	for k, v := range p.answers {
		out[k] = slices.Clone(v)
	}
	return out
}

// applyStarted is told by every node's applier as it begins to apply
// routing table table: a change's fires-mid alert fires from its first
// node's apply on, mid-wave.
func (s *system) applyStarted(table uint32) {
	i, ok := s.tables[table]
	if !ok || !slices.ContainsFunc(s.sc.Extras.Gates[i], func(g GatePlan) bool { return g.Mode == GateFiresMid }) {
		return
	}
	s.firing(i)
}

// firing makes change i's fires-mid alert fire from now on.
func (s *system) firing(i int) {
	s.gateMu.Lock()
	defer s.gateMu.Unlock()
	if !s.fired[i] {
		s.fired[i] = true
		s.log.add("alert %s of change %d fires (a node applies its config)", firingAlert, i)
	}
}

func (s *system) isFiring(i int) bool {
	s.gateMu.Lock()
	defer s.gateMu.Unlock()
	return s.fired[i]
}

// decorate is change i's strategy as applied: the scenario's, with its
// deploy windows (open at now, or closing soon: windows.go) and gates.
func (s *system) decorate(i int, st *sluicev1.Strategy) *sluicev1.Strategy {
	x := s.sc.Extras
	closing := x.Closing != nil && x.Closing.Change == i
	if !x.Windows[i] && len(x.Gates[i]) == 0 && !closing {
		return st
	}
	st = proto.Clone(st).(*sluicev1.Strategy)
	switch {
	case closing:
		st.Windows = closingWindows(s.closesAt)
	case x.Windows[i]:
		st.Windows = openWindows(time.Now())
	}
	for _, g := range x.Gates[i] {
		pg := &sluicev1.Gate{Name: g.Name, Prometheus: s.prom.url(i, g)}
		if g.Alert {
			pg.Alerts, pg.Interval, pg.Deadline = []string{firingAlert}, durationpb.New(alertInterval), durationpb.New(alertGateDeadline)
		} else {
			pg.Query, pg.Max, pg.MinSamples = "sum(rate(link_errors_total[1m]))", wrapperspb.Double(gateMax), gateMinSamples
			pg.Lookback, pg.Step, pg.Deadline = durationpb.New(time.Minute), durationpb.New(15*time.Second), durationpb.New(metricGateDeadline)
		}
		st.Gates = append(st.Gates, pg)
	}
	return st
}

// gateExpectation adjusts change i's expected end for its gates: a gate
// that fails, or never gets data (it fails at its deadline), stops the
// rollout and reverts it — ROLLED_BACK, naming the gate unless failing
// nodes beyond the budget explain the rollback; an alert that fires while
// the wave runs may stop it, or come after the rollout ended. Only the
// gates of its strategy st count: a head the configurator wrote again
// carries none of the change's (follow).
func (d *driver) gateExpectation(i int, st *sluicev1.Strategy, x *Expectation, bad, budget int) {
	gs := d.sys.sc.Extras.Gates[i]
	if len(gs) == 0 || len(x.Phases) == 0 {
		return
	}
	var blocking []string
	for _, g := range gs {
		if !slices.ContainsFunc(st.GetGates(), func(pg *sluicev1.Gate) bool { return pg.GetName() == g.Name }) {
			continue
		}
		switch {
		case g.Mode == GateFail || g.Mode.missing():
			blocking = append(blocking, g.Name)
		case g.Mode == GateFiresMid:
			x.Phases, x.AllFail = nil, false
			x.Why = fmt.Sprintf("alert gate %s fires while a node applies: it stops the rollout, or comes after it ended", g.Name)
			return
		}
	}
	if len(blocking) == 0 {
		return
	}
	x.Phases, x.AllFail = []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK}, false
	x.Blocking, x.MustBlock = blocking, bad <= budget
	x.Why = fmt.Sprintf("gate %s fails or never gets data: the rollout stops and reverts (%s)", strings.Join(blocking, ", "), x.Why)
}

// Gates: no rollout passes a gate on missing data, and a gate that stops
// one is named. For each gate of a rollout's strategy whose every answer
// from the stub was missing data (HTTP 500, too few samples, nobody
// listening), no GatePassed or GateClear event names it, its result in the
// record is not passed or clear, and the rollout did not end Succeeded or
// PartiallyFailed after starting a node. A rollout the scenario says a
// gate must stop (Expectation.MustBlock) that rolled back names one of
// those gates in blockedBy; any blockedBy names a gate of its strategy,
// and one blocked on a value (not "gave up") had a failing answer from the
// stub.
func checkGates(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		id := r.GetId()
		byName := map[string]*sluicev1.Gate{}
		for _, g := range r.GetStrategy().GetGates() {
			byName[g.GetName()] = g
			answers := o.GateAnswers[g.GetPrometheus()]
			if slices.ContainsFunc(answers, func(a GateAnswer) bool { return a.Data }) {
				continue
			}
			for _, ev := range o.Events {
				if ev.GetRollout() == id && ev.GetGate() == g.GetName() && (ev.GetType() == "GatePassed" || ev.GetType() == "GateClear") {
					add("Gates", id, "", "gate %s: %s (%q) though every answer it got was missing data (%s)", g.GetName(), ev.GetType(), ev.GetReason(), answerSummary(answers))
				}
			}
			for _, res := range r.GetGates() {
				if res.GetGate() == g.GetName() && (res.GetVerdict() == contract.GatePassed || res.GetVerdict() == contract.GateClear) {
					add("Gates", id, "", "gate %s: the record says %s (%q) though every answer it got was missing data (%s)", g.GetName(), res.GetVerdict(), res.GetMessage(), answerSummary(answers))
				}
			}
			if (r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED) && r.GetCounts().GetAttempted() > 0 {
				add("Gates", id, "", "ended %s after starting %d node(s), though its gate %s never got data (%s)", r.GetPhase(), r.GetCounts().GetAttempted(), g.GetName(), answerSummary(answers))
			}
		}
		b := r.GetBlockedBy()
		x := o.Expect[id]
		if b == nil {
			if x.MustBlock && r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK {
				add("Gates", id, "", "rolled back (%q) without naming a gate in blockedBy; the scenario's failing gates are %v and its failing nodes within the budget", r.GetReason(), x.Blocking)
			}
			continue
		}
		g := byName[b.GetGate()]
		switch {
		case g == nil:
			add("Gates", id, "", "blocked by gate %q, which its strategy does not have", b.GetGate())
		case x.MustBlock && !slices.Contains(x.Blocking, b.GetGate()):
			add("Gates", id, "", "blocked by gate %s (%q); the scenario's failing gates are %v", b.GetGate(), b.GetMessage(), x.Blocking)
		case !strings.Contains(b.GetMessage(), "gave up") && !slices.ContainsFunc(o.GateAnswers[g.GetPrometheus()], failingAnswer):
			add("Gates", id, "", "blocked by gate %s on a value (%q), but the stub never gave it a failing one (%s)", b.GetGate(), b.GetMessage(), answerSummary(o.GateAnswers[g.GetPrometheus()]))
		}
	}
}

// failingAnswer: a value over the threshold, or the named alert firing.
func failingAnswer(a GateAnswer) bool {
	return a.Data && (strings.HasPrefix(a.What, "firing") || strings.HasSuffix(a.What, "worst "+strconv.FormatFloat(gateMax*5, 'g', -1, 64)))
}

// answerSummary says what a gate was answered, in a few words.
func answerSummary(as []GateAnswer) string {
	if len(as) == 0 {
		return "no answer: nobody listening, or never asked"
	}
	seen := map[string]int{}
	var order []string
	for _, a := range as {
		if seen[a.What] == 0 {
			order = append(order, a.What)
		}
		seen[a.What]++
	}
	var parts []string
	for _, w := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", seen[w], w))
	}
	return strings.Join(parts, ", ")
}

// client is the HTTP client the coordinators measure gates with: nil (the
// default client, over loopback) on real time; on virtual time one that
// serves every request with the stub's handler in-process, and refuses the
// unreachable address as a port nobody listens on does.
func (p *promStub) client() *http.Client {
	if p == nil || !p.sys.virtual {
		return nil
	}
	return &http.Client{Transport: stubTransport{p}}
}

type stubTransport struct{ p *promStub }

func (t stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == t.p.closed {
		return nil, fmt.Errorf("dial tcp %s: connect: connection refused", r.URL.Host)
	}
	rec := httptest.NewRecorder()
	t.p.serve(rec, r)
	res := rec.Result()
	res.Request = r
	return res, nil
}
