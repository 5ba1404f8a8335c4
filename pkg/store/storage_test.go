package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Issue 38, item 5: with the store full every error read "context deadline
// exceeded" or a bare code, and nothing said "no space". A real server with
// a tiny max_file_store refuses writes as a full disk would be refused by
// the limit (JetStream error 10023): the error, on both write paths (kv and
// the direct request), says so in sluice's words and stays matchable, and
// StorageTrouble (what /readyz reports) holds it until a write lands.
func TestStore_StoreFull_SaysSoInItsOwnWords(t *testing.T) {
	const maxStore = 256 << 10
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		JetStreamMaxStore: maxStore,
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kvFull, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "filled", History: 64})
	if err != nil {
		t.Fatal(err)
	}
	kvOther, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "other"})
	if err != nil {
		t.Fatal(err)
	}
	big := &sluicev1.NodeStatus{Node: "n1", Message: strings.Repeat("x", 16<<10)}
	for name, s := range map[string]*store.Store[*sluicev1.NodeStatus]{
		"kv":     store.New(kvFull, newStatus),
		"direct": store.New(kvFull, newStatus).Direct(nc),
	} {
		t.Run(name, func(t *testing.T) {
			var werr error
			for i := 0; i < 4*maxStore/(16<<10) && werr == nil; i++ {
				_, werr = s.Create(ctx, fmt.Sprintf("k-%s-%03d", name, i), big)
			}
			if werr == nil {
				t.Fatalf("%d bytes written past a max_file_store of %d and no error", 4*maxStore, maxStore)
			}
			if !errors.Is(werr, store.ErrStorageFull) {
				t.Fatalf("error %q does not match ErrStorageFull", werr)
			}
			var api *jetstream.APIError
			if !errors.As(werr, &api) || api.ErrorCode != store.CodeInsufficientResources {
				t.Errorf("error %q does not keep JetStream's error 10023 matchable (got %v)", werr, api)
			}
			want := "the store's disk is full (JetStream error 10023, insufficient resources): free space on the NATS server's JetStream store (store_dir), or raise its max_file_store"
			if !strings.Contains(werr.Error(), want) {
				t.Errorf("error %q\nwant it to contain %q", werr, want)
			}
			if se, since := store.StorageTrouble(); se == nil || se.Code != store.CodeInsufficientResources || since.IsZero() {
				t.Errorf("StorageTrouble = %v, %v; want the 10023 error and when it started", se, since)
			}
		})
	}
	// Space freed (the filled bucket deleted): the next write lands and
	// the trouble is over.
	if err := js.DeleteKeyValue(ctx, "filled"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(kvOther, newStatus).Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"}); err != nil {
		t.Fatalf("a write after space was freed: %v", err)
	}
	if se, _ := store.StorageTrouble(); se != nil {
		t.Errorf("StorageTrouble = %v after a write landed, want nil", se)
	}
}
