package verify_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/verify"
)

// docs/intents.md ("Fleet rules") lists every rule with its severity, and
// no rule the verifier does not have: the ids are a contract operators
// grep for.
func TestFleetRulesDoc_ListsEveryRuleAndNoOther(t *testing.T) {
	b, err := os.ReadFile("../../docs/intents.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Fleet rules\n")
	if !ok {
		t.Fatal(`docs/intents.md has no "## Fleet rules" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| (error|warning) \\|")
	var doc, code []string
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		doc = append(doc, m[1]+" "+m[2])
	}
	for _, r := range verify.Rules {
		code = append(code, r.ID+" "+verify.SeverityWord(r.Severity))
	}
	if !slices.Equal(doc, code) {
		t.Errorf("docs/intents.md lists the rules\n  %s\nthe code has\n  %s", strings.Join(doc, "\n  "), strings.Join(code, "\n  "))
	}
}
