package chaos

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Every mutation of `make mutants` (mutants/*.patch) still applies to the
// tree: a change to the code a mutation edits must carry the mutation
// along, or the mutation score silently loses it (mutation 12 once did:
// the reaper's revision collection was reshaped and its patch no longer
// applied, which only a `make mutants` run would have said).
func TestMutants_EveryPatchApplies(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: the patches cannot be checked")
	}
	patches, err := filepath.Glob("mutants/*.patch")
	if err != nil || len(patches) < 12 {
		t.Fatalf("found %d mutation patches (%v), want at least 12", len(patches), err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patches {
		abs, _ := filepath.Abs(p)
		cmd := exec.Command(git, "apply", "--check", "--unsafe-paths", "--directory=.", abs)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not apply to the tree: %v\n%s", filepath.Base(p), err, out)
		}
	}
}
