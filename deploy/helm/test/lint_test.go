package charttest

import (
	"os/exec"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// valuesFiles are the values the chart must lint and render with ("" is
// its defaults).
var valuesFiles = []string{"", "testdata/agent-netadmin.yaml", "testdata/agent-netlink.yaml", "testdata/services-scaled.yaml", "testdata/auth-tls.yaml", "testdata/git-cache-pvc.yaml"}

// TestChart_Lint runs helm's linter through the SDK, as `helm lint --strict`
// does: a warning fails. A helm binary, when one is on PATH, lints too;
// without one only that step is skipped, and says so.
func TestChart_Lint(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run("sdk "+name(f), func(t *testing.T) {
			vals := map[string]any{}
			if f != "" {
				var err error
				if vals, err = chartutil.ReadValuesFile(f); err != nil {
					t.Fatal(err)
				}
			}
			l := lint.AllWithKubeVersionAndSchemaValidation(chartDir, vals, namespace, kubeVersion, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m.Error())
				} else {
					t.Log(m.Error())
				}
			}
		})
	}
	for _, f := range valuesFiles {
		t.Run("helm binary "+name(f), func(t *testing.T) {
			helm, err := exec.LookPath("helm")
			if err != nil {
				t.Skip("no helm binary on PATH: `helm lint --strict` skipped; the SDK's lint and the rendering tests ran")
			}
			args := []string{"lint", "--strict", "--namespace", namespace, chartDir}
			if f != "" {
				args = append(args, "-f", f)
			}
			if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
				t.Errorf("helm %v: %v\n%s", args, err, out)
			}
		})
	}
}

func name(valuesFile string) string {
	if valuesFile == "" {
		return "defaults"
	}
	return valuesFile
}
