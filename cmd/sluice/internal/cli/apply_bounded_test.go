package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Issue 9, item 14: however many problems a batch has, the CLI prints the
// reason (the first 100 problems and a count of all) and exits 1.
func TestApply_ManyProblems_PrintsTheFirst100AndCountsAll(t *testing.T) {
	s := startSystem(t, 0)
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "---\nkind: RoutingTable\nname: a%04d\nspec: {tableId: 100}\n", i)
	}
	for i := range 150 {
		fmt.Fprintf(&b, "---\nkind: RoutingTable\nname: reserved%04d\nspec: {tableId: 254}\n", i)
	}
	code, stdout, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "many.yaml", b.String()))
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stdout %q stderr %.500q", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 101 {
		t.Fatalf("%d lines, want 100 problems and a summary:\n%.2000s", len(lines), stderr)
	}
	if want := "rejected: 152 problems with the batch; nothing was stored (the first 100 are listed)"; lines[100] != want {
		t.Errorf("summary %q, want %q", lines[100], want)
	}
	if !strings.Contains(stderr, "routingtable/reserved0000: spec.tableId: table id 254 is used by 150 routing tables") ||
		!strings.Contains(stderr, "routingtable/a0000: spec.tableId: table id 100 is used by 1,000 routing tables") {
		t.Errorf("the two conflicts are not each reported once:\n%.3000s", stderr)
	}
}

// Apply limits, checked before anything is sent: nothing listens on port 1,
// so a refusal that connected first would be a connection error instead.
func TestApply_OverTheLimits_IsRefusedBeforeSendingNamingTheLimit(t *testing.T) {
	huge := writeFile(t, "huge.yaml", tenantA+"# ")
	if err := os.Truncate(huge, 20_000_000); err != nil { // a 20 MB file, sparse
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 10_000 {
		fmt.Fprintf(&b, "---\nkind: RoutingTable\nname: t%05d\nspec: {tableId: %d}\n", i, 1000+i)
	}
	many := writeFile(t, "many.yaml", b.String())
	tests := []struct {
		name    string
		given   []string
		wantErr string
	}{
		{name: "a 20 MB file", given: []string{"-f", huge},
			wantErr: huge + " is 20,000,000 bytes, over the limit of 16,777,216 bytes (16 MiB) for one intent file; nothing was read: split it into several files"},
		{name: "10,000 intents in one apply", given: []string{"-f", many},
			wantErr: "error: " + many + ": 10,000 intents in one apply, over the limit of 5,000: apply them in batches of at most 5,000; nothing was sent"},
		{name: "10,000 intents in a dry run", given: []string{"-f", many, "--dry-run"}, wantErr: "10,000 intents in one apply, over the limit of 5,000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, "nats://127.0.0.1:1", append([]string{"apply"}, tt.given...)...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, tt.wantErr) {
				t.Fatalf("exit code %d, stdout %q, stderr %.500q; want 1 and %q", code, stdout, stderr, tt.wantErr)
			}
		})
	}
}
