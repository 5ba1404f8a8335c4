package registry_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// writeFile writes content to name in dir, failing the test on an error.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDir_Fetch_OneDocumentPerFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", tenantAYAML+"---\n"+tenantBYAML)
	writeFile(t, dir, "b.JSON", t100JSON)
	writeFile(t, dir, "c.yml", tenantBYAML+"---\n"+brokenYAML)
	writeFile(t, dir, "README.md", "# not an intent file\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub"), "d.yaml", t100JSON) // not read: subdirectories are not

	snap := fetch(t, open(t, &sluicev1.DirectoryRegistry{Path: dir}))

	if got, want := origins(snap), []string{"a.yaml", "b.JSON", "c.yml"}; !slices.Equal(got, want) {
		t.Fatalf("origins = %q, want %q", got, want)
	}
	tests := []struct {
		origin  string
		want    []string
		wantErr string
	}{
		{origin: "a.yaml", want: []string{"layer2network/tenant-a", "layer2network/tenant-b"}},
		{origin: "b.JSON", want: []string{"routingtable/t100"}},
		{origin: "c.yml", want: []string{"layer2network/tenant-b"}, wantErr: "c.yml: document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			d := document(t, snap, tt.origin)
			if got := ids(d); !slices.Equal(got, tt.want) {
				t.Errorf("intents = %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && d.Err != nil:
				t.Errorf("err = %v, want none", d.Err)
			case tt.wantErr != "" && (d.Err == nil || !strings.Contains(d.Err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one with %q", d.Err, tt.wantErr)
			}
		})
	}
}

func TestDir_EmptyDirectory_IsAnEmptySnapshot(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "notes.txt", "nothing here\n")

	snap := fetch(t, open(t, &sluicev1.DirectoryRegistry{Path: dir}))

	if len(snap.Documents) != 0 || snap.Version == "" {
		t.Errorf("snapshot = %+v, want no documents and a version", snap)
	}
}

func TestDir_MissingDirectory_IsAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	r := open(t, &sluicev1.DirectoryRegistry{Path: dir})

	snap, err := r.Fetch(context.Background())

	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v, want one naming %s", err, dir)
	}
	if len(snap.Documents) != 0 || snap.Version != "" {
		t.Errorf("an error came with a snapshot: %+v", snap)
	}
}

func TestDir_PathIsAFile_IsAnError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", tenantAYAML)
	r := open(t, &sluicev1.DirectoryRegistry{Path: filepath.Join(dir, "a.yaml")})
	if _, err := r.Fetch(context.Background()); err == nil {
		t.Error("fetch of a file as a directory succeeded, want an error")
	}
}

func TestDir_AddEditRemove_ChangeVersionAndAnnounce(t *testing.T) {
	dir := t.TempDir()
	r := open(t, &sluicev1.DirectoryRegistry{Path: dir})
	changed := r.Changed()
	v0 := fetch(t, r).Version

	// The watch starts in the background: write until it has seen a write.
	untilNudge(t, changed, func(try int) { writeFile(t, dir, "a.yaml", tenantAYAML+strings.Repeat("#\n", try)) })
	settle(changed)
	writeFile(t, dir, "a.yaml", tenantAYAML)
	waitNudge(t, changed, "edit a.yaml")
	settle(changed)
	v1 := fetch(t, r).Version
	if v1 == v0 {
		t.Error("version did not change when a file was added")
	}
	if v := fetch(t, r).Version; v != v1 {
		t.Errorf("version changed without a change: %s, then %s", v1, v)
	}

	writeFile(t, dir, "b.yml", tenantBYAML)
	waitNudge(t, changed, "add b.yml")
	settle(changed)
	v2 := fetch(t, r).Version
	if v2 == v1 {
		t.Error("version did not change when a file was added")
	}

	writeFile(t, dir, "b.yml", strings.Replace(tenantBYAML, "200", "201", 1))
	waitNudge(t, changed, "edit b.yml")
	settle(changed)
	v3 := fetch(t, r).Version
	if v3 == v2 {
		t.Error("version did not change when a file was edited")
	}

	if err := os.Rename(filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.yml")); err != nil {
		t.Fatal(err)
	}
	waitNudge(t, changed, "rename b.yml to c.yml")
	settle(changed)
	v4 := fetch(t, r).Version
	if v4 == v3 {
		t.Error("version did not change when a file was renamed")
	}

	if err := os.Remove(filepath.Join(dir, "c.yml")); err != nil {
		t.Fatal(err)
	}
	waitNudge(t, changed, "remove c.yml")
	settle(changed)
	if v := fetch(t, r).Version; v != v1 {
		t.Errorf("version after removing the added file = %s, want the version before it, %s", v, v1)
	}

	writeFile(t, dir, "notes.txt", "not an intent file\n")
	// 600ms: an announcement would come 200ms (dirDebounce) after the
	// write; a slower one can only go unseen, never fail the test wrongly.
	select {
	case <-changed:
		t.Error("a change of a file that is not read was announced")
	case <-time.After(600 * time.Millisecond):
	}
	if r.Note() != "" {
		t.Errorf("note = %q, want none while watched", r.Note())
	}
}

