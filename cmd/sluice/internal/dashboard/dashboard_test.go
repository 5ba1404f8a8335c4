package dashboard_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// served is a dashboard running against a test server.
type served struct {
	env *natstest.Env
	url string // http://host:port, no trailing slash
	ran *ranControls
}

// ranControls records what a dashboard's controls ran.
type ranControls struct {
	mu   sync.Mutex
	args [][]string
}

func (r *ranControls) run(_ context.Context, args []string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.args = append(r.args, args)
	return "ran " + dashboard.CommandLine(args), nil
}

func (r *ranControls) all() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.args)
}

// serve starts a dashboard with opts (Addr, JS and Run filled in unless
// set) against env, listening on 127.0.0.1, stopped at cleanup.
func serve(t *testing.T, env *natstest.Env, opts dashboard.Options) served {
	t.Helper()
	ran := &ranControls{}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	// As the dashboard runs: an operator's (admin) user in secure mode.
	js, err := jetstream.New(env.ConnectRole(t, creds.RoleAdmin, ""))
	if err != nil {
		t.Fatal(err)
	}
	opts.JS = js
	if opts.Run == nil {
		opts.Run = ran.run
	}
	srv, err := dashboard.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	s := served{env: env, url: "http://" + ln.Addr().String(), ran: ran}
	natstest.Eventually(t, 10*time.Second, "the dashboard to read every bucket", func() bool {
		var c struct{ Ready bool }
		code, body := s.get(t, "/api/v1/config", opts.Token)
		return code == 200 && json.Unmarshal(body, &c) == nil && c.Ready
	})
	return s
}

// get requests path, with the token as a bearer when not "".
func (s served) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return s.do(t, http.MethodGet, path, "", h)
}

// post sends body as JSON to path with headers.
func (s served) post(t *testing.T, path, body string, headers map[string]string) (int, []byte) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return s.do(t, http.MethodPost, path, body, h)
}

func (s served) do(t *testing.T, method, path, body string, headers map[string]string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// sluiceJSON runs `sluice ARGS` against env and returns its stdout.
func sluiceJSON(t *testing.T, env *natstest.Env, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), append([]string{"--server", env.URL}, args...), cli.Streams{Out: &out, Err: &errOut}, "test")
	if code != 0 && code != cli.ExitRolledBack {
		t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.Bytes()
}

// sameJSON compares two JSON documents by value.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: the CLI's: %v\n%s", what, err, want)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("%s differs from the CLI's:\n got %s\nwant %s", what, gb, wb)
	}
}

