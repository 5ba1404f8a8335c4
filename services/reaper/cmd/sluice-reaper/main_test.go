package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/services/reaper"
)

// wait bounds the waits on the reaper. Margin: each wait returns as soon as
// its condition holds; 30s covers a cold start on a loaded 2-core machine
// many times over.
const wait = 30 * time.Second

func TestRun_StopsCleanlyOnCancel(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"--server", env.URL, "--interval", "1s"}, &stderr) }()
	// The reaper has started once it has connected under its name.
	natstest.Eventually(t, wait, "reaper connection", func() bool {
		cz, err := env.Server.Connz(nil)
		if err != nil {
			return false
		}
		for _, c := range cz.Conns {
			if c.Name == "sluice-reaper" {
				return true
			}
		}
		return false
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", c, stderr.String())
		}
	case <-time.After(wait):
		t.Fatal("run did not return after cancel")
	}
}

func TestRun_RejectsTooShortGrace(t *testing.T) {
	var stderr bytes.Buffer
	if c := run(context.Background(), []string{"--grace", "10ms"}, &stderr); c != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", c, stderr.String())
	}
}

func TestRun_ReplicasFromEnvAreVerifiedAgainstTheBuckets(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings()) // R1 buckets
	t.Setenv("SLUICE_REPLICAS", "3")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var stderr bytes.Buffer
	if c := run(ctx, []string{"--server", env.URL}, &stderr); c != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", c, stderr.String())
	}
	for _, want := range []string{"bucket sluice-intents: replicas is 1, reaper wants at least 3", "--replicas 3"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}

func TestRun_ReadyOnceBound_AndAMicroServiceWithItsStatus(t *testing.T) {
	env := natstest.StartBare(t)
	addr := testaddr.Held(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--server", env.URL, "--http-addr", addr, "--interval", "1s"}, &stderr)
	}()
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// No bucket exists yet: the reaper waits for their managers.
	natstest.Eventually(t, wait, "not ready while binding", func() bool {
		c, body := readyz()
		return c == http.StatusServiceUnavailable && body == "not ready: binding the buckets\n"
	})
	ectx, ecancel := context.WithTimeout(ctx, wait)
	defer ecancel()
	if err := buckets.Ensure(ectx, env.JS, contract.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, "ready once bound", func() bool {
		c, body := readyz()
		return c == http.StatusOK && body == "ready: buckets bound; a pass every 1s\n"
	})
	var st contract.ReaperStatus
	natstest.Eventually(t, wait, "a pass in the status", func() bool {
		msg, err := env.Conn.Request(contract.SubjectReaperStatus, nil, 5*time.Second)
		return err == nil && json.Unmarshal(msg.Data, &st) == nil && !st.LastPass.IsZero()
	})
	if st.Version != "dev" || st.Deleted[reaper.KindNodes] != 0 || len(st.Deleted) != 3 {
		t.Fatalf("status %+v, want version dev and three kinds counted at 0", st)
	}
	infoSubject, _ := micro.ControlSubject(micro.InfoVerb, contract.ReaperService, "")
	msg, err := env.Conn.Request(infoSubject, nil, wait)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil || info.Version != "0.0.0-dev" || info.Metadata["instance"] == "" {
		t.Fatalf("micro info %s (%v), want version 0.0.0-dev and the instance", msg.Data, err)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d:\n%s", c, stderr.String())
	}
}

// lockedBuffer is a log destination goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
