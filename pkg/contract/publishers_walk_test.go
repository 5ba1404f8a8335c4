package contract

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// eventTypeShape is how every event type is spelt: CamelCase words, no
// spaces (a reason has spaces).
var eventTypeShape = regexp.MustCompile(`^[A-Z][a-z]+(?:[A-Z][a-z]*)+$`)

// emittedTypes walks every non-test Go file of the module and returns the
// event types the code publishes, each with where it found it. It finds a
// type where the code spells one:
//   - a constant named Event… or TypeValue… (services name their types so);
//   - a Type: field in a composite literal (a sluicev1.Event);
//   - an assignment to a variable whose name holds "typ" or to a .Type field
//     (evType, typ := …; ev.Type = …);
//   - an argument of a call whose name holds "event" or "emit"
//     (s.nodeEvent(n, "NodeFailed", why), emit("RegistrySynced", reason));
//   - "Rollout"+phaseWord(phase): the coordinator's finish types, one per
//     terminal phase.
//
// A type built from parts any other way fails the walk: spell it whole.
func emittedTypes(t *testing.T) map[string]string {
	t.Helper()
	root := moduleRoot(t)
	found := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		add := func(e ast.Expr) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !eventTypeShape.MatchString(s) {
				return
			}
			if _, seen := found[s]; !seen {
				found[s] = rel + ":" + strconv.Itoa(fset.Position(lit.Pos()).Line)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) && (strings.HasPrefix(name.Name, "Event") || strings.HasPrefix(name.Name, "TypeValue")) {
						add(n.Values[i])
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Type" {
					add(n.Value)
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if i >= len(n.Rhs) {
						break
					}
					switch l := lhs.(type) {
					case *ast.Ident:
						if strings.Contains(strings.ToLower(l.Name), "typ") {
							add(n.Rhs[i])
						}
					case *ast.SelectorExpr:
						if l.Sel.Name == "Type" {
							add(n.Rhs[i])
						}
					}
				}
			case *ast.CallExpr:
				name := ""
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if l := strings.ToLower(name); !strings.Contains(l, "event") && !strings.Contains(l, "emit") {
					return true
				}
				for _, a := range n.Args {
					add(a)
					b, ok := a.(*ast.BinaryExpr)
					if !ok || b.Op != token.ADD {
						continue
					}
					lit, ok := b.X.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					prefix, _ := strconv.Unquote(lit.Value)
					if !eventTypeShape.MatchString(prefix+"X") || strings.Contains(prefix, " ") {
						continue // a reason being built
					}
					call, ok := b.Y.(*ast.CallExpr)
					if fn, isIdent := callName(call); !ok || !isIdent || fn != "phaseWord" || prefix != "Rollout" {
						t.Errorf("%s:%d: an event type built from parts (%q + …): spell each type whole, or teach this walk its values",
							rel, fset.Position(b.Pos()).Line, prefix)
						continue
					}
					for _, p := range terminalPhases() {
						if _, seen := found[prefix+p]; !seen {
							found[prefix+p] = rel + ":" + strconv.Itoa(fset.Position(b.Pos()).Line)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatalf("walk the module: %v", err)
	}
	return found
}

func callName(c *ast.CallExpr) (string, bool) {
	if c == nil {
		return "", false
	}
	id, ok := c.Fun.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// terminalPhases are the words of the terminal rollout phases, as the
// coordinator's phaseWord spells them (ROLLOUT_PHASE_ROLLED_BACK: RolledBack).
func terminalPhases() []string {
	var out []string
	for v := range sluicev1.RolloutPhase_name {
		p := sluicev1.RolloutPhase(v)
		if !Terminal(p) {
			continue
		}
		parts := strings.Split(strings.ToLower(strings.TrimPrefix(p.String(), "ROLLOUT_PHASE_")), "_")
		for i, x := range parts {
			parts[i] = strings.ToUpper(x[:1]) + x[1:]
		}
		out = append(out, strings.Join(parts, ""))
	}
	slices.Sort(out)
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/sluicehq/sluice\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of github.com/sluicehq/sluice above the test's directory")
		}
		dir = parent
	}
}

// TestEventRules_CoverEveryTypeTheCodePublishes: every event type the code
// publishes has a rule in the table, and every type in the table is one
// the code publishes (a row left behind by a removed type fails too, which
// also keeps the walk honest: a type it cannot see fails here).
func TestEventRules_CoverEveryTypeTheCodePublishes(t *testing.T) {
	emitted := emittedTypes(t)
	if len(emitted) < 50 {
		t.Fatalf("the walk found %d event types; the code publishes more than 50: the walk is broken", len(emitted))
	}
	inTable := map[string]bool{}
	for _, r := range EventRules() {
		if !slices.Contains(EventKinds, r.Kind) {
			t.Errorf("rule of %s: kind %q is not one of EventKinds", r.Role, r.Kind)
		}
		if !slices.Contains(slices.Collect(maps.Values(componentRoles)), r.Role) {
			t.Errorf("rule of role %q: no component connects as it", r.Role)
		}
		for _, typ := range r.Types {
			inTable[typ] = true
			if _, ok := emitted[typ]; !ok {
				t.Errorf("the table lets %s publish %s on %s subjects, but no code publishes %s: remove it from the table", r.Role, typ, r.Kind, typ)
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(emitted)) {
		if !inTable[typ] {
			t.Errorf("%s publishes event type %s, which has no rule in pkg/contract/publishers.go: add it to the row of the role and kind that publish it (readers show it as unreadable until then)", emitted[typ], typ)
		}
	}
}

// TestEventRules_DocsListTheTable: docs/security.md ("Who may say what")
// shows the table as it is, with each rule's subjects.
func TestEventRules_DocsListTheTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range EventRules() {
		row := fmt.Sprintf("| `%s` | `%s` | `%s` | `%s` |", r.Role, r.Kind, EventSubjectOf(r.Role, r.Kind, "<id>"), strings.Join(r.Types, "`, `"))
		if !strings.Contains(string(b), row+"\n") {
			t.Errorf("docs/security.md does not list the rule of %s on %s as it is; want the row\n%s", r.Role, r.Kind, row)
		}
	}
}