// seedFleet writes three nodes (one without presence), a rolled-back
// rollout with a failure and its invalid fingerprint, as the services
// would have.
func seedFleet(t *testing.T, env *natstest.Env) {
	t.Helper()
	ctx := context.Background()
	now := timestamppb.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	for i, n := range []string{"node-01", "node-02"} {
		p := &sluicev1.NodePresence{Node: n, Labels: map[string]string{"zone": "zone-a", "rack": fmt.Sprintf("rack-%d", i+1)}, AgentVersion: "dev", StartedAt: now, HeartbeatAt: now}
		if _, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Create(ctx, n, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []*sluicev1.NodeStatus{
		{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "rev-1", LastUpdate: now},
		{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Revision: "rev-1", FailedCheck: "ping", CheckOutput: "100% loss", LastUpdate: now},
	} {
		if _, err := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Create(ctx, st.GetNode(), st); err != nil {
			t.Fatal(err)
		}
	}
	r := &sluicev1.Rollout{Id: "1-rev1", Revision: "rev-1", Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "node-03 failed check ping",
		StartedAt: now, FinishedAt: now, Counts: &sluicev1.RolloutCounts{Total: 3, Provisioned: 1, Failed: 1, Pending: 1, Reverted: 1, Attempted: 2},
		Failures: []*sluicev1.NodeOutcome{{Node: "node-03", Fingerprint: "f00d", FailedCheck: "ping", Output: "100% loss", Result: sluicev1.NodeResult_NODE_RESULT_INVALID}}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
}

// TestAPI_SaysWhatSluiceGetSays: /api/v1/fleet, /rollouts and
// /rollouts/{id} answer exactly what `sluice get nodes -o json`, `sluice
// get rollouts -o json` and `sluice rollout status ID -o json` print.
func TestAPI_SaysWhatSluiceGetSays(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{})
	for _, c := range []struct {
		path string
		cli  []string
	}{
		{"/api/v1/fleet", []string{"get", "nodes", "-o", "json"}},
		{"/api/v1/rollouts", []string{"get", "rollouts", "-o", "json"}},
	} {
		code, body := s.get(t, c.path, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", c.path, code, body)
		}
		sameJSON(t, "GET "+c.path, body, sluiceJSON(t, env, c.cli...))
	}
	code, body := s.get(t, "/api/v1/rollouts/1-rev1", "")
	if code != 200 {
		t.Fatalf("GET rollout: %d %s", code, body)
	}
	var status struct{ Items []json.RawMessage }
	if err := json.Unmarshal(sluiceJSON(t, env, "rollout", "status", "1-rev1", "-o", "json"), &status); err != nil || len(status.Items) != 1 {
		t.Fatalf("rollout status -o json: %v", err)
	}
	sameJSON(t, "GET /api/v1/rollouts/1-rev1", body, status.Items[0])

	code, body = s.get(t, "/api/v1/nodes/node-03", "")
	var n struct {
		Node    string
		Present bool
		Status  struct{ Phase, FailedCheck, CheckOutput string }
	}
	if code != 200 || json.Unmarshal(body, &n) != nil || n.Node != "node-03" || n.Present || n.Status.Phase != "NODE_PHASE_INVALID" || n.Status.CheckOutput != "100% loss" {
		t.Errorf("GET /api/v1/nodes/node-03: %d %s", code, body)
	}
}

// TestAPI_BadInput_NamesTheField: every refusal says what was wrong and
// names the field.
func TestAPI_BadInput_NamesTheField(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{})
	for _, c := range []struct {
		name, method, path, body string
		wantCode                 int
		wantField, wantText      string
	}{
		{"node name with a space", "GET", "/api/v1/nodes/bad%20name", "", 400, "name", "is not a node name"},
		{"unknown node", "GET", "/api/v1/nodes/node-99", "", 404, "name", "no node \"node-99\""},
		{"unknown rollout", "GET", "/api/v1/rollouts/9-nope", "", 404, "id", "no rollout"},
		{"unknown API", "GET", "/api/v1/nope", "", 404, "", "no such API"},
		{"unknown action", "POST", "/api/v1/control", `{"action":"explode"}`, 400, "action", "want one of abort, forgive, pause"},
		{"forgive without a reason", "POST", "/api/v1/control", `{"action":"forgive","fingerprint":"abcdef012345"}`, 400, "reason", "reason is required"},
		{"forgive a short fingerprint", "POST", "/api/v1/control", `{"action":"forgive","fingerprint":"ab","reason":"x"}`, 400, "fingerprint", "at least 6 hex"},
		{"abort a bad rollout id", "POST", "/api/v1/control", `{"action":"abort","rollout":"../x"}`, 400, "rollout", "is not a rollout id"},
		{"undo to a revision that is no id", "POST", "/api/v1/control", `{"action":"undo","revision":"HEAD~1"}`, 400, "revision", "revision id or a prefix"},
		{"unknown field", "POST", "/api/v1/control", `{"action":"pause","force":true}`, 400, "body", "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var code int
			var body []byte
			if c.method == "GET" {
				code, body = s.get(t, c.path, "")
			} else {
				code, body = s.post(t, c.path, c.body, nil)
			}
			var e struct{ Error, Field string }
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %s: %v", code, body, err)
			}
			if code != c.wantCode || e.Field != c.wantField || !strings.Contains(e.Error, c.wantText) {
				t.Errorf("%s %s: %d %s; want %d, field %q, error containing %q", c.method, c.path, code, body, c.wantCode, c.wantField, c.wantText)
			}
		})
	}
	if ran := s.ran.all(); len(ran) != 0 {
		t.Errorf("refused controls ran: %v", ran)
	}
}

