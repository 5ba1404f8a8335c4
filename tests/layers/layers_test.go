// Package layers checks the import rules the one module relies on, now that
// no module wall enforces them: cmd → services → internal → pkg, no service
// imports another, pkg imports none of them (docs/architecture.md); the coordinator's
// decider imports only what its doc.go says (TestDeciderImports); and no
// product file holds more than maxLines lines (TestFileSize).
package layers

import (
	"bytes"
	"go/build"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice/"

// area is the layer a package path (relative to the module) belongs to:
// "cmd", "services/<name>", "internal", "pkg", "proto", "tests" or
// "internal/testkit".
func area(rel string) string {
	parts := strings.Split(rel, "/")
	if rel == testkit || strings.HasPrefix(rel, testkit+"/") {
		return testkit
	}
	if parts[0] == "services" && len(parts) > 1 {
		return "services/" + parts[1]
	}
	return parts[0]
}

// testkit is the test-only tree of helpers (a real NATS, Redis, Prometheus,
// git, FRR): only tests, the suites and the kit itself import it.
const testkit = "internal/testkit"

// allowed says whether code in area from may import area to; test says the
// import is from a _test.go file.
func allowed(from, to string, test bool) bool {
	switch {
	case to == testkit:
		return test || from == testkit || from == "tests"
	case from == testkit:
		return to != "cmd" // helpers may start what they stand up (frrtest runs the agent's applier)
	case from == "proto":
		return to == "proto" // generated code imports nothing of ours
	case from == to, to == "pkg", to == "proto":
		return true
	case from == "pkg":
		return false // pkg is the ground floor: only pkg and proto
	case to == "internal":
		return from != "deploy" // the module's own code above pkg (netnsutil), for any of its layers
	case from == "internal":
		return false // internal imports only pkg, proto and itself
	case strings.HasPrefix(from, "services/"):
		return false // a service imports pkg and proto, never another service or cmd
	case from == "cmd":
		return strings.HasPrefix(to, "services/") // sluice dev runs the services
	case from == "tests":
		return true // the suites drive every layer from outside
	case from == "deploy":
		return to == "pkg"
	}
	return false
}

func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		from, to string
		test     bool
		ok       bool
	}{
		{"services/agent", "pkg", false, true},
		{"services/agent", "services/agent", false, true},
		{"services/agent", "services/reaper", false, false},
		{"services/agent", "cmd", false, false},
		{"pkg", "services/agent", false, false},
		{"pkg", "cmd", false, false},
		{"pkg", "proto", false, true},
		{"cmd", "services/configurator", false, true},
		{"proto", "pkg", false, false},
		{"tests", "services/agent", false, true},
		{"pkg", testkit, true, true},
		{"pkg", testkit, false, false},
		{"services/agent", testkit, false, false},
		{"cmd", testkit, false, false},
		{"tests", testkit, false, true},
		{testkit, "services/agent", false, true},
		{testkit, "cmd", false, false},
		{"services/agent", "internal", false, true},
		{"cmd", "internal", false, true},
		{testkit, "internal", false, true},
		{"internal", "pkg", false, true},
		{"internal", "services/agent", false, false},
		{"pkg", "internal", false, false},
		{"internal", testkit, false, false},
	} {
		if got := allowed(c.from, c.to, c.test); got != c.ok {
			t.Errorf("allowed(%s, %s, test %v) = %v, want %v", c.from, c.to, c.test, got, c.ok)
		}
	}
}

// notCode says whether the walk skips the folder rel (named name): hidden
// folders, test data, built binaries and the chart's test values.
func notCode(rel, name string) bool {
	return rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || rel == "deploy/helm/test")
}

func TestLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := build.Default
	ctx.BuildTags = []string{"overload", "containers", "linux"}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if notCode(filepath.ToSlash(rel), d.Name()) {
			return filepath.SkipDir
		}
		pkg, err := ctx.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		from := area(filepath.ToSlash(rel))
		checked++
		for i, imports := range [][]string{pkg.Imports, pkg.TestImports, pkg.XTestImports} {
			for _, imp := range imports {
				if !strings.HasPrefix(imp, module) {
					continue
				}
				to := area(strings.TrimPrefix(imp, module))
				if !allowed(from, to, i > 0) {
					t.Errorf("%s (%s) imports %s (%s): the layers are cmd → services → internal → pkg, and no service imports another", rel, from, imp, to)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 40 {
		t.Fatalf("checked only %d packages: is the walk rooted at the module?", checked)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
}

// maxLines is the most lines a product file may hold (issue 46): each file
// is a room named for what it holds, and one past this size holds more than
// one thing, which a newcomer then greps for. Tests, generated code and the
// test-only trees (tests/, internal/testkit/) are not rooms.
const maxLines = 600

// generated is the line Go's convention puts in a generated file.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// oversized lists the product files under root (paths relative to it) that
// hold more than maxLines lines, each with its count.
func oversized(root string) (over map[string]int, checked int, err error) {
	over = map[string]int{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if notCode(rel, d.Name()) || rel == "tests" || rel == testkit {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated.Match(b) {
			return nil
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			over[rel] = n
		}
		return nil
	})
	return over, checked, err
}

func TestFileSize(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	over, checked, err := oversized(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range slices.Sorted(maps.Keys(over)) {
		t.Errorf("%s has %d lines, over %d: split it by meaning into files named for what they hold", rel, over[rel], maxLines)
	}
	if checked < 200 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}

// decider is the coordinator's decision package, and deciderImports all it
// may import beside the standard library: what its doc comment (doc.go,
// "Reach") says. A new import is a new reach for a pure function; add it
// here and to doc.go only when the decision needs it and it does no I/O.
const decider = "services/rollout-coordinator/internal/rollout"

var deciderImports = []string{
	"google.golang.org/protobuf/proto",
	"google.golang.org/protobuf/types/known/durationpb",
	"google.golang.org/protobuf/types/known/timestamppb",
	module + "proto/sluicev1",
	module + "pkg/contract",
	module + "pkg/render",
}

func TestDeciderImports(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("../..", decider))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, reach, ok := strings.Cut(string(doc), "Reach:")
	if !ok {
		t.Fatalf("%s/doc.go has no \"Reach:\" rule naming its imports", decider)
	}
	for _, want := range deciderImports {
		if name := want[strings.LastIndex(want, "/")+1:]; !strings.Contains(reach, name) {
			t.Errorf("%s/doc.go does not name %s, which the rule allows: keep the two lists the same", decider, name)
		}
	}
	for _, imp := range pkg.Imports {
		if stdlib(imp) || slices.Contains(deciderImports, imp) {
			continue
		}
		t.Errorf("%s imports %s: the decider imports only the standard library and %v (its doc.go); a decision takes what it needs in its events", decider, imp, deciderImports)
	}
	if len(pkg.Imports) < len(deciderImports) {
		t.Fatalf("%s: only %d imports found: is the walk rooted at the module?", decider, len(pkg.Imports))
	}
}

// stdlib says whether imp is a standard-library package (no dot in its
// first element).
func stdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}
