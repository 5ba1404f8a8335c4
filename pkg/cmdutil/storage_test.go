package cmdutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Issue 38, item 5: /readyz of a service whose writes the store refuses for
// want of space says so, in sluice's words, until a write lands again.
func TestReady_StoreFull_NotReadyNamingIt(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		JetStreamMaxStore: 128 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p := newProcess(zerolog.Nop())
	p.conn.Store(nc)
	p.SetReadiness(func() (bool, string) { return true, "ready: serving" })
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filled, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "filled", History: 64})
	if err != nil {
		t.Fatal(err)
	}
	other, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "other"})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(filled, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	big := &sluicev1.NodeStatus{Node: "n1", Message: strings.Repeat("x", 16<<10)}
	for i := 0; i < 32; i++ {
		if _, err := s.Create(ctx, fmt.Sprintf("k%02d", i), big); err != nil {
			break
		}
	}
	ok, why := p.Ready()
	if want := "the store's disk is full (JetStream error 10023, insufficient resources)"; ok || !strings.HasPrefix(why, "not ready: writes refused since ") || !strings.Contains(why, want) {
		t.Fatalf("Ready = %v, %q; want not ready, writes refused, %q", ok, why, want)
	}
	if err := js.DeleteKeyValue(ctx, "filled"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(other, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Create(ctx, "n1", big); err != nil {
		t.Fatal(err)
	}
	if ok, why := p.Ready(); !ok || why != "ready: serving" {
		t.Errorf("Ready after a write landed = %v, %q; want the service's own readiness", ok, why)
	}
}
