package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Issue 38, item 6: a crafted intent name (an OSC sequence that retitles
// the terminal, a CSI that clears it) was printed raw in the error. What
// the CLI prints about it is visible text naming the field, and a selector
// past the label limits is refused naming the limit and the size.
func TestApply_ControlCharactersAndHugeLabels_RefusedAndEscaped(t *testing.T) {
	s := startSystem(t, 0)
	tests := []struct {
		name, file string
		wantErr    []string
	}{
		{name: "an escape sequence in the name",
			file:    "kind: RoutingTable\nname: \"evil\\e]0;pwned\\a\\e[2J\"\nspec: {tableId: 100}\n",
			wantErr: []string{`routingtable/"evil\x1b]0;pwned\a\x1b[2J": name: the name "evil\x1b]0;pwned\a\x1b[2J" holds the control character U+001B at byte 4`}},
		{name: "a 900 KB label value",
			file:    "kind: RoutingTable\nname: big\nspec: {tableId: 100, nodeSelector: {matchLabels: {zone: " + strings.Repeat("a", 900_000) + "}}}\n",
			wantErr: []string{"routingtable/big: spec.nodeSelector.matchLabels.zone: label zone has a value of 900,000 characters, over the limit of 63"}},
		{name: "a selector of 10,000 labels",
			file:    "kind: RoutingTable\nname: many\nspec: {tableId: 100, nodeSelector: {matchLabels: {" + manyLabelsYAML(10_000) + "}}}\n",
			wantErr: []string{"routingtable/many: spec.nodeSelector.matchLabels: 10,000 labels, over the limit of 64 a node selector may require"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "x.yaml", tt.file))
			if code != 1 || stdout != "" {
				t.Fatalf("exit code %d, stdout %q, stderr %.500q; want 1 and nothing on stdout", code, stdout, stderr)
			}
			if !contract.Printable(strings.ReplaceAll(stderr, "\n", " ")) || len(stderr) > 2000 {
				t.Errorf("stderr is %d bytes, or holds a control character: %.2000q", len(stderr), stderr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %.1000q\nwant it to contain %q", stderr, w)
				}
			}
		})
	}
	// Any error the CLI prints passes through the same escaping.
	code, _, stderr := sluice(t, s.URL(), "registry", "remove", "evil\x1b]0;pwned\a")
	if code == 0 || strings.ContainsAny(stderr, "\x1b\a") || !strings.Contains(stderr, `evil\x1b]0;pwned\a`) {
		t.Errorf("registry remove of a crafted name: exit code %d, stderr %q; want an error showing the name escaped", code, stderr)
	}
}

func manyLabelsYAML(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("l")
		b.WriteString(fmt.Sprintf("%05d", i))
		b.WriteString(": v")
	}
	return b.String()
}
