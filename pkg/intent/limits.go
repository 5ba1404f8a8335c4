package intent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Bounds on what one apply carries, so that a mistaken or hostile input is
// refused, with an error naming the limit, before it costs memory and time.
// docs/intents.md ("Apply limits") documents them.
const (
	// MaxFileSize bounds one intent file ReadFile reads, checked before
	// the file is read whole. A request must in any case fit the NATS
	// server's max_payload (8 MiB in sluice's configuration).
	MaxFileSize = 16 << 20
	// MaxIntentsPerApply bounds the intents of one apply request; more are
	// applied in several requests. The set stored has no such bound.
	MaxIntentsPerApply = 5000
)

// CheckApplySize says when n intents are more than one apply may carry.
func CheckApplySize(n int) error {
	if n <= MaxIntentsPerApply {
		return nil
	}
	return fmt.Errorf("%s intents in one apply, over the limit of %s: apply them in batches of at most %s",
		contract.Thousands(n), contract.Thousands(MaxIntentsPerApply), contract.Thousands(MaxIntentsPerApply))
}

// ErrNotRegular is the error of ReadRegular for a path that is not a
// regular file: a named pipe, a device or a socket.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads an intent file of at most MaxFileSize bytes (`sluice
// apply -f FILE`). It stops reading past the limit, so that a file that
// grows, or a device without a size, costs no more memory than an allowed
// file. name may be a pipe (`sluice apply -f <(...)`).
func ReadFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, name)
}

// ReadRegular is ReadFile for a file found in a directory (`sluice apply -f
// DIR`, a directory registry): anything but a regular file, or a symlink to
// one, is an ErrNotRegular naming what it is, and is never read — opening a
// named pipe for reading would wait for a writer for ever. The open does
// not block and the kind is taken from the open file, so a file replaced by
// a pipe in between is caught too.
func ReadRegular(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, %w: skipped", name, fileKind(st.Mode()), ErrNotRegular)
	}
	return readLimited(f, name)
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	}
	return "of mode " + m.Type().String()
}

// readLimited reads f, named name in errors, up to MaxFileSize bytes.
func readLimited(f *os.File, name string) ([]byte, error) {
	tooLarge := func(size string) error {
		return fmt.Errorf("%s is %s bytes, over the limit of %s bytes (16 MiB) for one intent file; nothing was read: split it into several files",
			name, size, contract.Thousands(MaxFileSize))
	}
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileSize {
		return nil, tooLarge(contract.Thousands(int(st.Size())))
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, tooLarge("more than " + contract.Thousands(MaxFileSize))
	}
	return b, nil
}
