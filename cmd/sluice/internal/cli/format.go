package cli

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// outputFlag registers -o/--output, the format printListing writes.
func outputFlag(fs *pflag.FlagSet, output *string) {
	fs.StringVarP(output, "output", "o", formatTable, "output format: table, json or yaml")
}

// checkFormat is the usage error of an -o value other than the formats
// given (by default table, json and yaml).
func checkFormat(output string, allowed ...string) error {
	if len(allowed) == 0 {
		allowed = formats
	}
	if !slices.Contains(allowed, output) {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("unknown output format %q: use one of %s", output, strings.Join(allowed, ", "))}
	}
	return nil
}

// none is printed for an empty cell, so columns stay readable.
const none = "-"

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// short shortens a revision id for display; "" stays "-".
func short(id string) string {
	if id == "" {
		return none
	}
	return render.Short(id)
}

// shortN keeps the first n characters of s.
func shortN(s string, n int) string {
	if s == "" {
		return none
	}
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// oneLine joins the lines of s and cuts it to max runes with an ellipsis.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return none
	}
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// age says how long before now t was, in the largest one or two units
// ("45s", "3m12s", "5h", "2d"); a missing time is "-".
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return none
	}
	return humanDuration(now.Sub(t.AsTime()))
}

// humanDuration prints d like kubectl's ages: coarse, never negative.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		m := int(d.Minutes())
		if s := int(d.Seconds()) % 60; s != 0 {
			return fmt.Sprintf("%dm%ds", m, s)
		}
		return fmt.Sprintf("%dm", m)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// labelString prints labels as sorted k=v pairs joined by commas.
func labelString(l map[string]string) string {
	if len(l) == 0 {
		return none
	}
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// enumWord is an enum value as the tables show it (view.EnumWord: the -o
// json objects' "…Name" fields say the same), none for UNSPECIFIED.
func enumWord(e protoreflect.Enum) string {
	return cmp.Or(view.EnumWord(e.Descriptor().Values().ByNumber(e.Number())), none)
}

func nodePhase(p sluicev1.NodePhase) string { return enumWord(p) }

func rolloutPhase(p sluicev1.RolloutPhase) string { return enumWord(p) }
