//go:build containers

package containers

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/creds"
)

// secrets are the credentials and certificates of a suite run with
// SLUICE_TEST_SECURE=1 (`make e2e-containers-secure`): the NATS servers run
// deploy/nats-secure.conf (operator mode, TLS for clients and routes) as
// deploy/compose/secure.yaml runs them, each service connects as a user of
// its role, each agent as its own node's, the host's client as the admin
// and the nats CLI as the read-only user; a permission any of them is
// refused fails the test.
type secrets struct {
	setup *creds.Setup
	tls   creds.TLSFiles
}

// secureFromEnv makes a setup in a fresh directory when the suite runs
// secured, nil otherwise.
func secureFromEnv(t *testing.T) *secrets {
	t.Helper()
	if os.Getenv(natstest.EnvSecure) != "1" {
		return nil
	}
	dir := t.TempDir()
	setup, err := creds.Init(filepath.Join(dir, "creds"), creds.InitOptions{ResolverDir: "/data/jwt"})
	if err != nil {
		t.Fatalf("creds init: %v", err)
	}
	files, err := creds.TLS(setup.Dir, append(append([]string(nil), natsNames...), "localhost", "127.0.0.1"), 24*time.Hour)
	if err != nil {
		t.Fatalf("creds tls: %v", err)
	}
	return &secrets{setup: setup, tls: files}
}

// userFile is the credentials file of a user of role (and node).
func (s *secrets) userFile(t *testing.T, role, node string) string {
	t.Helper()
	file, err := s.setup.UserFile(role, node)
	if err != nil {
		t.Fatalf("creds issue %s %s: %v", role, node, err)
	}
	return file
}

// natsServer turns a NATS server's spec into the secured one.
func (s *secrets) natsServer(sp *spec) {
	root := filepath.Join("..", "..", "deploy")
	sp.cmd = []string{"-c", "/etc/nats/nats-secure.conf"}
	sp.files = append(sp.files,
		testcontainers.ContainerFile{HostFilePath: filepath.Join(root, "nats-secure.conf"), ContainerFilePath: "/etc/nats/nats-secure.conf", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: filepath.Join(s.setup.Dir, "server.conf"), ContainerFilePath: "/etc/nats/sluice-auth.conf", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: s.tls.CA, ContainerFilePath: "/etc/sluice/tls/ca.pem", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: s.tls.Cert, ContainerFilePath: "/etc/sluice/tls/server.pem", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: s.tls.Key, ContainerFilePath: "/etc/sluice/tls/server.key", FileMode: 0o644},
	)
}

// client gives a service's or agent's spec the credentials of role (and
// node) and the CA, where deploy/compose/secure.yaml mounts them.
func (s *secrets) client(t *testing.T, sp *spec, role, node string) {
	t.Helper()
	sp.env["SLUICE_NATS_CREDS"] = "/etc/sluice/user.creds"
	sp.env["SLUICE_NATS_TLS_CA"] = "/etc/sluice/ca.pem"
	sp.files = append(sp.files,
		testcontainers.ContainerFile{HostFilePath: s.userFile(t, role, node), ContainerFilePath: "/etc/sluice/user.creds", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: s.tls.CA, ContainerFilePath: "/etc/sluice/ca.pem", FileMode: 0o644},
	)
}

// hostOptions connect the host's client as the admin, over TLS.
func (s *secrets) hostOptions(t *testing.T) []nats.Option {
	return []nats.Option{nats.UserCredentials(s.userFile(t, creds.RoleAdmin, "")), nats.RootCAs(s.tls.CA)}
}

// natsCLIEnv is the nats CLI's environment: the read-only user, the CA.
func (s *secrets) natsCLIEnv(t *testing.T) []string {
	return []string{"NATS_CREDS=" + s.userFile(t, creds.RoleReadOnly, ""), "NATS_CA=" + s.tls.CA}
}

// refusals are the lines of every container's log that say the server
// refused a permission ("Permissions Violation", as the server words it
// and every sluice binary logs it).
func (c *cluster) refusals() []string {
	var out []string
	c.eachLog(func(role string, b []byte, err error) {
		if err != nil {
			c.t.Errorf("logs of %s: %v", role, err)
			return
		}
		for sc := bufio.NewScanner(strings.NewReader(string(b))); sc.Scan(); {
			if strings.Contains(sc.Text(), "Permissions Violation") {
				out = append(out, role+": "+sc.Text())
			}
		}
	})
	return out
}
