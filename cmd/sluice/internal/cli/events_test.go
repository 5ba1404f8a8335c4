package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// publishEvents stores each event in the events stream in the order given,
// as the services' asynchronous publishing may: not in time order.
// A nil event is a message that does not decode.
func publishEvents(t *testing.T, env *natstest.Env, evs ...*sluicev1.Event) {
	t.Helper()
	for _, ev := range evs {
		subject, data := contract.EventSubject("node", "node-09"), []byte("not an event")
		if ev != nil {
			b, err := store.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			subject, data = contract.EventSubjectOf(contract.RoleOfComponent(ev.GetComponent()), ev.GetKind(), ev.GetId()), b
		}
		if _, err := env.JS.Publish(context.Background(), subject, data); err != nil {
			t.Fatal(err)
		}
	}
}

// outOfOrder are events stored in the order third, first, second, then
// one without a time (ordered by when the stream stored it: now, after
// the others), then a message that does not decode (stream sequence 5).
func outOfOrder() []*sluicev1.Event {
	at := func(sec int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2020, 1, 2, 10, 0, sec, 0, time.UTC))
	}
	return []*sluicev1.Event{
		{Time: at(3), Component: "rollout-coordinator", Kind: "rollout", Id: "2-bbbbbbbbbbbb", Type: "RolloutStarted", Reason: "published first"},
		{Time: at(1), Component: "agent", Kind: "node", Id: "node-01", Type: "NodeRegistered", Reason: "published second"},
		{Time: at(2), Component: "agent", Kind: "node", Id: "node-02", Type: "NodeLabelsChanged", Reason: "published third"},
		{Component: "agent", Kind: "node", Id: "node-03", Type: "NodeProvisioned", Reason: "published fourth"},
		nil,
	}
}

func TestEvents_PrintsTheStoredEventsByTime_NotInTheOrderStored(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	publishEvents(t, env, outOfOrder()...)
	const unreadable = "<unreadable: SLUICE_EVENTS/5"
	const first, second, third, noTime = "NodeRegistered", "NodeLabelsChanged", "RolloutStarted", "NodeProvisioned"
	tests := []struct {
		name string
		args []string
		want []string // each line's event type, or the start of the unreadable cell
	}{
		{"all", nil, []string{first, second, third, noTime, unreadable}},
		{"one kind", []string{"--kind", "node"}, []string{first, second, noTime, unreadable}},
		{"the last N stored, by time", []string{"--last", "3"}, []string{second, noTime, unreadable}},
		{"the last N of one kind", []string{"--kind", "node", "--last", "3"}, []string{second, noTime, unreadable}},
		{"one rollout", []string{"--rollout", "2-bbbbbbbbbbbb"}, []string{third, unreadable}},
		{"one node", []string{"--node", "node-02"}, []string{second, unreadable}},
		{"types, any case, by prefix", []string{"--type", "noderegistered,NodeLabels*"}, []string{first, second, unreadable}},
		{"the last N kept", []string{"--type", "noderegistered,NodeLabels*,rolloutstarted", "--last", "3"}, []string{first, second, unreadable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, env.URL, append([]string{"events"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(tt.want), stdout)
			}
			for i, w := range tt.want {
				if !strings.Contains(" "+lines[i], " "+w+" ") {
					t.Errorf("line %d %q, want %s:\n%s", i, lines[i], w, stdout)
				}
			}
		})
	}
}

func TestEvents_JSONAndYAML_ListTheEventsByTimeAndTheUndecodableApart(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := outOfOrder()
	publishEvents(t, env, evs...)
	want := []*sluicev1.Event{evs[1], evs[2], evs[0], evs[3]}
	for _, format := range []string{formatJSON, formatYAML} {
		t.Run(format, func(t *testing.T) {
			code, stdout, stderr := sluice(t, env.URL, "events", "-o", format)
			if code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr)
			}
			got := decodeList(t, format, []byte(stdout), func() *sluicev1.Event { return &sluicev1.Event{} })
			if len(got) != len(want) {
				t.Fatalf("got %d events, want %d:\n%s", len(got), len(want), stdout)
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Errorf("event %d: got %v, want %v", i, got[i], want[i])
				}
			}
			out := []byte(stdout)
			if format == formatYAML {
				var err error
				if out, err = yaml.YAMLToJSON(out); err != nil {
					t.Fatal(err)
				}
			}
			var o view.List
			if err := json.Unmarshal(out, &o); err != nil {
				t.Fatal(err)
			}
			if len(o.Unreadable) != 1 || o.Unreadable[0].Bucket != contract.StreamEvents || o.Unreadable[0].Key != "5" || o.Unreadable[0].Reason == "" {
				t.Errorf("unreadable = %+v, want the message at stream sequence 5", o.Unreadable)
			}
		})
	}
}

