package main

import (
	"fmt"
	"io"
	"os"
)

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks
// an initramfs from. Every entry is owned by root.
type cpioWriter struct {
	w   io.Writer
	ino int
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
)

func (c *cpioWriter) entry(name string, mode uint32, data []byte) error {
	c.ino++
	nlink := 1
	if mode&modeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(c.w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := c.pad(len(hdr) + len(name) + 1); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	return c.pad(len(data))
}

// pad writes zeros up to the next multiple of 4 after n bytes.
func (c *cpioWriter) pad(n int) error {
	if r := n % 4; r != 0 {
		_, err := c.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}

func (c *cpioWriter) dir(name string, perm uint32) error { return c.entry(name, modeDir|perm, nil) }

func (c *cpioWriter) file(name string, data []byte, perm uint32) error {
	return c.entry(name, modeFile|perm, data)
}

func (c *cpioWriter) fileFrom(name, path string, perm uint32) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return c.file(name, b, perm)
}

func (c *cpioWriter) symlink(name, target string) error {
	return c.entry(name, modeSymlink|0o777, []byte(target))
}

func (c *cpioWriter) close() error { return c.entry("TRAILER!!!", 0, nil) }
