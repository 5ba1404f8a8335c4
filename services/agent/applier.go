package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Applier puts a rendered config in force on the node.
type Applier interface {
	Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error
}

// ApplierFunc adapts a function to an Applier.
type ApplierFunc func(ctx context.Context, cfg *sluicev1.DesiredConfig) error

// Apply calls f.
func (f ApplierFunc) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	return f(ctx, cfg)
}

// NewFileApplier returns an Applier that writes the whole desired config
// (node, revision, fingerprint and config) as indented JSON to path,
// atomically: a reader sees the old file or the new one, never a mix.
func NewFileApplier(path string) Applier { return fileApplier{path: path} }

type fileApplier struct{ path string }

// ConfigPath is the file the config in force is written to.
func (f fileApplier) ConfigPath() string { return f.path }

func (f fileApplier) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := marshalReadable(cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := writeFileAtomic(f.path, b, 0o644); err != nil {
		return fmt.Errorf("write config %s: %w", f.path, err)
	}
	return nil
}

var readable = protojson.MarshalOptions{Multiline: true, Indent: "  "}

// marshalReadable encodes cfg as indented protojson with a final newline.
func marshalReadable(cfg *sluicev1.DesiredConfig) ([]byte, error) {
	b, err := readable.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// writeFileAtomic replaces path with data: it writes a temporary file in the
// same directory, syncs it, renames it over path and syncs the directory, so
// that after a crash path holds either the old or the new content.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
