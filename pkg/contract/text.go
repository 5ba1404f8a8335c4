package contract

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text that came from a user or a stored value (a name, a label, a registry
// key) and is shown to a person — an error, a terminal line, a log — may
// carry control characters: an escape sequence in an intent name retitles
// the terminal, recolours it or rewrites the lines above. Names and labels
// are refused at intake when they hold one (CheckPrintable, the Valid*
// rules); what is shown anyway goes through Quote (a name) or Escape (a
// whole message), so that it reaches the terminal as visible text.

// Printable reports whether s is valid UTF-8 without control characters
// (C0, DEL, C1) or the bidirectional overrides that reorder what a
// terminal shows.
func Printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError && !validAt(s, i) || unsafeRune(r) {
			return false
		}
	}
	return true
}

// validAt reports whether the U+FFFD at s[i] is written in s, not an
// invalid byte.
func validAt(s string, i int) bool { return strings.HasPrefix(s[i:], "\uFFFD") }

// unsafeRune: a control character, or a bidirectional embedding, override
// or isolate (U+202A-U+202E, U+2066-U+2069).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// Quote returns s as it is when it is Printable, else Go-quoted
// (strconv.Quote: "a\x1b]0;x\a"), so that a name shown in a message is
// visible text and its odd characters can be read.
func Quote(s string) string {
	if Printable(s) {
		return s
	}
	return strconv.Quote(s)
}

// Escape returns msg with every unsafe character (see Printable) but
// newline and tab written as a Go escape (\x1b, \u202e), and every invalid
// byte as \xNN: for a whole message that may embed text from a user.
func Escape(msg string) string {
	if Printable(msg) {
		return msg
	}
	var b strings.Builder
	for i, r := range msg {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == utf8.RuneError && !validAt(msg, i):
			fmt.Fprintf(&b, `\x%02x`, msg[i])
		case unsafeRune(r):
			q := strconv.QuoteRune(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EscapeLine is Escape for text shown as one line (a field error, a
// listing's cell): newline and tab are escaped too, so that no text can
// start a line of its own that looks like the program's.
func EscapeLine(msg string) string {
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(Escape(msg))
}

// CheckPrintable reports a control character (or an invalid byte) in s,
// the value of what ("the intent name", "label key"), naming the first one
// and its position: what intake refuses before any other rule.
func CheckPrintable(what, s string) error {
	for i, r := range s {
		if r == utf8.RuneError && !validAt(s, i) {
			return fmt.Errorf("%s %s is not valid UTF-8 (byte %d is 0x%02x)", what, Clip(s), i, s[i])
		}
		if unsafeRune(r) {
			return fmt.Errorf("%s %s holds the control character %U at byte %d: only printable characters are allowed", what, Clip(s), r, i)
		}
	}
	return nil
}

// clipAt is how many bytes of a value Clip shows.
const clipAt = 64

// Clip returns s Go-quoted, cut to its first 64 bytes and its size when it
// is longer ("\"aaaa…\"… (921,600 bytes)"): how an error shows a value it
// refuses, which may be far too long to print whole.
func Clip(s string) string {
	if len(s) <= clipAt {
		return strconv.Quote(s)
	}
	cut := clipAt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + Thousands(len(s)) + " bytes)"
}

// Thousands writes n with comma separators: 8,388,608.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// Plural counts n of noun, in thousands: "1 intent", "2 intents",
// "1,000 intents".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return Thousands(n) + " " + noun + "s"
}

// Snake writes a camelCase or PascalCase name in snake_case, lower case:
// "inProgress" is "in_progress" (a count's key as a metric label),
// "RolloutPhase" is "rollout_phase" (upper-cased, an enum's value prefix).
// An underscore goes before every upper-case letter but a first one.
func Snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
