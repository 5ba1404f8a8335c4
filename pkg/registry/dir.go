// Directory registry: intents read from the files of one directory on the
// configurator's host, typically a GitOps checkout.
//
// The files read are the *.yaml, *.yml and *.json files directly in the
// directory (not in subdirectories), in name order, with the extension in
// any case: the files sluice apply -f DIR reads. Only regular files (or
// symlinks to them) are read; a named pipe, device or socket with such a
// name is reported, never opened for a read that could wait for ever. A
// Fetch's reads run under its deadline. Each file is a Document
// whose Origin is its name; it may hold any number of intents. Changed
// follows the directory's file system events.

package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const (
	// dirRetry is the wait before trying again to watch a directory that
	// could not be watched (missing, or out of inotify watches).
	dirRetry = 3 * time.Second
	// dirDebounce gathers the burst of events of one change (a git
	// checkout writes many files) into one nudge.
	dirDebounce = 200 * time.Millisecond
)

// dirWatchRetry: dirRetry (3 s) without growth: a watch costs only the local kernel, and a directory that appears is watched soon.
var dirWatchRetry = backoff.Policy{Base: dirRetry, Cap: dirRetry}

// dirExtensions are the extensions of the files read, as intent.ParseFiles
// reads them from a directory.
var dirExtensions = []string{".yaml", ".yml", ".json"}

// dirRegistry reads intents from the files of a directory.
type dirRegistry struct {
	*changeWatch
	path string

	readFile func(string) ([]byte, error) // intent.ReadRegular; tests hang it

	mu        sync.Mutex
	reading   string    // the path a Fetch's read is on; "" between reads
	readSince time.Time // when that Fetch began
}

// checkDir checks a directory registry spec. Whether the directory exists
// is not checked: it is read on the configurator's host, at each Fetch.
func checkDir(spec *sluicev1.DirectoryRegistry) error {
	p := spec.GetPath()
	if p == "" {
		return errors.New("directory.path: required, an absolute path such as /srv/sluice/intents")
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("directory.path: %q is not an absolute path", p)
	}
	return nil
}

// openDir returns the registry of spec. A missing directory is an error
// of Fetch, not of openDir.
func openDir(spec *sluicev1.DirectoryRegistry, log zerolog.Logger) (Registry, error) {
	if err := checkDir(spec); err != nil {
		return nil, err
	}
	r := &dirRegistry{path: filepath.Clean(spec.GetPath()), readFile: intent.ReadRegular}
	watch := r.watch
	if spec.GetPoll() {
		watch = func(context.Context) {} // read every sync interval only
	}
	r.changeWatch = newChangeWatch(log.With().Str("location", r.path).Logger(), watch)
	return r, nil
}

func (r *dirRegistry) Kind() string     { return "directory" }
func (r *dirRegistry) Location() string { return r.path }

// Close stops the watch. It is safe to call twice.
func (r *dirRegistry) Close() error {
	r.stop()
	return nil
}

// Fetch reads every intent file of the directory, within ctx: a read that
// does not finish in time (a hung network file system) is an error, and
// while it hangs every later Fetch fails at once naming it, so that one
// stuck read is never joined by another. A directory without any intent
// file is an empty snapshot; one that cannot be listed is an error.
func (r *dirRegistry) Fetch(ctx context.Context) (Snapshot, error) {
	r.mu.Lock()
	if r.reading != "" {
		stuck, since := r.reading, r.readSince
		r.mu.Unlock()
		return Snapshot{}, fmt.Errorf("read intent files of %s: an earlier read, stuck on %s, has not returned since %s", r.path, stuck, since.Format(time.RFC3339))
	}
	r.reading, r.readSince = r.path, time.Now()
	r.mu.Unlock()

	type result struct {
		snap Snapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		snap, err := r.read(ctx)
		r.mu.Lock()
		r.reading = ""
		r.mu.Unlock()
		done <- result{snap, err}
	}()
	select {
	case res := <-done:
		return res.snap, res.err
	case <-ctx.Done():
		r.mu.Lock()
		stuck := r.reading
		r.mu.Unlock()
		if stuck == "" { // it returned meanwhile
			res := <-done
			return res.snap, res.err
		}
		return Snapshot{}, fmt.Errorf("read intent files of %s: %s did not return in time: %w", r.path, stuck, ctx.Err())
	}
}

