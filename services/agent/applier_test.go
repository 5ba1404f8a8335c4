package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

func TestFileApplier_WritesAtomicallyAndRoundTrips(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "config.json")
	ap := agent.NewFileApplier(path)
	ctx := context.Background()
	for _, want := range []*sluicev1.DesiredConfig{desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)} {
		if err := ap.Apply(ctx, want); err != nil {
			t.Fatalf("apply %s: %v", want.Fingerprint, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got := &sluicev1.DesiredConfig{}
		if err := store.Unmarshal(b, got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("file holds %s (%v), want %v", b, err, want)
		}
		entries, err := os.ReadDir(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "config.json" {
			names := make([]string, len(entries))
			for i, e := range entries {
				names[i] = e.Name()
			}
			t.Fatalf("directory holds %v, want only config.json (no temp files)", names)
		}
	}
}

func TestFileApplier_CancelledContext_WritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := agent.NewFileApplier(path).Apply(ctx, desiredConfig("n1", "one", 100)); err == nil {
		t.Fatal("Apply with a cancelled context succeeded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("stat: %v, want the file not written", err)
	}
}
