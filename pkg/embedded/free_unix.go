//go:build unix

package embedded

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged writer has on dir's file system.
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec,unconvert // Bsize's type differs by OS
}
