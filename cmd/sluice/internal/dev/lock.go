package dev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the file in the data directory that `sluice dev` holds an
// exclusive flock on while it runs, with its PID inside.
const LockFile = "LOCK"

// ErrDataDirInUse: another `sluice dev` runs on the data directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockDataDir takes the exclusive lock on dir, or says which process holds
// it. The kernel drops the lock when the process ends, however it ends, so
// a killed `sluice dev` never leaves a stale lock behind.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, fmt.Errorf("%w: %s is used by another sluice dev (%s holds %s): stop that one first, or pass --data with another directory",
			ErrDataDirInUse, dir, holder, path)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
