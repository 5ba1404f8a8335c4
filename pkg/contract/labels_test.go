package contract

import (
	"fmt"
	"strings"
	"testing"
)

func TestCheckLabels_KubernetesRulesAndBounds(t *testing.T) {
	many := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[fmt.Sprintf("l%05d", i)] = "v"
		}
		return m
	}
	tests := []struct {
		name    string
		given   map[string]string
		max     int
		wantErr string // "" for none
	}{
		{name: "plain", given: map[string]string{"zone": "zone-a", "rack": "R1_2.b"}, max: 64},
		{name: "prefixed keys and an empty value", given: map[string]string{"topology.kubernetes.io/zone": "eu-1a", "node-role.kubernetes.io/worker": ""}, max: 64},
		{name: "at the count limit", given: many(64), max: 64},
		{name: "over the count limit", given: many(10_000), max: 64, wantErr: "the set has 10,000 labels, over the limit of 64"},
		{name: "a 63-character name and value", given: map[string]string{strings.Repeat("k", 63): strings.Repeat("v", 63)}, max: 64},
		{name: "a 64-character key name", given: map[string]string{strings.Repeat("k", 64): "v"}, max: 64,
			wantErr: "has a name of 64 characters, over the limit of 63"},
		{name: "a 900 KB value", given: map[string]string{"zone": strings.Repeat("a", 900_000)}, max: 64,
			wantErr: "label zone has a value of 900,000 characters, over the limit of 63"},
		{name: "a 254-character prefix", given: map[string]string{strings.Repeat("p", 254) + "/zone": "a"}, max: 64,
			wantErr: "has a prefix of 254 characters, over the limit of 253"},
		{name: "an upper-case prefix", given: map[string]string{"Example.com/zone": "a"}, max: 64, wantErr: "must be a DNS subdomain"},
		{name: "two slashes", given: map[string]string{"a/b/c": "a"}, max: 64, wantErr: "the name must be letters"},
		{name: "an empty key", given: map[string]string{"": "a"}, max: 64, wantErr: "a label key is empty"},
		{name: "a key ending in '-'", given: map[string]string{"zone-": "a"}, max: 64, wantErr: "the name must be letters"},
		{name: "a value with a space", given: map[string]string{"zone": "zone a"}, max: 64, wantErr: `label zone has the value "zone a"`},
		{name: "an escape sequence in a key", given: map[string]string{"zone\x1b]0;pwned\a": "a"}, max: 64,
			wantErr: `label key "zone\x1b]0;pwned\a" holds the control character U+001B at byte 4`},
		{name: "an escape sequence in a value", given: map[string]string{"zone": "a\x1b[31m"}, max: 64,
			wantErr: `the value of label zone "a\x1b[31m" holds the control character U+001B at byte 1`},
		{name: "invalid UTF-8", given: map[string]string{"zone": "a\xff"}, max: 64, wantErr: "is not valid UTF-8 (byte 1 is 0xff)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := CheckLabels("the set", tt.given, tt.max)
			if tt.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("errors %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.wantErr) {
				t.Fatalf("errors %q, want one containing %q", errs, tt.wantErr)
			}
			// An error shows a value it refuses cut short, and as visible text.
			if msg := errs[0].Error(); len(msg) > 400 || !Printable(msg) {
				t.Errorf("the error is %d bytes or not printable: %.500q", len(msg), msg)
			}
		})
	}
}

func TestQuoteAndEscape_ControlCharactersBecomeVisible(t *testing.T) {
	tests := []struct {
		name, given, quote, escape string
	}{
		{name: "plain text stays", given: "layer2network/tenant-a", quote: "layer2network/tenant-a", escape: "layer2network/tenant-a"},
		{name: "non-ASCII letters stay", given: "zürich ✓", quote: "zürich ✓", escape: "zürich ✓"},
		{name: "an OSC title sequence", given: "a\x1b]0;pwned\a", quote: `"a\x1b]0;pwned\a"`, escape: `a\x1b]0;pwned\a`},
		{name: "a C1 CSI", given: "a\u009b31m", quote: `"a\u009b31m"`, escape: `a\u009b31m`},
		{name: "a bidi override", given: "a\u202eb", quote: `"a\u202eb"`, escape: `a\u202eb`},
		{name: "newline and tab kept by Escape", given: "line 1\n\tline 2", quote: `"line 1\n\tline 2"`, escape: "line 1\n\tline 2"},
		{name: "an invalid byte", given: "a\xffb", quote: `"a\xffb"`, escape: `a\xffb`},
		{name: "a carriage return", given: "ok\rFAKE", quote: `"ok\rFAKE"`, escape: `ok\rFAKE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quote(tt.given); got != tt.quote {
				t.Errorf("Quote = %s, want %s", got, tt.quote)
			}
			if got := Escape(tt.given); got != tt.escape {
				t.Errorf("Escape = %q, want %q", got, tt.escape)
			}
		})
	}
}

func TestValidName_ControlCharactersAndLongNames_AreNamedNotEchoed(t *testing.T) {
	for _, given := range []string{"evil\x1b]0;pwned\a", "a\u009b2J", strings.Repeat("a", 900_000)} {
		err := ValidName(given)
		if err == nil {
			t.Fatalf("ValidName(%.40q) = nil", given)
		}
		if msg := err.Error(); len(msg) > 200 || !Printable(msg) {
			t.Errorf("ValidName(%.40q) = %d bytes, printable %v: %.300q", given, len(msg), Printable(msg), msg)
		}
	}
}

func TestEscapeLine_NewlinesToo(t *testing.T) {
	if got, want := EscapeLine("a\nrejected: 0 problems\t\x1b[2K"), `a\nrejected: 0 problems\t\x1b[2K`; got != want {
		t.Errorf("EscapeLine = %q, want %q", got, want)
	}
}