// read reads the directory, noting in r.reading the file being read. Only
// regular files (or symlinks to them) are read: a named pipe, a device or
// a socket with an intent file's name is a document in error (its intents
// stay as they were), never opened for a read that could wait for ever.
func (r *dirRegistry) read(ctx context.Context) (Snapshot, error) {
	entries, err := os.ReadDir(r.path) // sorted by name
	if err != nil {
		return Snapshot{}, fmt.Errorf("list intent files: %w", err)
	}
	snap := Snapshot{Documents: []Document{}}
	d := newDigest()
	vanished := false
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, fmt.Errorf("read intent files of %s: %w", r.path, err)
		}
		name := e.Name()
		if e.IsDir() || !isIntentFile(name) {
			continue
		}
		path := filepath.Join(r.path, name)
		r.mu.Lock()
		r.reading = path
		r.mu.Unlock()
		data, err := r.readFile(path) // at most intent.MaxFileSize
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Removed since the listing (or a dangling symlink, such as an
			// editor's lock file): not there.
			vanished = true
		case err != nil:
			d.add(name, "unreadable", err.Error())
			snap.Documents = append(snap.Documents, Document{Origin: name, Err: fmt.Errorf("read %s: %w", name, err)})
		default:
			d.add(name, "file", string(data))
			ins, err := intent.Parse(name, data)
			snap.Documents = append(snap.Documents, Document{Origin: name, Intents: ins, Err: err})
		}
	}
	if vanished {
		// Files vanish one by one when the whole directory is removed or
		// replaced while being read; what was read is then not its content.
		if _, err := os.Stat(r.path); err != nil {
			return Snapshot{}, fmt.Errorf("read intent files: %w", err)
		}
	}
	snap.Version = d.String()
	return snap, nil
}

// watch follows the directory's events until ctx is done, setting the
// watch up again every dirRetry (jittered) while it cannot be.
func (r *dirRegistry) watch(ctx context.Context) {
	for again := false; ; again = true {
		err := r.follow(ctx, again)
		if ctx.Err() != nil {
			return
		}
		r.setNote(fmt.Sprintf("not watched (%v): changes are seen at the next sync interval", err))
		if !sleep(ctx, dirWatchRetry.Delay(0)) {
			return
		}
	}
}

// follow watches the directory and nudges for each change of an intent
// file, gathering bursts, until the watch fails or ctx is done. When the
// watch is set up again after a failure it nudges at once: the directory
// may have changed meanwhile.
func (r *dirRegistry) follow(ctx context.Context, again bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.path, err)
	}
	defer w.Close()
	if err := w.Add(r.path); err != nil {
		return fmt.Errorf("watch %s: %w", r.path, err)
	}
	r.setNote("")
	if again {
		r.nudge()
	}

	var pending <-chan time.Time // set while a nudge waits for its burst to end
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pending:
			pending = nil
			r.nudge()
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("the watch ended")
			}
			if ev.Name == r.path && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The watch is gone with the directory (or follows it
				// elsewhere): what is at the path now needs a sync and a
				// new watch.
				r.nudge()
				return fmt.Errorf("%s was removed or renamed", r.path)
			}
			if isIntentFile(ev.Name) && ev.Has(fsnotify.Create|fsnotify.Write|fsnotify.Remove|fsnotify.Rename) && pending == nil {
				pending = time.After(dirDebounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("the watch ended")
			}
			// Events may be lost (the kernel's queue overflowed): only a
			// sync tells what changed.
			r.log.Warn().Err(err).Msg("directory watch lost events")
			r.nudge()
		}
	}
}

// isIntentFile reports whether name has one of dirExtensions, in any case.
func isIntentFile(name string) bool {
	return slices.Contains(dirExtensions, strings.ToLower(filepath.Ext(name)))
}