// TestControls_ShowTheCommand_RunOnlyConfirmed_RefuseCrossSite: without
// confirm a control only answers its sluice command; with confirm it runs
// it; a request from another site is refused whatever it carries.
func TestControls_ShowTheCommand_RunOnlyConfirmed_RefuseCrossSite(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := serve(t, env, dashboard.Options{Who: "alice@ops-1 via the dashboard"})
	code, body := s.post(t, "/api/v1/control", `{"action":"abort","rollout":"7-abc","reason":"wrong VLAN","noRevert":true}`, nil)
	var a struct {
		Command string
		Ran     bool
	}
	if err := json.Unmarshal(body, &a); code != 200 || err != nil || a.Command != "sluice rollout abort 7-abc --reason 'wrong VLAN' --no-revert" || a.Ran {
		t.Errorf("preview: %d %s", code, body)
	}
	if ran := s.ran.all(); len(ran) != 0 {
		t.Fatalf("a preview ran %v", ran)
	}
	code, body = s.post(t, "/api/v1/control", `{"action":"undo","revision":"0e48ce6126d2"}`, nil)
	if err := json.Unmarshal(body, &a); code != 200 || err != nil || a.Command != "sluice rollout undo --to-revision 0e48ce6126d2" || a.Ran {
		t.Errorf("undo to a chosen revision: %d %s", code, body)
	}
	code, body = s.post(t, "/api/v1/control", `{"action":"pause","reason":"it's late","confirm":true}`, map[string]string{"Origin": s.url, "Sec-Fetch-Site": "same-origin"})
	if code != 200 || !strings.Contains(string(body), `"ran": true`) {
		t.Errorf("confirmed pause: %d %s", code, body)
	}
	if ran := s.ran.all(); len(ran) != 1 || !slices.Equal(ran[0], []string{"pause", "--reason", "it's late"}) {
		t.Errorf("ran %q, want [pause --reason it's late]", ran)
	}
	// It is recorded as an event naming who ran it, from where.
	stream, err := env.JS.Stream(context.Background(), contract.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(context.Background(), contract.EventSubject(contract.KindControl, "pause"))
	if err != nil {
		t.Fatalf("no control event for the pause: %v", err)
	}
	var ev struct{ Type, Reason string }
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Type != "ControlRan" ||
		!strings.HasPrefix(ev.Reason, "alice@ops-1 via the dashboard from 127.0.0.1:") || !strings.HasSuffix(ev.Reason, " ran sluice pause --reason 'it'\\''s late'") {
		t.Errorf("control event %s, want ControlRan naming alice@ops-1, the address and the command", msg.Data)
	}
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"another site's Origin", map[string]string{"Origin": "http://evil.example"}, 403},
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"Sec-Fetch-Site same-site (another port or subdomain)", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"a form's content type", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := s.post(t, "/api/v1/control", `{"action":"resume","confirm":true}`, c.headers)
			if code != c.want {
				t.Errorf("%d %s, want %d", code, body, c.want)
			}
		})
	}
	if ran := s.ran.all(); len(ran) != 1 {
		t.Errorf("cross-site requests ran controls: %v", ran)
	}
	if code, body := s.get(t, "/", ""); code != 200 || !strings.Contains(string(body), `<script src="app.js" defer></script>`) {
		t.Errorf("GET /: %d", code)
	}
}

