package intent

import (
	"fmt"
	"io"
	"os"
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
		thousands(n), thousands(MaxIntentsPerApply), thousands(MaxIntentsPerApply))
}

// ReadFile reads an intent file of at most MaxFileSize bytes (`sluice
// apply -f`, and a directory registry's files). It stops reading past the
// limit, so that a file that grows, or a device without a size, costs no
// more memory than an allowed file.
func ReadFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooLarge := func(size string) error {
		return fmt.Errorf("%s is %s bytes, over the limit of %s bytes (16 MiB) for one intent file; nothing was read: split it into several files",
			name, size, thousands(MaxFileSize))
	}
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileSize {
		return nil, tooLarge(thousands(int(st.Size())))
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, tooLarge("more than " + thousands(MaxFileSize))
	}
	return b, nil
}
