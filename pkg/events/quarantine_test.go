package events

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// captured is a Publisher that keeps what is published.
type captured struct{ msgs []*nats.Msg }

func (c *captured) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	c.msgs = append(c.msgs, m)
	return nil, nil
}
func (c *captured) PublishAsyncComplete() <-chan struct{} { return nil }

func (c *captured) events(t *testing.T) []*sluicev1.Event {
	t.Helper()
	var out []*sluicev1.Event
	for _, m := range c.msgs {
		ev := &sluicev1.Event{}
		if err := store.Unmarshal(m.Data, ev); err != nil {
			t.Fatalf("published event does not decode: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func TestQuarantine_ReportsEachRevisionOnce(t *testing.T) {
	pub := &captured{}
	var logs bytes.Buffer
	q := NewQuarantine(NewEmitter(pub, zerolog.New(&logs), "reaper", nil))
	key := contract.BackupKey("node-01")
	cause := fmt.Errorf("decode %s/%s: %w: not well-formed for its key: it names node \"\", not \"node-01\"",
		contract.BucketNodeConfigs, key, store.ErrUndecodable)

	if !q.Report(contract.BucketNodeConfigs, key, 7, cause, "treated as no backup") {
		t.Fatal("the first report of revision 7 was not made")
	}
	if q.Report(contract.BucketNodeConfigs, key, 7, cause, "treated as no backup") {
		t.Fatal("revision 7 read again was reported again")
	}
	if !q.Report(contract.BucketNodeConfigs, key, 9, cause, "treated as no backup") {
		t.Fatal("the key rewritten (revision 9) with another refused value was not reported")
	}
	evs := pub.events(t)
	if len(evs) != 2 {
		t.Fatalf("published %d events, want 2 (revisions 7 and 9)", len(evs))
	}
	ev := evs[0]
	if ev.GetType() != TypeValueUnreadable || ev.GetKind() != contract.KindQuarantine ||
		ev.GetId() != contract.BucketNodeConfigs+"."+key || ev.GetBucket() != contract.BucketNodeConfigs ||
		ev.GetKey() != key || ev.GetNode() != "node-01" || ev.GetComponent() != "reaper" {
		t.Fatalf("event = %v", ev)
	}
	want := contract.BucketNodeConfigs + "/" + key + ` (revision 7) is unreadable (value does not decode: not well-formed for its key: it names node "", not "node-01"); treated as no backup`
	if ev.GetReason() != want {
		t.Fatalf("reason\n got %q\nwant %q", ev.GetReason(), want)
	}
	if got := pub.msgs[0].Subject; got != contract.EventSubjectOf(contract.RoleReaper, contract.KindQuarantine, contract.BucketNodeConfigs+"."+key) {
		t.Fatalf("subject %q", got)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], `"key":"`+key+`"`) {
		t.Fatalf("want one warning per report naming the key, got:\n%s", logs.String())
	}
}

func TestQuarantine_NamesTheNodeOnlyForNodeKeys(t *testing.T) {
	pub := &captured{}
	q := NewQuarantine(NewEmitter(pub, zerolog.Nop(), "coordinator", nil))
	bad := errors.New("it names no rollout")
	q.Report(contract.BucketStatus, "node-02", 1, bad, "skipped")
	q.Report(contract.BucketRollouts, contract.KeyActive, 0, bad, "skipped")
	q.Report(contract.BucketNodeConfigs, contract.KeyFence, 3, bad, "skipped")
	evs := pub.events(t)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	for i, want := range []string{"node-02", "", ""} {
		if evs[i].GetNode() != want {
			t.Errorf("%s/%s: node %q, want %q", evs[i].GetBucket(), evs[i].GetKey(), evs[i].GetNode(), want)
		}
	}
	if r := evs[1].GetReason(); strings.Contains(r, "revision") {
		t.Errorf("an unknown revision (0) is named: %q", r)
	}
}

func TestQuarantine_MemoryIsBounded(t *testing.T) {
	q := NewQuarantine(NewEmitter(nil, zerolog.Nop(), "reaper", nil))
	bad := errors.New("truncated")
	for i := range maxQuarantined + 5 {
		q.Report(contract.BucketStatus, fmt.Sprintf("n-%d", i), 1, bad, "skipped")
	}
	if n := len(q.seen); n > maxQuarantined {
		t.Fatalf("remembers %d keys, want at most %d", n, maxQuarantined)
	}
}
