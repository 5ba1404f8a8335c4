package contract

import "testing"

func TestThousands(t *testing.T) {
	for _, tt := range []struct {
		given int
		want  string
	}{{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {999000, "999,000"}, {1234567, "1,234,567"}, {-1234, "-1,234"}} {
		if got := Thousands(tt.given); got != tt.want {
			t.Errorf("Thousands(%d) = %q, want %q", tt.given, got, tt.want)
		}
	}
}

func TestPlural(t *testing.T) {
	for _, tt := range []struct {
		given int
		want  string
	}{{0, "0 intents"}, {1, "1 intent"}, {2, "2 intents"}, {1000, "1,000 intents"}} {
		if got := Plural(tt.given, "intent"); got != tt.want {
			t.Errorf("Plural(%d, \"intent\") = %q, want %q", tt.given, got, tt.want)
		}
	}
}
