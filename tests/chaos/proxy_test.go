package chaos

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// envProxyChild runs TestProxy_StallDuringReconnect_ClockMoves's bubble in
// the child process the test starts: before the fix it never ends.
const envProxyChild = "CHAOS_PROXY_STALL_CHILD"

// A component that reconnects while it is stalled (seeds 896, 966:
// restart-nats and net-stall at one trigger) must not stand the clock
// still: nats.go reads the server's INFO holding its connection lock, and a
// publish waiting for that lock is no wait the clock counts. The bubble
// runs in a child process, ended after 20 s of real time if it stands
// still.
func TestProxy_StallDuringReconnect_ClockMoves(t *testing.T) {
	if os.Getenv(envProxyChild) == "1" {
		synctest.Test(t, stallDuringReconnect)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestProxy_StallDuringReconnect_ClockMoves$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), envProxyChild+"=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the bubble stood still: a stalled reconnect held the clock for 20 s of real time\n%s", out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func stallDuringReconnect(t *testing.T) {
	srv, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(time.Second) {
		t.Fatal("server not ready")
	}
	echo, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	if _, err := echo.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := echo.Flush(); err != nil {
		t.Fatal(err)
	}

	p := newInProcessProxy(srv)
	defer p.close()
	nc, err := nats.Connect("", nats.InProcessServer(p.inProcess("c")), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	stalled := make(chan struct{})
	go func() {
		p.mu.Lock()
		p.stalls["c"] = make(chan struct{}) // as stall does, before the drop
		ch := p.stalls["c"]
		p.mu.Unlock()
		close(stalled)
		time.Sleep(500 * time.Millisecond)
		p.mu.Lock()
		delete(p.stalls, "c")
		p.mu.Unlock()
		close(ch)
	}()
	<-stalled
	start := time.Now()
	p.drop("c") // the client reconnects inside the stall
	// Another user of the connection, publishing throughout the reconnect.
	for time.Since(start) < time.Second {
		_ = nc.Publish("elsewhere", nil)
		time.Sleep(10 * time.Millisecond)
	}
	msg, err := nc.Request("echo", []byte("hi"), time.Second)
	if err != nil {
		t.Fatalf("request after the stall: %v", err)
	}
	if string(msg.Data) != "hi" {
		t.Fatalf("echo answered %q", msg.Data)
	}
}
