package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A read that hangs (a hung network file system) ends the Fetch at its
// deadline with an error naming the file; while it still hangs, the next
// Fetch fails at once instead of starting a second read; once it returns,
// fetches work again.
func TestDir_HungRead_FailsAtTheDeadlineAndIsNotJoined(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("kind: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := openDir(&sluicev1.DirectoryRegistry{Path: dir}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*dirRegistry)
	t.Cleanup(r.stop)
	release := make(chan struct{})
	reads := 0
	r.readFile = func(name string) ([]byte, error) {
		reads++
		<-release
		return nil, errors.New("released")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.Fetch(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "a.yaml did not return in time") {
		t.Fatalf("err = %v, want the deadline, naming a.yaml", err)
	}
	_, err = r.Fetch(context.Background()) // would hang for ever if it read again
	if err == nil || !strings.Contains(err.Error(), "an earlier read, stuck on "+filepath.Join(dir, "a.yaml")) {
		t.Fatalf("second fetch: err = %v, want it to name the stuck read", err)
	}

	close(release)
	// Poll: the hung read's goroutine clears the mark once released.
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := r.Fetch(context.Background())
		if err == nil {
			if len(snap.Documents) != 1 || snap.Documents[0].Err == nil {
				t.Errorf("snapshot = %+v, want a.yaml with the read's error", snap.Documents)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fetch after the read returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if reads != 2 {
		t.Errorf("reads = %d, want 2 (the hung one, then one after it returned)", reads)
	}
}
