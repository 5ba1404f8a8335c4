package registry

import (
	"strings"
	"testing"
)

func TestNotifyFlagsNote(t *testing.T) {
	tests := []struct {
		name  string
		given string
		want  string // "" or a part of the note
	}{
		{name: "off", given: "", want: `keyspace notifications are off on the server (notify-keyspace-events="")`},
		{name: "keyevent only", given: "E$g", want: "are off on the server"},
		{name: "all classes", given: "AK", want: ""},
		{name: "all classes, both kinds", given: "AKE", want: ""},
		{name: "generic and string classes", given: "Kg$", want: ""},
		{name: "no string class", given: "Kg", want: "leave out $ (SET)"},
		{name: "no generic class", given: "K$x", want: "leave out g (DEL, RENAME)"},
		{name: "no class at all", given: "K", want: "leave out $ (SET) and g (DEL, RENAME)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := notifyFlagsNote(tt.given)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("notifyFlagsNote(%q) = %q, want %q", tt.given, got, tt.want)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ given, want string }{
		{"redis://redis.example:6379/0", "redis://redis.example:6379/0"},
		{"redis://sluice@redis.example:6379/0", "redis://sluice@redis.example:6379/0"},
		{"redis://sluice:hunter2@redis.example:6379/0", "redis://sluice@redis.example:6379/0"},
		{"rediss://:hunter2@redis.example/1?skip_verify=true", "rediss://redis.example/1?skip_verify=true"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.given); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.given, got, tt.want)
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	if got, want := escapeGlob(`a*b?c[d]e\f^`), `a\*b\?c\[d\]e\\f\^`; got != want {
		t.Errorf("escapeGlob = %q, want %q", got, want)
	}
}
