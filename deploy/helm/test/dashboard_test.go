package charttest

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Off by default: the chart's defaults render no dashboard.
func TestChart_DashboardOffByDefault(t *testing.T) {
	objs, _ := render(t, "")
	for _, k := range []string{"Deployment/sl-dashboard", "Service/sl-dashboard"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered with the defaults", k)
		}
	}
}

// Enabled with authentication and TLS: the dashboard runs `sluice
// dashboard` on the pod's address with the token from its Secret, connects
// as the readonly user (its controls disabled) and only that key of the
// services' Secret is mounted; a Service exposes it.
func TestChart_DashboardReadonlyWithToken(t *testing.T) {
	objs, _ := render(t, writeValues(t, `
nats:
  auth:
    enabled: true
    servicesSecret: sluice-nats-creds
  tls:
    caSecret: sluice-nats-ca
dashboard:
  enabled: true
  tokenSecret: sluice-dashboard
`))
	d := get[*appsv1.Deployment](t, objs, "Deployment/sl-dashboard")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	wantArgs := []string{"dashboard", "--addr=0.0.0.0:3100", "--token-file=/etc/sluice/dashboard/token", "--group-by=zone,rack"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args\n got %v\nwant %v", c.Args, wantArgs)
	}
	if c.Image != "sluice/sluice:dev" {
		t.Errorf("image %s, want the sluice binary's", c.Image)
	}
	env := envOf(c)
	if env["SLUICE_NATS_CREDS"] != "/etc/sluice/creds/readonly.creds" || env["SLUICE_NATS_TLS_CA"] != "/etc/sluice/tls/ca.pem" || env["SLUICE_NATS_URL"] == "" {
		t.Errorf("env %v: want the readonly user's credentials, the CA and the NATS URL", env)
	}
	secrets := map[string][]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			for _, it := range v.Secret.Items {
				secrets[v.Secret.SecretName] = append(secrets[v.Secret.SecretName], it.Key)
			}
		}
	}
	if !slices.Equal(secrets["sluice-nats-creds"], []string{"readonly.creds"}) || !slices.Equal(secrets["sluice-dashboard"], []string{"token"}) {
		t.Errorf("secrets mounted %v; want only readonly.creds of the services' Secret and the token", secrets)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("want a read-only root filesystem and no service account token")
	}
	svc := get[*corev1.Service](t, objs, "Service/sl-dashboard")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 3100 || svc.Spec.Selector["app.kubernetes.io/component"] != "dashboard" {
		t.Errorf("service %+v", svc.Spec)
	}
}

// allowedHosts become --allowed-host flags: the names, such as an
// Ingress's, the dashboard answers to besides the pod's address and
// localhost.
func TestChart_DashboardAllowedHosts(t *testing.T) {
	objs, _ := render(t, writeValues(t, `
dashboard:
  enabled: true
  tokenSecret: sluice-dashboard
  allowedHosts: [sluice.example.com, "localhost:8080"]
`))
	c := get[*appsv1.Deployment](t, objs, "Deployment/sl-dashboard").Spec.Template.Spec.Containers[0]
	want := []string{"dashboard", "--addr=0.0.0.0:3100", "--token-file=/etc/sluice/dashboard/token", "--group-by=zone,rack",
		"--allowed-host=sluice.example.com", "--allowed-host=localhost:8080"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args\n got %v\nwant %v", c.Args, want)
	}
}