func TestDir_MissingDirectory_WatchedOnceItExists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkout")
	r := open(t, &sluicev1.DirectoryRegistry{Path: dir})
	changed := r.Changed()

	eventually(t, "note while missing", func() bool { return r.Note() != "" })
	if n, want := r.Note(), "not watched ("; !strings.HasPrefix(n, want) || !strings.HasSuffix(n, "): changes are seen at the next sync interval") {
		t.Errorf("note = %q, want it to begin %q and say when changes are seen", n, want)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	waitNudge(t, changed, "the directory was created")
	eventually(t, "note cleared", func() bool { return r.Note() == "" })
	if snap := fetch(t, r); len(snap.Documents) != 0 {
		t.Errorf("documents = %q, want none", origins(snap))
	}
	settle(changed)
	writeFile(t, dir, "a.yaml", tenantAYAML)
	waitNudge(t, changed, "add a.yaml")

	// Removed again: announced, and an error until it is back.
	settle(changed)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitNudge(t, changed, "the directory was removed")
	eventually(t, "note after removal", func() bool { return r.Note() != "" })
	if _, err := r.Fetch(context.Background()); err == nil {
		t.Error("fetch of a removed directory succeeded, want an error")
	}
}

func TestDir_KindAndLocation(t *testing.T) {
	r := open(t, &sluicev1.DirectoryRegistry{Path: "/srv/sluice/intents/"})
	if r.Kind() != "directory" || r.Location() != "/srv/sluice/intents" {
		t.Errorf("kind %q, location %q", r.Kind(), r.Location())
	}
}

func TestCheck_Directory(t *testing.T) {
	tests := []struct {
		name    string
		given   string
		wantErr string
	}{
		{name: "absolute", given: "/srv/sluice/intents"},
		{name: "missing is fine until fetched", given: "/nonexistent/intents"},
		{name: "empty", given: "", wantErr: "directory.path: required"},
		{name: "relative", given: "intents", wantErr: `directory.path: "intents" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.Check(&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Directory{
				Directory: &sluicev1.DirectoryRegistry{Path: tt.given}}})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

// A file over intent.MaxFileSize is not read (the same bound as sluice
// apply -f): its document is an error naming the file and the limit, and
// the other files read as usual.
func TestDir_FileOverTheLimitIsNotRead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", tenantAYAML)
	f, err := os.Create(filepath.Join(dir, "big.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(intent.MaxFileSize + 1); err != nil { // sparse: nothing is written
		t.Fatal(err)
	}
	f.Close()
	snap := fetch(t, open(t, &sluicev1.DirectoryRegistry{Path: dir}))
	if got := ids(document(t, snap, "a.yaml")); !slices.Equal(got, []string{"layer2network/tenant-a"}) {
		t.Errorf("a.yaml: intents %q", got)
	}
	d := document(t, snap, "big.yaml")
	if d.Err == nil || !strings.Contains(d.Err.Error(), "big.yaml is 16,777,217 bytes, over the limit of 16,777,216 bytes (16 MiB)") || len(d.Intents) != 0 {
		t.Errorf("big.yaml: err %v, intents %q; want the size and the limit named, and none", d.Err, ids(d))
	}
}

// A polled directory (a network file system, where inotify misses other
// hosts' changes) is read at each Fetch and never announces a change: the
// configurator reads it every sync interval.
func TestDir_Poll_IsReadButNeverWatched(t *testing.T) {
	dir := t.TempDir()
	r := open(t, &sluicev1.DirectoryRegistry{Path: dir, Poll: true})
	changed := r.Changed()
	v0 := fetch(t, r).Version
	// A watch starts in the background: write for a second, then wait out
	// the 200ms a watched directory takes to announce (dirDebounce).
	for try := range 10 {
		writeFile(t, dir, "a.yaml", tenantAYAML+strings.Repeat("#\n", try))
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-changed:
		t.Error("a polled directory announced a change")
	case <-time.After(600 * time.Millisecond):
	}
	if v := fetch(t, r).Version; v == v0 {
		t.Error("version did not change when a file was added: a polled directory is read at each Fetch")
	}
}
