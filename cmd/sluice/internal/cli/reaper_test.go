package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestReaperConfirm_StoresTheDepartedNodes(t *testing.T) {
	s := startSystem(t, 1) // node-01 is present
	b := openBuckets(t, s.URL())
	ctx := context.Background()
	statuses := store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	for _, n := range []string{"ghost-1", "ghost-2"} {
		if _, err := statuses.Create(ctx, n, &sluicev1.NodeStatus{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := sluice(t, s.URL(), "reaper", "confirm", "--node", "node-01"); code != 1 || !strings.Contains(stderr, "node-01 has no keys or is present") {
		t.Fatalf("confirming a present node: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	code, stdout, stderr := sluice(t, s.URL(), "reaper", "confirm", "--reason", "rack gone")
	if code != 0 || !strings.Contains(stdout, "confirmed 2 departed node(s): ghost-1, ghost-2") {
		t.Fatalf("reaper confirm: exit %d\n%s%s", code, stdout, stderr)
	}
	e, err := store.New(b.Control, func() *sluicev1.ReapConfirm { return &sluicev1.ReapConfirm{} }).Get(ctx, contract.KeyReapConfirm)
	if err != nil || strings.Join(e.Value.GetNodes(), ",") != "ghost-1,ghost-2" || e.Value.GetReason() != "rack gone" || e.Value.GetBy() == "" {
		t.Fatalf("stored confirmation %v, %v; want ghost-1 and ghost-2 with who and why", e.Value, err)
	}
}
