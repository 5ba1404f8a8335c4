package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every flag docs/operations.md's table of operator commands shows is a
// flag of that command (the table once missed --reason of resume; a
// renamed flag must not stay documented).
func TestOperationsDoc_CommandTableNamesRealFlags(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	root := (&app{}).rootCommand()
	cmdCell := regexp.MustCompile("`(sluice [^`]*)`")
	flag := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	_, table, _ := strings.Cut(string(b), "## Operator commands")
	table, _, _ = strings.Cut(table, "\n\n#")
	strategy := map[string]bool{}
	var sf strategyFlags
	fs := pflag.NewFlagSet("strategy", pflag.ContinueOnError)
	sf.register(fs)
	fs.VisitAll(func(f *pflag.Flag) { strategy[f.Name] = true })
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `sluice ") {
			continue
		}
		first := strings.SplitN(strings.ReplaceAll(line, `\|`, "/"), "|", 3)[1]
		for _, m := range cmdCell.FindAllStringSubmatch(first, -1) {
			var path []string
			for _, w := range strings.Fields(m[1])[1:] {
				if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
					break
				}
				path = append(path, w)
			}
			c, rest, err := root.Find(path)
			if err != nil || len(rest) > 0 && c.HasSubCommands() {
				t.Errorf("operations.md names %q: no such command (%v)", m[1], err)
				continue
			}
			rows++
			for _, f := range flag.FindAllStringSubmatch(m[1], -1) {
				if c.Flags().Lookup(f[1]) == nil && c.InheritedFlags().Lookup(f[1]) == nil {
					t.Errorf("operations.md: %q shows --%s, which %q does not have", m[1], f[1], c.CommandPath())
				}
			}
			// And the row names every flag of the command's own.
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if f.Hidden || f.Name == "help" || strategy[f.Name] && strings.Contains(line, "strategy flags") || strings.Contains(line, "--"+f.Name) || strings.Contains(line, "-"+f.Shorthand+" ") && f.Shorthand != "" {
					return
				}
				t.Errorf("operations.md: the row of %q does not name its flag --%s", c.CommandPath(), f.Name)
			})
		}
	}
	if rows < 20 {
		t.Errorf("read %d commands from operations.md's table, want the whole table", rows)
	}
}
