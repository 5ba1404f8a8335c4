package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/services/agent"
)

func TestExecApplier_HandsTheConfigToTheCommand(t *testing.T) {
	tests := []struct {
		name    string
		mode    agent.ApplyMode
		path    bool // file mode with a Path
		command string
	}{
		{name: "stdin", mode: agent.ApplyModeStdin, command: `cat > "$OUT"`},
		{name: "default mode is stdin", command: `cat > "$OUT"`},
		{name: "file, temporary", mode: agent.ApplyModeFile, command: `cp "$SLUICE_CONFIG" "$OUT"`},
		{name: "file at a path", mode: agent.ApplyModeFile, path: true, command: `cp "$SLUICE_CONFIG" "$OUT"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.json")
			t.Setenv("OUT", out)
			ap := agent.ExecApplier{Command: tt.command + ` && test "$SLUICE_NODE" = n1`, Mode: tt.mode}
			if tt.path {
				ap.Path = filepath.Join(dir, "etc", "net.json")
			}
			want := desiredConfig("n1", "one", 100)
			if err := ap.Apply(context.Background(), want); err != nil {
				t.Fatalf("apply: %v", err)
			}
			if got := readConfig(t, out); !proto.Equal(got, want) {
				t.Fatalf("command got %v, want %v", got, want)
			}
			if tt.path {
				if got := readConfig(t, ap.Path); !proto.Equal(got, want) || ap.ConfigPath() != ap.Path {
					t.Fatalf("%s holds %v (ConfigPath %q), want the config kept there", ap.Path, got, ap.ConfigPath())
				}
			}
		})
	}
}

func TestExecApplier_FailingCommand_ErrorCarriesItsOutput(t *testing.T) {
	tests := []struct {
		name    string
		given   agent.ExecApplier
		wantErr []string
	}{
		{name: "non-zero exit", given: agent.ExecApplier{Command: `echo "RTNETLINK answers: File exists" >&2; exit 4`},
			wantErr: []string{"exit status 4", "RTNETLINK answers: File exists"}},
		{name: "long output is cut to its end", given: agent.ExecApplier{Command: `head -c 10000 /dev/zero | tr '\0' x; echo END >&2; exit 1`},
			wantErr: []string{"exit status 1", "END"}},
		{name: "unknown mode", given: agent.ExecApplier{Command: "true", Mode: "pipe"}, wantErr: []string{`apply mode "pipe"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.given.Apply(context.Background(), desiredConfig("n1", "one", 100))
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > agent.MaxCheckOutput+200 {
				t.Errorf("error is %d bytes, want the output cut to %d", len(err.Error()), agent.MaxCheckOutput)
			}
		})
	}
}

func TestExecApplier_TemporaryFileIsRemoved(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	ap := agent.ExecApplier{Command: `test -s "$SLUICE_CONFIG"`, Mode: agent.ApplyModeFile}
	if err := ap.Apply(context.Background(), desiredConfig("n1", "one", 100)); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("%d files left in TMPDIR, want none", len(entries))
	}
}
