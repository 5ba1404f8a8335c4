package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
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
			subject, data = contract.EventSubject(ev.GetKind(), ev.GetId()), b
		}
		if _, err := env.JS.Publish(context.Background(), subject, data); err != nil {
			t.Fatal(err)
		}
	}
}

// outOfOrder are events stored in the order Third, First, Second, then
// one without a time (ordered by when the stream stored it: now, after
// the others), then a message that does not decode (stream sequence 5).
func outOfOrder() []*sluicev1.Event {
	at := func(sec int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2020, 1, 2, 10, 0, sec, 0, time.UTC))
	}
	return []*sluicev1.Event{
		{Time: at(3), Component: "rollout-coordinator", Kind: "rollout", Id: "2-bbbbbbbbbbbb", Type: "Third", Reason: "published first"},
		{Time: at(1), Component: "agent", Kind: "node", Id: "node-01", Type: "First", Reason: "published second"},
		{Time: at(2), Component: "agent", Kind: "node", Id: "node-02", Type: "Second", Reason: "published third"},
		{Component: "agent", Kind: "node", Id: "node-03", Type: "NoTime", Reason: "published fourth"},
		nil,
	}
}

func TestEvents_PrintsTheStoredEventsByTime_NotInTheOrderStored(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	publishEvents(t, env, outOfOrder()...)
	const unreadable = "<unreadable: SLUICE_EVENTS/5"
	tests := []struct {
		name string
		args []string
		want []string // each line's event type, or the start of the unreadable cell
	}{
		{"all", nil, []string{"First", "Second", "Third", "NoTime", unreadable}},
		{"one kind", []string{"--kind", "node"}, []string{"First", "Second", "NoTime", unreadable}},
		{"the last N stored, by time", []string{"--last", "3"}, []string{"Second", "NoTime", unreadable}},
		{"the last N of one kind", []string{"--kind", "node", "--last", "3"}, []string{"Second", "NoTime", unreadable}},
		{"one rollout", []string{"--rollout", "2-bbbbbbbbbbbb"}, []string{"Third", unreadable}},
		{"one node", []string{"--node", "node-02"}, []string{"Second", unreadable}},
		{"types, any case, by prefix", []string{"--type", "first,Sec*"}, []string{"First", "Second", unreadable}},
		{"the last N kept", []string{"--type", "first,Sec*,third", "--last", "3"}, []string{"First", "Second", unreadable}},
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
