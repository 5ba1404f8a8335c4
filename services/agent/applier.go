package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/internal/atomicfile"
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

// writeFileAtomic replaces path with data (atomicfile.Write).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return atomicfile.Write(path, data, perm)
}