func TestEvents_JSON_NoEventsIsAnEmptyList(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	code, stdout, stderr := sluice(t, env.URL, "events", "-o", "json")
	if code != 0 || stdout != "{\n  \"items\": [],\n  \"unreadable\": []\n}\n" {
		t.Errorf("exit code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// An event line shows revisions and fingerprints short (in the reason too),
// does not repeat in parentheses what the reason names (node, revision,
// rollout and fingerprint here: nothing in parentheses), and is cut at 120
// characters on a terminal; -o wide prints it whole.
func TestEvents_LinesFit120ColumnsOnATerminal(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	rev := strings.Repeat("ab12", 16)
	fp := strings.Repeat("cd34", 16)
	publishEvents(t, env, &sluicev1.Event{Time: timestamppb.Now(), Component: "agent", Kind: "node", Id: "node-04", Type: "NodeProvisioned",
		Node: "node-04", Revision: rev, Rollout: "1-ab12ab12ab12", Fingerprint: fp,
		Reason: "applied fingerprint " + fp[:12] + " from revision " + rev + " (rollout 1-ab12ab12ab12) in 20ms, " + strings.Repeat("and more ", 10)})
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"--server", env.URL, "events"}, Streams{Out: &out, Err: &errOut, TTY: true}, "test", time.Now); code != 0 {
		t.Fatalf("events: exit %d: %s", code, errOut.String())
	}
	line := strings.TrimSuffix(out.String(), "\n")
	if n := len([]rune(line)); n > 120 || !strings.HasSuffix(line, "…") {
		t.Errorf("events on a terminal: a line of %d characters, want 120 cut with …:\n%s", n, line)
	}
	if !strings.HasPrefix(line, time.Now().Format("15:04:05")[:3]) {
		t.Errorf("events: want today's time of day first:\n%s", line)
	}
	code, wide, stderr := sluice(t, env.URL, "events", "-o", "wide")
	if code != 0 || strings.Contains(wide, rev) || !strings.Contains(wide, "from revision ab12ab12ab12 ") ||
		!strings.HasSuffix(wide, strings.Repeat("and more ", 9)+"and more\n") {
		t.Errorf("events -o wide: exit %d, want the whole line, the revision short, no references the reason names:\n%s%s", code, wide, stderr)
	}
}

// spoofs are what node-01's own credentials can put on node-01's own event
// subject: a coordinator's RolloutSucceeded and node-02's NodeInvalid, each
// as the real publisher would write it.
func spoofs(rollout string) []*sluicev1.Event {
	return []*sluicev1.Event{
		{Time: timestamppb.Now(), Component: "rollout-coordinator", Kind: "rollout", Id: rollout, Type: "RolloutSucceeded",
			Rollout: rollout, Reason: "every node provisioned (spoofed by node-01)"},
		{Time: timestamppb.Now(), Component: "agent", Kind: "node", Id: "node-02", Type: "NodeInvalid", Node: "node-02",
			Reason: "check ping failed (spoofed by node-01)"},
	}
}

// publishAs publishes each event on subject over nc (a connection of one
// role's user), waiting for the stream's acknowledgement.
func publishAs(t *testing.T, nc *nats.Conn, subject string, evs ...*sluicev1.Event) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		b, err := store.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(context.Background(), subject, b); err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
	}
}

