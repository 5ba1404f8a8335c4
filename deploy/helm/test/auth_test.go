package charttest

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The NATS security environment: every variable natsauth reads besides the
// URL.
var natsSecurityEnv = []string{
	"SLUICE_NATS_CREDS", "SLUICE_NATS_NKEY", "SLUICE_NATS_USER", "SLUICE_NATS_PASSWORD_FILE",
	"SLUICE_NATS_TLS_CA", "SLUICE_NATS_TLS_CERT", "SLUICE_NATS_TLS_KEY", "SLUICE_NATS_TLS_SERVER",
}

// mountedFiles is every file a container reads from a Secret or from a file
// on the node, by its path in the container, with where it comes from:
// "secret NAME/KEY", "secret NAME/*" (the whole Secret) or "hostPath PATH".
// A mount that is not read-only is reported as a test failure.
func mountedFiles(t *testing.T, key string, spec corev1.PodSpec, c corev1.Container) map[string]string {
	t.Helper()
	files := map[string]string{}
	secret := func(mountPath, name string, items []corev1.KeyToPath) {
		if items == nil {
			files[mountPath+"/*"] = "secret " + name + "/*"
		}
		for _, it := range items {
			files[mountPath+"/"+it.Path] = "secret " + name + "/" + it.Key
		}
	}
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			before := len(files)
			switch {
			case v.Secret != nil:
				secret(vm.MountPath, v.Secret.SecretName, v.Secret.Items)
			case v.Projected != nil:
				for _, src := range v.Projected.Sources {
					if src.Secret != nil {
						secret(vm.MountPath, src.Secret.Name, src.Secret.Items)
					}
				}
			case v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathFile:
				files[vm.MountPath] = "hostPath " + v.HostPath.Path
			}
			if len(files) > before && !vm.ReadOnly {
				t.Errorf("%s: container %s mounts %s (volume %s) writable", key, c.Name, vm.MountPath, vm.Name)
			}
		}
	}
	return files
}

// securityEnv is c's NATS security environment.
func securityEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for name, v := range envOf(c) {
		if slices.Contains(natsSecurityEnv, name) {
			env[name] = v
		}
	}
	return env
}

// writeValues writes values to a file for install.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestChart_AuthAndTLS_EachPodMountsOnlyItsOwnCredentials(t *testing.T) {
	objs, rel := render(t, "testdata/auth-tls.yaml")
	tls := map[string]string{
		"/etc/sluice/tls/ca.pem":     "secret sluice-nats-ca/ca.crt",
		"/etc/sluice/tls/client.pem": "secret sluice-nats-client/tls.crt",
		"/etc/sluice/tls/client.key": "secret sluice-nats-client/tls.key",
	}
	tests := []struct {
		key       string
		wantCreds string // SLUICE_NATS_CREDS
		wantFrom  string // where that file comes from
	}{
		{"Deployment/sl-configurator", "/etc/sluice/creds/configurator.creds", "secret sluice-nats-creds/configurator.creds"},
		{"Deployment/sl-rollout-coordinator", "/etc/sluice/creds/coordinator.creds", "secret sluice-nats-creds/coordinator.creds"},
		{"Deployment/sl-reaper", "/etc/sluice/creds/reaper.creds", "secret sluice-nats-creds/reaper.creds"},
		{"DaemonSet/sl-agent", "/etc/sluice/creds/node.creds", "hostPath /etc/sluice/node/agent.creds"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			spec, ok := podSpec(objs[tt.key])
			if !ok {
				t.Fatalf("no %s among %v", tt.key, objs.keys())
			}
			c := spec.Containers[0]

			wantEnv := map[string]string{
				"SLUICE_NATS_CREDS":      tt.wantCreds,
				"SLUICE_NATS_TLS_CA":     "/etc/sluice/tls/ca.pem",
				"SLUICE_NATS_TLS_CERT":   "/etc/sluice/tls/client.pem",
				"SLUICE_NATS_TLS_KEY":    "/etc/sluice/tls/client.key",
				"SLUICE_NATS_TLS_SERVER": "nats.example.com",
			}
			if got := securityEnv(c); !maps.Equal(got, wantEnv) {
				t.Errorf("NATS security env\n got %v\nwant %v", got, wantEnv)
			}
			// Exactly its own credentials and the TLS files: no other
			// role's key, no whole Secret, nothing else.
			wantFiles := maps.Clone(tls)
			wantFiles[tt.wantCreds] = tt.wantFrom
			if got := mountedFiles(t, tt.key, spec, c); !maps.Equal(got, wantFiles) {
				t.Errorf("files from Secrets and the node\n got %v\nwant %v", got, wantFiles)
			}
			for _, ic := range spec.InitContainers {
				if files := mountedFiles(t, tt.key, spec, ic); len(files) != 0 || len(securityEnv(ic)) != 0 {
					t.Errorf("init container %s gets credentials: %v, env %v", ic.Name, files, securityEnv(ic))
				}
			}

			// The sluice user (65532) reads the Secrets' files through the
			// pod's group, nobody else.
			if sc := spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != 65532 {
				t.Errorf("pod security context %+v, want fsGroup 65532", sc)
			}
			for _, v := range spec.Volumes {
				var mode *int32
				switch {
				case v.Secret != nil:
					mode = v.Secret.DefaultMode
				case v.Projected != nil:
					mode = v.Projected.DefaultMode
				default:
					continue
				}
				if mode == nil || *mode != 0o440 {
					t.Errorf("volume %s: defaultMode %v, want 0440", v.Name, mode)
				}
			}
		})
	}

	// The agent's user is its node's, never a Secret: a DaemonSet would
	// mount the same one on every node.
	agent := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	if hp := volume(t, agent, "nats-creds").HostPath; hp == nil || hp.Type == nil || *hp.Type != corev1.HostPathFile {
		t.Errorf("agent credentials volume %+v, want a hostPath of type File", hp)
	}
	for _, v := range agent.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "sluice-nats-creds" {
			t.Errorf("the agent mounts the services' Secret (volume %s)", v.Name)
		}
	}

	for _, want := range []string{
		"configurator: Secret sluice-nats-creds, key configurator.creds",
		"rollout-coordinator: Secret sluice-nats-creds, key coordinator.creds (one user for its 3 replicas)",
		"reaper: Secret sluice-nats-creds, key reaper.creds",
		"the file /etc/sluice/node/agent.creds on each",
		"sluice creds issue node --node <Kubernetes node name> --dir DIR",
		"sluice creds revoke NODE --dir DIR --server URL",
		"CA: Secret sluice-nats-ca, key ca.crt",
		"export SLUICE_NATS_CREDS=DIR/users/admin.creds",
		"export SLUICE_NATS_TLS_SERVER=nats.example.com\n",
	} {
		if !strings.Contains(rel.Info.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, rel.Info.Notes)
		}
	}
}

