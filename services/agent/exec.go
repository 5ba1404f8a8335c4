package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ApplyMode is how an ExecApplier hands the config to its command.
type ApplyMode string

// Apply modes.
const (
	// ApplyModeStdin writes the config as JSON to the command's stdin.
	ApplyModeStdin ApplyMode = "stdin"
	// ApplyModeFile writes the config as JSON to a file named by SLUICE_CONFIG.
	ApplyModeFile ApplyMode = "file"
)

// ExecApplier applies a config by running Command with /bin/sh -c. The
// config (the whole DesiredConfig as indented JSON) goes to its stdin or, in
// file mode, to a file whose path is in SLUICE_CONFIG. SLUICE_NODE and
// SLUICE_FINGERPRINT are set in both modes. A non-zero exit is an error
// carrying the end of the command's output.
type ExecApplier struct {
	Command string
	Mode    ApplyMode // "" = stdin
	// Path is the file of file mode; "" writes a temporary file, removed
	// after the command.
	Path string
}

// ConfigPath is the file holding the config in force, in file mode with a Path.
func (e ExecApplier) ConfigPath() string {
	if e.Mode == ApplyModeFile {
		return e.Path
	}
	return ""
}

// Apply runs the command with cfg.
func (e ExecApplier) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := marshalReadable(cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	env := []string{"SLUICE_NODE=" + cfg.GetNode(), "SLUICE_FINGERPRINT=" + cfg.GetFingerprint()}
	var stdin io.Reader
	switch e.Mode {
	case "", ApplyModeStdin:
		stdin = bytes.NewReader(b)
	case ApplyModeFile:
		path, cleanup, err := writeConfigFile(e.Path, b)
		if err != nil {
			return err
		}
		defer cleanup()
		env = append(env, "SLUICE_CONFIG="+path)
	default:
		return fmt.Errorf("apply mode %q: want %q or %q", e.Mode, ApplyModeStdin, ApplyModeFile)
	}
	if out, err := runShell(ctx, e.Command, env, stdin); err != nil {
		return fmt.Errorf("apply command: %w: %s", err, strings.TrimSpace(tail(out, MaxCheckOutput)))
	}
	return nil
}

// writeConfigFile writes b to path, or to a temporary file when path is "".
func writeConfigFile(path string, b []byte) (string, func(), error) {
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", nil, fmt.Errorf("write config: %w", err)
		}
		if err := writeFileAtomic(path, b, 0o644); err != nil {
			return "", nil, fmt.Errorf("write config %s: %w", path, err)
		}
		return path, func() {}, nil
	}
	f, err := os.CreateTemp("", "sluice-config-*.json")
	if err != nil {
		return "", nil, fmt.Errorf("write config: %w", err)
	}
	cleanup := func() { _ = os.Remove(f.Name()) }
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		cleanup()
		return "", nil, fmt.Errorf("write config %s: %w", f.Name(), werr)
	}
	return f.Name(), cleanup, nil
}

// runShell runs command with /bin/sh -c, the agent's environment plus env,
// and returns its output (stdout and stderr combined). When ctx ends the
// command's whole process group is killed, so a stuck child cannot hold the
// agent.
func runShell(ctx context.Context, command string, env []string, stdin io.Reader) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		err = fmt.Errorf("exit status %d", exit.ExitCode())
	}
	return out.String(), err
}
