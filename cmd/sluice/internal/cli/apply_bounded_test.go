package cli

import (
	"fmt"
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