func TestChart_AuthDisabled_RendersNoCredentials(t *testing.T) {
	tests := []struct{ name, valuesFile string }{
		{"defaults", ""},
		{"agent-netadmin", "testdata/agent-netadmin.yaml"},
		{"services-scaled", "testdata/services-scaled.yaml"},
		// The names are there, the switch is off: nothing is used.
		{"names set, disabled", writeValues(t, "nats:\n  auth:\n    enabled: false\n    servicesSecret: sluice-nats-creds\nagent:\n  credsHostPath: /etc/sluice/node/agent.creds\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, rel := render(t, tt.valuesFile)
			for _, key := range objs.keys() {
				spec, ok := podSpec(objs[key])
				if !ok {
					continue
				}
				if sc := spec.SecurityContext; sc != nil && sc.FSGroup != nil {
					t.Errorf("%s: fsGroup %d without auth or TLS", key, *sc.FSGroup)
				}
				for _, c := range append(spec.InitContainers, spec.Containers...) {
					if env := securityEnv(c); len(env) != 0 {
						t.Errorf("%s: container %s has NATS security env %v", key, c.Name, env)
					}
					if files := mountedFiles(t, key, spec, c); len(files) != 0 {
						t.Errorf("%s: container %s mounts %v", key, c.Name, files)
					}
				}
			}
			if strings.Contains(rel.Manifest, ".creds") || strings.Contains(rel.Manifest, "nats-tls") {
				t.Errorf("credentials or TLS in the manifest:\n%s", rel.Manifest)
			}
			if strings.Contains(rel.Info.Notes, "credentials") || strings.Contains(rel.Info.Notes, "TLS") {
				t.Errorf("NOTES speak of credentials or TLS:\n%s", rel.Info.Notes)
			}
		})
	}
}

func TestChart_TLSWithoutAuth_EveryPodTrustsTheCA(t *testing.T) {
	objs, rel := render(t, writeValues(t, "nats:\n  tls:\n    caSecret: nats-ca\n"))
	for _, key := range objs.keys() {
		spec, ok := podSpec(objs[key])
		if !ok {
			continue
		}
		c := spec.Containers[0]
		if got, want := securityEnv(c), map[string]string{"SLUICE_NATS_TLS_CA": "/etc/sluice/tls/ca.pem"}; !maps.Equal(got, want) {
			t.Errorf("%s: NATS security env %v, want %v", key, got, want)
		}
		if got, want := mountedFiles(t, key, spec, c), map[string]string{"/etc/sluice/tls/ca.pem": "secret nats-ca/ca.pem"}; !maps.Equal(got, want) {
			t.Errorf("%s: mounted files %v, want %v", key, got, want)
		}
	}
	if strings.Contains(rel.Info.Notes, "credentials") {
		t.Errorf("NOTES speak of credentials without auth:\n%s", rel.Info.Notes)
	}
}

// The control plane may run elsewhere: an agents-only release needs no
// services' Secret.
func TestChart_AuthWithAgentsOnly_NeedsNoServicesSecret(t *testing.T) {
	objs, rel := render(t, writeValues(t, "nats:\n  auth:\n    enabled: true\n"+
		"configurator:\n  enabled: false\nrolloutCoordinator:\n  enabled: false\nreaper:\n  enabled: false\n"))
	spec := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	c := spec.Containers[0]
	if got, want := mountedFiles(t, "DaemonSet/sl-agent", spec, c), map[string]string{"/etc/sluice/creds/node.creds": "hostPath /etc/sluice/agent.creds"}; !maps.Equal(got, want) {
		t.Errorf("agent mounts %v, want %v (agent.credsHostPath's default)", got, want)
	}
	if sc := spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		t.Errorf("fsGroup %d: no Secret is mounted", *sc.FSGroup)
	}
	if strings.Contains(rel.Info.Notes, "Secret") {
		t.Errorf("NOTES name a Secret although no service runs:\n%s", rel.Info.Notes)
	}
}

// Every file in testdata/inconsistent passes values.schema.json but holds
// values that contradict each other; the chart's templates refuse it with
// a message that says what to do. Its first line is the message wanted
// ("# want: …").
func TestChart_TemplatesRefuseInconsistentValues(t *testing.T) {
	eachRefused(t, "testdata/inconsistent", "the templates", func(t *testing.T, err error, want string) {
		if strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
			t.Errorf("refused by the schema, want the templates' own message %q: %v", want, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q", err, want)
		}
	})
}