// TestNonLoopback_RequiresTheToken: bound beyond loopback the dashboard
// will not start without a token, and then refuses every API request
// without it; the page's login sets a cookie no script and no other site
// can use.
func TestNonLoopback_RequiresTheToken(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	if _, err := dashboard.New(dashboard.Options{Addr: "0.0.0.0:3100", JS: env.JS}); !errors.Is(err, dashboard.ErrTokenRequired) || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("New on 0.0.0.0 without a token: %v, want ErrTokenRequired naming --token-file", err)
	}
	const token = "0123456789abcdef-token"
	s := serve(t, env, dashboard.Options{Addr: "0.0.0.0:3100", Token: token})
	for _, path := range []string{"/api/v1/fleet", "/api/v1/rollouts", "/api/v1/nodes/node-01", "/api/v1/stream", "/api/v1/config"} {
		if code, body := s.get(t, path, ""); code != 401 || !strings.Contains(string(body), `"field": "token"`) {
			t.Errorf("GET %s without the token: %d %s, want 401", path, code, body)
		}
		if code, _ := s.get(t, path, "wrong-token-wrong-token"); code != 401 {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
	}
	if code, body := s.post(t, "/api/v1/control", `{"action":"pause","confirm":true}`, nil); code != 401 {
		t.Errorf("a control without the token: %d %s, want 401", code, body)
	}
	if code, body := s.get(t, "/api/v1/fleet", token); code != 200 || !strings.Contains(string(body), "node-02") {
		t.Errorf("GET /api/v1/fleet with the token: %d %s", code, body)
	}
	if code, _ := s.post(t, "/api/v1/login", `{"token":"nope"}`, nil); code != 401 {
		t.Errorf("login with a wrong token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/login", strings.NewReader(`{"token":"`+token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != 200 || len(cookies) != 1 || !cookies[0].HttpOnly || !cookies[0].Secure || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %s, cookies %+v; want one HttpOnly, Secure, SameSite=Strict cookie", resp.Status, cookies)
	}
	req, _ = http.NewRequest(http.MethodGet, s.url+"/api/v1/fleet", nil)
	req.AddCookie(cookies[0])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /api/v1/fleet with the login's cookie: %v %v", resp.Status, err)
	}
}

// sseMsg is one Server-Sent Event.
type sseMsg struct {
	id   string
	data []byte
}

// stream opens /api/v1/stream (resuming from lastID when not "") and sends
// its messages until the test ends or close is called.
func (s served) stream(t *testing.T, lastID string) (<-chan sseMsg, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/api/v1/stream", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream Content-Type %q", ct)
	}
	ch := make(chan sseMsg, 1000)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var m sseMsg
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				m.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				m.data = []byte(strings.TrimPrefix(line, "data: "))
			case line == "" && m.data != nil:
				if m.id == "" {
					t.Errorf("an update without an id: %s", m.data)
				}
				ch <- m
				m = sseMsg{}
			}
		}
	}()
	t.Cleanup(cancel)
	return ch, cancel
}

type streamUpdate struct {
	Reset  bool
	Events []struct {
		Seq   uint64
		Event struct{ Kind, Id string }
	}
	Fleet struct{ Names []string }
}

// testRolloutID is the rollout publishEvents' event i is about.
func testRolloutID(i int) string { return fmt.Sprintf("%d-dashboardtest", i) }

// ofTestRolloutID is the i of testRolloutID(i).
func ofTestRolloutID(id string) (int, bool) {
	gen, ok := strings.CutSuffix(id, "-dashboardtest")
	if !ok {
		return 0, false
	}
	var i int
	_, err := fmt.Sscan(gen, &i)
	return i, err == nil
}

