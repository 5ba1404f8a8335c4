package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// askLastGood requests node's last-good config and returns the answer,
// retrying until the agent has subscribed (no responders before that).
func askLastGood(t *testing.T, nc *nats.Conn, node string) *nats.Msg {
	t.Helper()
	var m *nats.Msg
	// margin: each try ends as soon as the agent answers.
	natstest.Eventually(t, waitFor, "an answer on "+contract.LastGoodSubject(node), func() bool {
		var err error
		m, err = nc.Request(contract.LastGoodSubject(node), nil, 2*time.Second)
		return err == nil
	})
	return m
}

// The agent answers on its own subject with the last-good config as stored
// on its disk: what `sluice recover --from-nodes` rebuilds the intents from
// after the store is lost. Before it has one it says so (404), and a file
// that no longer decodes is reported (500), never answered as a config.
func TestAgent_AnswersWithItsLastGoodFromDisk(t *testing.T) {
	dir := t.TempDir()
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: &recorder{}})

	m := askLastGood(t, f.env.Conn, "n1")
	if code := m.Header.Get(contract.LastGoodErrorCodeHeader); code != "404" || !strings.Contains(m.Header.Get(contract.LastGoodErrorHeader), "no last-good") {
		t.Fatalf("answer before any config: code %q, %q; want 404, no last-good", code, m.Header.Get(contract.LastGoodErrorHeader))
	}

	one := desiredConfig("n1", "one", 100)
	f.writeDesired(t, one)
	f.waitStatus(t, "n1", "Provisioned", provisioned(one.Fingerprint))
	m = askLastGood(t, f.env.Conn, "n1")
	if code := m.Header.Get(contract.LastGoodErrorCodeHeader); code != "" {
		t.Fatalf("answer after a config: code %s: %s", code, m.Header.Get(contract.LastGoodErrorHeader))
	}
	got := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(m.Data, got); err != nil {
		t.Fatalf("answer does not decode: %v\n%s", err, m.Data)
	}
	if got.GetRevision() != one.GetRevision() || got.GetFingerprint() != one.GetFingerprint() || !proto.Equal(got.GetConfig(), one.GetConfig()) {
		t.Fatalf("answer %v, want the config applied %v", got, one)
	}
	disk, err := os.ReadFile(filepath.Join(dir, agent.LastGoodFile))
	if err != nil || string(disk) != string(m.Data) {
		t.Fatalf("answer is not the file on disk (%v):\n%s\nfile:\n%s", err, m.Data, disk)
	}

	// Another node's subject is not this agent's to answer.
	if _, err := f.env.Conn.Request(contract.LastGoodSubject("n2"), nil, time.Second); err == nil {
		t.Fatal("a request for n2's last-good was answered by n1's agent")
	}

	if err := os.WriteFile(filepath.Join(dir, agent.LastGoodFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	m = askLastGood(t, f.env.Conn, "n1")
	if code := m.Header.Get(contract.LastGoodErrorCodeHeader); code != "500" || len(m.Data) != 0 || !strings.Contains(m.Header.Get(contract.LastGoodErrorHeader), "does not decode") {
		t.Fatalf("answer with a damaged file: code %q, %q, body %q; want 500, does not decode, no body", code, m.Header.Get(contract.LastGoodErrorHeader), m.Data)
	}
}
