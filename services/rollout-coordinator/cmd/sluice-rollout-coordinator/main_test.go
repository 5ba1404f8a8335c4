package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/pkg/contract"
)

// syncBuffer is a log destination goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// binary is one run of the binary's run in this process.
type binary struct {
	base   string
	logs   *syncBuffer
	cancel context.CancelFunc
	code   chan int
}

func start(t *testing.T, url, instance string) *binary {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &binary{logs: &syncBuffer{}, cancel: cancel, code: make(chan int, 1)}
	// Port 0, the address read from the log: a port found free and closed
	// first could be taken by another process before run listens on it.
	go func() {
		c.code <- run(ctx, []string{"--server", url, "--http-addr", "127.0.0.1:0", "--instance", instance, "--leader-lease", "3s"}, c.logs)
	}()
	t.Cleanup(func() { c.stop(t) })
	// margin: the poll ends as soon as the line is logged.
	natstest.Eventually(t, 30*time.Second, instance+"'s listening address in its log", func() bool {
		c.base = cmdutil.ServedAt(c.logs.String())
		return c.base != ""
	})
	return c
}

func (c *binary) stop(t *testing.T) {
	c.cancel()
	select {
	case code := <-c.code:
		if code != 0 {
			t.Errorf("exit code %d, want 0:\n%s", code, c.logs.String())
		}
		c.code <- code // stop may be called again at cleanup
	case <-time.After(60 * time.Second): // margin: run returns as soon as it stopped
		t.Error("run did not return after cancel")
	}
}

func (c *binary) get(path string) (int, string) {
	cl := http.Client{Timeout: 10 * time.Second} // margin: answered in-process, in milliseconds
	resp, err := cl.Get(c.base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *binary) waitReady(t *testing.T, code int, prefix string) string {
	t.Helper()
	// margin: the poll ends as soon as the answer is the one wanted; a
	// takeover or a lost lease bucket shows within a few seconds.
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, b := c.get("/readyz")
		if got == code && strings.HasPrefix(b, prefix) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q; want %d %q", got, b, code, prefix)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's endpoint
	}
}

func TestRun_ReadyWhileLeadingOrStandingBy_NotWithoutBucketsOrLease(t *testing.T) {
	env := natstest.StartBare(t)
	a := start(t, env.URL, "coord-a")

	// The configurator's buckets are missing: bound it is not.
	a.waitReady(t, http.StatusServiceUnavailable, "not ready: binding the buckets")
	if code, _ := a.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d while binding", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := buckets.Ensure(ctx, env.JS, contract.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	term := strings.TrimSpace(strings.TrimPrefix(a.waitReady(t, http.StatusOK, "ready: leading term "), "ready: leading term "))
	b := start(t, env.URL, "coord-b")
	b.waitReady(t, http.StatusOK, "ready: standing by, lease held by coord-a since ")
	// margin: logged before the standby said it was ready; the poll ends at once.
	natstest.Eventually(t, 30*time.Second, "the standby's log line", func() bool {
		return strings.Count(b.logs.String(), "standing by: lease held by coord-a since ") == 1
	})

	for _, tc := range []struct {
		c    *binary
		want []string
	}{
		{a, []string{"sluice_coordinator_is_leader 1\n", "sluice_coordinator_term " + term + "\n", `sluice_nodes{phase="provisioned"} 0`}},
		{b, []string{"sluice_coordinator_is_leader 0\n", "sluice_coordinator_term " + term + "\n"}},
	} {
		_, metrics := tc.c.get("/metrics")
		for _, w := range tc.want {
			if !strings.Contains(metrics, w) {
				t.Errorf("%s/metrics lacks %q", tc.c.base, w)
			}
		}
	}
	if _, metrics := b.get("/metrics"); strings.Contains(metrics, "sluice_nodes{") {
		t.Errorf("the standby reports nodes:\n%s", metrics)
	}

	// Both are micro services; their metadata says who leads.
	roles := microInfo(t, env, 2)
	if roles["coord-a"] != "leader/"+term || roles["coord-b"] != "standby/"+term {
		t.Fatalf("micro info roles %v, want coord-a leader/%s and coord-b standby/%s", roles, term, term)
	}
	msg, err := env.Conn.Request(contract.SubjectCoordinatorStatus, nil, 10*time.Second) // margin: answered at once
	if err != nil {
		t.Fatal(err)
	}
	var st contract.CoordinatorStatus
	if err := json.Unmarshal(msg.Data, &st); err != nil || st.LeaseHolder != "coord-a" || fmt.Sprint(st.Term) != term || st.Since.IsZero() || st.Version != "dev" {
		t.Fatalf("status %s (%v), want coord-a's term %s with a since", msg.Data, err, term)
	}

	// The leader stops: the standby leads the next term.
	a.stop(t)
	term2 := strings.TrimSpace(strings.TrimPrefix(b.waitReady(t, http.StatusOK, "ready: leading term "), "ready: leading term "))
	if n1, _ := strconv.Atoi(term); atoi(t, term2) <= n1 {
		t.Fatalf("the new leader's term %s is not above %s", term2, term)
	}
	if _, metrics := b.get("/metrics"); !strings.Contains(metrics, "sluice_coordinator_is_leader 1\n") {
		t.Fatalf("the new leader's is_leader is not 1")
	}
	if roles := microInfo(t, env, 1); roles["coord-b"] != "leader/"+term2 || len(roles) != 1 {
		t.Fatalf("micro info roles %v, want coord-b leader/%s only", roles, term2)
	}

	// Without a lease bucket there is no telling who leads: not ready.
	if err := env.JS.DeleteKeyValue(ctx, contract.BucketLeases); err != nil {
		t.Fatal(err)
	}
	b.waitReady(t, http.StatusServiceUnavailable, "not ready: cannot read the leader lease: ")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// microInfo asks every instance of the coordinator's micro service for its
// info: instance → "role/term". It waits for the answers of want instances,
// then briefly for any more.
func microInfo(t *testing.T, env *natstest.Env, want int) map[string]string {
	t.Helper()
	subject, err := micro.ControlSubject(micro.InfoVerb, contract.CoordinatorService, "")
	if err != nil {
		t.Fatal(err)
	}
	inbox := env.Conn.NewRespInbox()
	sub, err := env.Conn.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := env.Conn.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	// margin: the wanted answers come at once; the deadline only ends a
	// wait for one that never comes. Then 500ms for more (an instance that
	// should have stopped): each instance answers at once, and a stopped
	// one has closed its connection, so it cannot answer late.
	deadline := time.Now().Add(30 * time.Second)
	for {
		wait := time.Until(deadline)
		if len(out) >= want {
			wait = 500 * time.Millisecond
		}
		msg, err := sub.NextMsg(max(wait, time.Millisecond))
		if err != nil {
			return out
		}
		var info micro.Info
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			t.Fatal(err)
		}
		if info.Version != "0.0.0-dev" {
			t.Errorf("micro version %q, want 0.0.0-dev", info.Version)
		}
		out[info.Metadata["instance"]] = info.Metadata["role"] + "/" + info.Metadata["term"]
	}
}
