package redistest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

func TestServer_StopAndRestart_SameAddress(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()

	s.Stop()
	s.Stop() // a second Stop does nothing
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a stopped server answered")
	}

	s.Restart()
	if s.Addr() != addr {
		t.Errorf("address after restart = %s, want %s", s.Addr(), addr)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("get k after restart = %q, %v; want the saved v", v, err)
	}
	if want := "redis://" + addr + "/0"; s.URL() != want {
		t.Errorf("url = %s, want %s", s.URL(), want)
	}
}

func TestStart_Options(t *testing.T) {
	s := redistest.Start(t, redistest.WithPassword("s3cret"), redistest.WithNotifyKeyspaceEvents("KEA"))
	ctx := context.Background()
	flags, err := s.Client().ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := flags["notify-keyspace-events"]; got != "AKE" {
		t.Errorf("notify-keyspace-events = %q, want AKE (KEA as the server writes it)", got)
	}
	anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("ping without the password: %v, want NOAUTH", err)
	}
}

// fatalTB records Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStart_WithoutRedisServer_FailsSayingHowToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(f)
	}()
	<-done
	if !strings.Contains(f.msg, "apt-get install redis-server, or: make redis") {
		t.Errorf("failure = %q, want it to say how to install redis-server", f.msg)
	}
}
