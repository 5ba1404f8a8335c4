package logging

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestPretty(t *testing.T) {
	var buf bytes.Buffer
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range []struct {
		format string
		w      any
		want   bool
	}{
		{FormatText, &buf, true},
		{FormatJSON, &buf, false},
		{FormatAuto, &buf, false}, // not a terminal
		{FormatAuto, f, false},    // a file is no terminal either
		{"", &buf, false},
	} {
		w := tt.w.(interface{ Write([]byte) (int, error) })
		got, err := Pretty(tt.format, w)
		if err != nil || got != tt.want {
			t.Errorf("Pretty(%q, %T) = %v, %v; want %v", tt.format, tt.w, got, err, tt.want)
		}
	}
	if _, err := Pretty("yaml", &buf); err == nil || !strings.Contains(err.Error(), "auto, text or json") {
		t.Errorf("Pretty(yaml) error %v; want one naming the formats", err)
	}
}

// Text is for people (no JSON object per line); JSON is one object a line.
func TestNew_Formats(t *testing.T) {
	var text, js bytes.Buffer
	for _, c := range []struct {
		buf    *bytes.Buffer
		pretty bool
	}{{&text, true}, {&js, false}} {
		l, err := New(c.buf, "info", c.pretty)
		if err != nil {
			t.Fatal(err)
		}
		l.Info().Str(FieldNode, "node-01").Msg("applied")
	}
	var v map[string]any
	if err := json.Unmarshal(js.Bytes(), &v); err != nil || v["message"] != "applied" || v[FieldNode] != "node-01" {
		t.Errorf("json line %q: %v", js.String(), err)
	}
	if json.Valid(text.Bytes()) || !strings.Contains(text.String(), "applied") || !strings.Contains(text.String(), "node=node-01") {
		t.Errorf("text line %q: want a human-readable line with the message and node=node-01", text.String())
	}
}
