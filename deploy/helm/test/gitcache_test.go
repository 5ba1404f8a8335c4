package charttest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The configurator's git cache: none by default (the clones in memory, no
// --git-cache, no volume); enabled, a volume at /var/cache/sluice/git
// passed as --git-cache, an emptyDir of the size given or the chart's
// claim, writable by the pod's group.
func TestChart_ConfiguratorGitCache(t *testing.T) {
	const mount = "/var/cache/sluice/git"
	tests := []struct {
		name       string
		valuesFile string
		want       string // "", "emptyDir" or "pvc"
	}{
		{name: "defaults"},
		{name: "emptyDir", valuesFile: "testdata/git-cache-emptydir.yaml", want: "emptyDir"},
		{name: "pvc", valuesFile: "testdata/git-cache-pvc.yaml", want: "pvc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, _ := render(t, tt.valuesFile)
			d := get[*appsv1.Deployment](t, objs, "Deployment/sl-configurator")
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			hasArg := slices.Contains(c.Args, "--git-cache="+mount)
			hasMount := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "git-cache" && m.MountPath == mount && !m.ReadOnly })
			if tt.want == "" {
				if hasArg || hasMount || slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "git-cache" }) {
					t.Errorf("a git cache by default: args %v, mounts %v, volumes %v", c.Args, c.VolumeMounts, spec.Volumes)
				}
				if _, ok := objs["PersistentVolumeClaim/sl-configurator-git-cache"]; ok {
					t.Error("a claim by default")
				}
				return
			}
			if !hasArg || !hasMount {
				t.Errorf("args %v, mounts %v: want --git-cache=%s and the git-cache volume mounted there, writable", c.Args, c.VolumeMounts, mount)
			}
			if sc := spec.SecurityContext; sc.FSGroup == nil || *sc.FSGroup != 65532 {
				t.Errorf("fsGroup %v, want 65532: the volume must be writable by the configurator", sc.FSGroup)
			}
			for _, other := range []string{"rollout-coordinator", "reaper"} {
				oc := get[*appsv1.Deployment](t, objs, "Deployment/sl-"+other).Spec.Template.Spec.Containers[0]
				if strings.Contains(strings.Join(oc.Args, " "), "--git-cache") || len(oc.VolumeMounts) > 0 {
					t.Errorf("%s got the configurator's git cache: args %v, mounts %v", other, oc.Args, oc.VolumeMounts)
				}
			}
			v := volume(t, spec, "git-cache")
			switch tt.want {
			case "emptyDir":
				if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "2Gi" {
					t.Errorf("git-cache volume %+v, want an emptyDir of 2Gi", v.VolumeSource)
				}
				if d.Spec.Strategy.Type != "" {
					t.Errorf("strategy %q, want the default", d.Spec.Strategy.Type)
				}
			case "pvc":
				if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "sl-configurator-git-cache" {
					t.Errorf("git-cache volume %+v, want the claim sl-configurator-git-cache", v.VolumeSource)
				}
				pvc := get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim/sl-configurator-git-cache")
				if s := pvc.Spec.Resources.Requests.Storage().String(); s != "5Gi" ||
					pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" ||
					!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
					t.Errorf("claim %+v, want 5Gi of class fast, ReadWriteOnce", pvc.Spec)
				}
				if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("strategy %q, want Recreate: a ReadWriteOnce claim", d.Spec.Strategy.Type)
				}
			}
		})
	}
}