// TestEvents_SecureMode_ANodesSpoofsShowAsUnreadable (I11): node-01's
// credentials may publish on node-01's event subject only; what it puts
// there dressed as a coordinator's RolloutSucceeded or node-02's
// NodeInvalid is shown as unreadable by `sluice events` (lines, -o json,
// --node, --follow), never as an event; real events show as before.
func TestEvents_SecureMode_ANodesSpoofsShowAsUnreadable(t *testing.T) {
	env := natstest.StartSecure(t, contract.DefaultSettings())
	const rollout = "4-0123456789ab"
	node01 := env.ConnectRole(t, creds.RoleNode, "node-01")
	coordinator := env.ConnectRole(t, creds.RoleCoordinator, "")
	own := contract.EventSubject(contract.KindNode, "node-01")
	real := []*sluicev1.Event{
		{Time: timestamppb.Now(), Component: "agent", Kind: "node", Id: "node-01", Type: "NodeProvisioned", Node: "node-01",
			Rollout: rollout, Reason: "applied and checked"},
		{Time: timestamppb.Now(), Component: "rollout-coordinator", Kind: "rollout", Id: rollout, Type: "RolloutStarted",
			Rollout: rollout, Reason: "2 nodes"},
	}
	publishAs(t, node01, own, real[0])
	publishAs(t, node01, own, spoofs(rollout)...)
	publishAs(t, coordinator, contract.EventSubject(contract.KindRollout, rollout), real[1])
	admin := env.CredsFile(t, creds.RoleAdmin, "")
	as := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := sluice(t, env.URL, append([]string{"--creds", admin, "events"}, args...)...)
		if code != 0 {
			t.Fatalf("events %v: exit %d: %s", args, code, stderr)
		}
		return stdout
	}
	const why = "not an event its subject's publishers may send"
	noSpoofShown := func(what, out string) {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "<unreadable: ") {
				continue
			}
			if strings.Contains(line, "spoofed") || strings.Contains(line, "RolloutSucceeded") || strings.Contains(line, "node/node-02") {
				t.Errorf("%s shows a spoof as an event: %q\n%s", what, line, out)
			}
		}
	}

	out := as()
	noSpoofShown("events", out)
	if !strings.Contains(out, "NodeProvisioned") || !strings.Contains(out, "RolloutStarted") ||
		strings.Count(out, "<unreadable: SLUICE_EVENTS/") != 2 || strings.Count(out, why) != 2 {
		t.Errorf("events: want the two real events and two unreadable messages saying why:\n%s", out)
	}
	if out := as("--node", "node-02"); strings.Contains(out, "NodeInvalid") {
		t.Errorf("events --node node-02 shows node-01's spoof as node-02's failure:\n%s", out)
	}

	var list struct {
		Items      []json.RawMessage
		Unreadable []view.Unreadable
	}
	if err := json.Unmarshal([]byte(as("-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || len(list.Unreadable) != 2 {
		t.Fatalf("events -o json: %d items and %d unreadable, want the 2 real events and the 2 spoofs unreadable", len(list.Items), len(list.Unreadable))
	}
	for i, want := range real {
		got := &sluicev1.Event{}
		if err := store.Unmarshal(list.Items[i], got); err != nil || !proto.Equal(got, want) {
			t.Errorf("events -o json item %d: %v (%v), want %v", i, got, err, want)
		}
	}
	for _, u := range list.Unreadable {
		if u.Bucket != contract.StreamEvents || !strings.Contains(u.Reason, why) || !strings.Contains(u.Reason, own) {
			t.Errorf("events -o json: unreadable %+v, want it named by its sequence and saying why", u)
		}
	}

	// --follow: spoofs published while it follows are unreadable lines too.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fout, ferr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--server", env.URL, "--creds", admin, "events", "--follow"}, Streams{Out: &fout, Err: &ferr}, "test", time.Now)
	}()
	// margin: the poll ends as soon as the stored events are printed.
	natstest.Eventually(t, 30*time.Second, "events --follow to print the stored events", func() bool {
		return strings.Contains(fout.String(), "RolloutStarted")
	})
	publishAs(t, node01, own, spoofs("5-0123456789ab")...)
	natstest.Eventually(t, 30*time.Second, "events --follow to print the new spoofs", func() bool {
		return strings.Count(fout.String(), why) == 4
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("events --follow: exit %d: %s", code, ferr.String())
	}
	noSpoofShown("events --follow", fout.String())
}

// everyEventReadable checks that `sluice events` (as the user of args, if
// any) shows every stored event of a real run as an event: the services
// publish only what the contract's table lets their roles say (I11).
func everyEventReadable(t *testing.T, url string, args ...string) {
	t.Helper()
	code, stdout, stderr := sluice(t, url, append(args, "events", "--last", "1000000", "-o", "json")...)
	if code != 0 {
		t.Fatalf("events -o json: exit %d: %s", code, stderr)
	}
	var list view.List
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatal("events -o json: no events")
	}
	for _, u := range list.Unreadable {
		t.Errorf("a service's event is shown as unreadable: %s", u.Cell())
	}
}

// TestEvents_SecureMode_ANodesForgedCoordinatorEventAboutItself_IsUnreadable
// (I11): a coordinator's NodeReverted about node-01 that node-01 puts on
// its own subject is unreadable in `sluice events`, `--node node-01` and
// `--kind node`; the coordinator's real one, on its own subject, is found
// by each.
func TestEvents_SecureMode_ANodesForgedCoordinatorEventAboutItself_IsUnreadable(t *testing.T) {
	env := natstest.StartSecure(t, contract.DefaultSettings())
	reverted := func(reason string) *sluicev1.Event {
		return &sluicev1.Event{Time: timestamppb.Now(), Component: "rollout-coordinator", Kind: "node", Id: "node-01",
			Type: "NodeReverted", Node: "node-01", Rollout: "4-0123456789ab", Reason: reason}
	}
	publishAs(t, env.ConnectRole(t, creds.RoleNode, "node-01"), contract.EventSubject(contract.KindNode, "node-01"), reverted("forged by node-01"))
	publishAs(t, env.ConnectRole(t, creds.RoleCoordinator, ""), contract.EventSubjectOf(contract.RoleCoordinator, contract.KindNode, "node-01"),
		reverted("reverted to its backup"))
	admin := env.CredsFile(t, creds.RoleAdmin, "")
	for _, args := range [][]string{nil, {"--node", "node-01"}, {"--kind", "node"}} {
		code, out, stderr := sluice(t, env.URL, append([]string{"--creds", admin, "events"}, args...)...)
		if code != 0 {
			t.Fatalf("events %v: exit %d: %s", args, code, stderr)
		}
		if strings.Contains(out, "forged by node-01") || !strings.Contains(out, "reverted to its backup") ||
			strings.Count(out, "a node's credentials may publish here") != 1 {
			t.Errorf("events %v: want the coordinator's revert and node-01's forgery unreadable, saying why:\n%s", args, out)
		}
	}
}