// publishEvents publishes events from to to-1, one per rollout, as the
// coordinator does.
func publishEvents(t *testing.T, env *natstest.Env, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		id := testRolloutID(i)
		ev := &sluicev1.Event{Time: timestamppb.Now(), Component: contract.ComponentCoordinator, Kind: contract.KindRollout, Id: id,
			Type: "WaveStarted", Reason: "event " + fmt.Sprint(i)}
		b, err := store.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.JS.Publish(context.Background(), contract.EventSubject(contract.KindRollout, id), b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStream_ReconnectWithLastEventID_LosesNoEvent: a viewer that drops
// its stream and comes back with the last id it saw gets every event
// stored meanwhile, once each and in order, and no snapshot; an id of
// another run of the dashboard gets a snapshot.
func TestStream_ReconnectWithLastEventID_LosesNoEvent(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	got := map[string]int{}
	var order []int
	read := func(ch <-chan sseMsg, until int) string {
		t.Helper()
		var last string
		deadline := time.After(10 * time.Second)
		for {
			if n := len(order); n > 0 && order[n-1] == until-1 {
				return last
			}
			select {
			case m, ok := <-ch:
				if !ok {
					t.Fatal("the stream ended")
				}
				var u streamUpdate
				if err := json.Unmarshal(m.data, &u); err != nil {
					t.Fatal(err)
				}
				if u.Reset && last != "" {
					t.Errorf("a snapshot after resuming from %s", last)
				}
				for _, e := range u.Events {
					if i, ok := ofTestRolloutID(e.Event.Id); ok {
						got[fmt.Sprint(i)]++
						order = append(order, i)
					}
				}
				last = m.id
			case <-deadline:
				t.Fatalf("events up to %d did not arrive; got %v", until-1, order)
			}
		}
	}
	first, closeFirst := s.stream(t, "")
	publishEvents(t, env, 0, 20)
	lastID := read(first, 20)
	closeFirst()
	publishEvents(t, env, 20, 120) // while nobody listens
	second, _ := s.stream(t, lastID)
	publishEvents(t, env, 120, 150)
	read(second, 150)
	for i := range 150 {
		if got[fmt.Sprint(i)] != 1 {
			t.Errorf("event %d arrived %d times", i, got[fmt.Sprint(i)])
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("events out of order: %v", order)
	}

	third, _ := s.stream(t, "another-run-7")
	select {
	case m := <-third:
		var u streamUpdate
		if err := json.Unmarshal(m.data, &u); err != nil || !u.Reset || len(u.Fleet.Names) != 3 {
			t.Errorf("with another run's id: %s, want a snapshot of the 3 nodes", m.data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot")
	}
}

// TestStream_HeartbeatAloneSendsNothing: a presence heartbeat changes
// nothing a viewer sees, so no update goes out for it; a phase does.
func TestStream_HeartbeatAloneSendsNothing(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{Interval: 20 * time.Millisecond})
	ch, _ := s.stream(t, "")
	<-ch // the snapshot
	ctx := context.Background()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for range 5 {
		if _, err := nodes.Mutate(ctx, "node-01", func(p *sluicev1.NodePresence) (*sluicev1.NodePresence, error) {
			p.HeartbeatAt = timestamppb.Now()
			return p, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if _, err := statuses.Mutate(ctx, "node-01", func(st *sluicev1.NodeStatus) (*sluicev1.NodeStatus, error) {
		st.Phase = sluicev1.NodePhase_NODE_PHASE_PROVISIONING
		return st, nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		var u streamUpdate
		_ = json.Unmarshal(m.data, &u)
		if len(u.Fleet.Names) != 1 || u.Fleet.Names[0] != "node-01" || !strings.Contains(string(m.data), "NODE_PHASE_PROVISIONING") {
			t.Errorf("first update after 5 heartbeats and a phase: %s, want only node-01 Provisioning", m.data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update for the phase")
	}
}

func TestIsLoopback(t *testing.T) {
	for _, c := range []struct {
		addr    string
		want    bool
		wantErr bool
	}{
		{"127.0.0.1:3100", true, false},
		{"localhost:3100", true, false},
		{"[::1]:3100", true, false},
		{"127.1.2.3:3100", true, false},
		{":3100", false, false},
		{"0.0.0.0:3100", false, false},
		{"10.0.0.5:3100", false, false},
		{"dashboard.example:3100", false, false},
		{"3100", false, true},
	} {
		got, err := dashboard.IsLoopback(c.addr)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("IsLoopback(%q) = %v, %v; want %v, error %v", c.addr, got, err, c.want, c.wantErr)
		}
	}
}

func TestCommandLine_QuotesWhatAShellWouldSplit(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "sluice pause"},
		{[]string{"pause", "--reason", "maintenance window"}, "sluice pause --reason 'maintenance window'"},
		{[]string{"resume", "--reason", "it's done; rm -rf /"}, `sluice resume --reason 'it'\''s done; rm -rf /'`},
		{[]string{"rollout", "abort", "7-4ff435e62c9d", "--no-revert"}, "sluice rollout abort 7-4ff435e62c9d --no-revert"},
		{[]string{"pause", "--reason", ""}, "sluice pause --reason ''"},
	} {
		if got := dashboard.CommandLine(c.args); got != c.want {
			t.Errorf("CommandLine(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}

// TestAPI_Gzip: a client that accepts gzip gets the fleet compressed, the
// same JSON once decompressed; one that does not gets it plain.
func TestAPI_Gzip(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{})
	code, plain := s.do(t, http.MethodGet, "/api/v1/fleet", "", map[string]string{"Accept-Encoding": "identity"})
	if code != 200 || !bytes.Contains(plain, []byte(`"node-03"`)) {
		t.Fatalf("plain: %d %s", code, plain)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/api/v1/fleet", nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unzipped, plain) {
		t.Errorf("gzipped fleet differs from the plain one:\n%s\n%s", unzipped, plain)
	}
}

// TestStreamAndNode_SecureMode_ANodesSpoofsShowAsUnreadable (I11): what
// node-01's credentials put on node-01's event subject dressed as a
// coordinator's RolloutSucceeded or node-02's NodeInvalid reaches the
// page's stream and node-01's operations as unreadable, never as an event;
// node-01's real event shows as before.
func TestStreamAndNode_SecureMode_ANodesSpoofsShowAsUnreadable(t *testing.T) {
	env := natstest.StartSecure(t, contract.DefaultSettings())
	seedFleet(t, env)
	node01, err := jetstream.New(env.ConnectRole(t, creds.RoleNode, "node-01"))
	if err != nil {
		t.Fatal(err)
	}
	own := contract.EventSubject(contract.KindNode, "node-01")
	for _, ev := range []*sluicev1.Event{
		{Time: timestamppb.Now(), Component: "agent", Kind: "node", Id: "node-01", Type: "NodeProvisioned", Node: "node-01", Reason: "applied and checked"},
		{Time: timestamppb.Now(), Component: "rollout-coordinator", Kind: "rollout", Id: "1-rev1", Type: "RolloutSucceeded", Rollout: "1-rev1", Reason: "spoofed by node-01"},
		{Time: timestamppb.Now(), Component: "agent", Kind: "node", Id: "node-02", Type: "NodeInvalid", Node: "node-02", Reason: "spoofed by node-01"},
	} {
		b, err := store.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := node01.Publish(context.Background(), own, b); err != nil {
			t.Fatalf("node-01 publishes on %s: %v", own, err)
		}
	}
	type shown struct {
		Seq        uint64
		Event      *struct{ Kind, Id, Type, Reason string }
		Unreadable string
	}
	const why = "not an event its subject's publishers may send: on " + "sluice.events.node.node-01"
	check := func(what string, evs []shown) {
		t.Helper()
		if len(evs) != 3 {
			t.Fatalf("%s: %d events, want 3: %+v", what, len(evs), evs)
		}
		if e := evs[0].Event; e == nil || e.Type != "NodeProvisioned" || e.Id != "node-01" {
			t.Errorf("%s: first %+v, want node-01's real NodeProvisioned", what, evs[0])
		}
		for _, e := range evs[1:] {
			if e.Event != nil || !strings.Contains(e.Unreadable, why) {
				t.Errorf("%s: a spoof shown as %+v; want it unreadable, saying %q", what, e, why)
			}
		}
	}

	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	code, body := s.get(t, "/api/v1/nodes/node-01", "")
	var n struct{ Operations []shown }
	if err := json.Unmarshal(body, &n); code != 200 || err != nil {
		t.Fatalf("/api/v1/nodes/node-01: %d %v\n%s", code, err, body)
	}
	check("node-01's operations", n.Operations)

	ch, _ := s.stream(t, "")
	var evs []shown
	deadline := time.After(10 * time.Second) // margin: the page's stream sends them within one interval
	for len(evs) < 3 {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatal("the stream ended")
			}
			var u struct{ Events []shown }
			if err := json.Unmarshal(m.data, &u); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, u.Events...)
		case <-deadline:
			t.Fatalf("the stream sent %d of the 3 events: %+v", len(evs), evs)
		}
	}
	check("the stream", evs)
}

// TestNode_SecureMode_ANodesForgedCoordinatorEventAboutItself_IsUnreadable
// (I11): node-01's credentials cannot publish on the coordinator's subjects,
// and a coordinator's NodeReverted about node-01 that node-01 puts on its
// own subject is unreadable in node-01's operations; the coordinator's
// real one, on the coordinator's subject, shows.
func TestNode_SecureMode_ANodesForgedCoordinatorEventAboutItself_IsUnreadable(t *testing.T) {
	env := natstest.StartSecure(t, contract.DefaultSettings())
	seedFleet(t, env)
	ctx := context.Background()
	node01, err := jetstream.New(env.ConnectRole(t, creds.RoleNode, "node-01"))
	if err != nil {
		t.Fatal(err)
	}
	coordinator, err := jetstream.New(env.ConnectRole(t, creds.RoleCoordinator, ""))
	if err != nil {
		t.Fatal(err)
	}
	reverted := func(reason string) []byte {
		b, err := store.Marshal(&sluicev1.Event{Time: timestamppb.Now(), Component: "rollout-coordinator", Kind: "node", Id: "node-01",
			Type: "NodeReverted", Node: "node-01", Rollout: "1-rev1", Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	own := contract.EventSubject(contract.KindNode, "node-01")
	theirs := contract.EventSubjectOf(contract.RoleCoordinator, contract.KindNode, "node-01")
	if _, err := node01.Publish(ctx, own, reverted("forged by node-01")); err != nil {
		t.Fatalf("node-01 publishes on %s: %v", own, err)
	}
	refused(t, env, creds.RoleNode, "node-01", theirs)
	refused(t, env, creds.RoleCoordinator, "", own)
	if _, err := coordinator.Publish(ctx, theirs, reverted("reverted to its backup")); err != nil {
		t.Fatalf("the coordinator publishes on %s: %v", theirs, err)
	}

	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	code, body := s.get(t, "/api/v1/nodes/node-01", "")
	var n struct {
		Operations []struct {
			Event      *struct{ Type, Reason string }
			Unreadable string
		}
	}
	if err := json.Unmarshal(body, &n); code != 200 || err != nil {
		t.Fatalf("/api/v1/nodes/node-01: %d %v\n%s", code, err, body)
	}
	if len(n.Operations) != 2 {
		t.Fatalf("node-01's operations: %d, want the forgery and the real revert:\n%s", len(n.Operations), body)
	}
	if forged := n.Operations[0]; forged.Event != nil || !strings.Contains(forged.Unreadable, "a node's credentials may publish here") {
		t.Errorf("node-01's forged revert shown as %+v, want it unreadable, saying a node could have published it", forged)
	}
	if real := n.Operations[1].Event; real == nil || real.Type != "NodeReverted" || real.Reason != "reverted to its backup" {
		t.Errorf("the coordinator's revert shown as %+v, want the event", n.Operations[1])
	}
}

// refused fails the test unless the server refuses a user of role (and
// node) a publish on subject.
func refused(t *testing.T, env *natstest.Env, role, node, subject string) {
	t.Helper()
	violations := make(chan error, 1)
	nc, err := nats.Connect(env.URL, nats.UserCredentials(env.CredsFile(t, role, node)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "Permissions Violation for Publish to \""+subject+"\"") {
			t.Errorf("%s %s publishing on %s: %v, want a permissions violation", role, node, subject, err)
		}
	case <-time.After(5 * time.Second): // margin: the server answers a refusal at once
		t.Errorf("the server let %s %s publish on %s", role, node, subject)
	}
}

// TestStream_StorageTrouble_IsABannerUntilAWriteLands: a write JetStream
// refuses for want of space puts a banner naming it (in sluice's words,
// with the JetStream error code) on the page; the next write that lands
// takes it away.
func TestStream_StorageTrouble_IsABannerUntilAWriteLands(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	kv, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tiny", MaxBytes: 1024, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	tiny := store.New(kv, func() *sluicev1.Event { return &sluicev1.Event{} })
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond, StoreEvery: 50 * time.Millisecond})
	ch, _ := s.stream(t, "")
	storage := func(what string, want func(string) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second) // margin: a check runs every 50ms
		for {
			select {
			case m, ok := <-ch:
				if !ok {
					t.Fatal("the stream ended")
				}
				var u struct{ Storage *string }
				if err := json.Unmarshal(m.data, &u); err != nil {
					t.Fatal(err)
				}
				if u.Storage != nil && want(*u.Storage) {
					return
				}
			case <-deadline:
				t.Fatalf("no update with %s", what)
			}
		}
	}
	storage("no banner", func(s string) bool { return s == "" })

	_, err = tiny.Create(ctx, "big", &sluicev1.Event{Reason: strings.Repeat("x", 4096)})
	if !errors.Is(err, store.ErrStorageFull) {
		t.Fatalf("a write past the bucket's max_bytes: %v, want store.ErrStorageFull", err)
	}
	storage("the banner naming the refusal", func(s string) bool {
		return strings.Contains(s, "JetStream refuses writes since") && strings.Contains(s, "the bucket is at its size limit (JetStream error 10077")
	})
	if _, err := tiny.Create(ctx, "small", &sluicev1.Event{Reason: "fits"}); err != nil {
		t.Fatal(err)
	}
	storage("the banner gone once a write lands", func(s string) bool { return s == "" })
}
