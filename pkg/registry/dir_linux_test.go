package registry_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A named pipe with an intent file's name is reported as a document in
// error and never opened for reading (that would wait for a writer for
// ever); the other files are read and the fetch returns.
func TestDir_NamedPipe_IsReportedNotRead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", tenantAYAML)
	if err := syscall.Mkfifo(filepath.Join(dir, "b.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "c.json", t100JSON)

	snap := fetch(t, open(t, &sluicev1.DirectoryRegistry{Path: dir}))

	if got, want := origins(snap), []string{"a.yaml", "b.yaml", "c.json"}; !slices.Equal(got, want) {
		t.Fatalf("origins = %q, want %q", got, want)
	}
	d := document(t, snap, "b.yaml")
	if !errors.Is(d.Err, intent.ErrNotRegular) || !strings.Contains(d.Err.Error(), "b.yaml is a named pipe (FIFO)") {
		t.Errorf("b.yaml: err = %v, want ErrNotRegular naming the file and its kind", d.Err)
	}
	if got := ids(document(t, snap, "c.json")); !slices.Equal(got, []string{"routingtable/t100"}) {
		t.Errorf("c.json: intents = %q, want routingtable/t100 (files after the pipe are read)", got)
	}
}
