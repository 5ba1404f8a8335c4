package dev

// The embedded NATS server(s), and connecting to them as each role.

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// startNATS starts the embedded server, or the cluster.
func (s *System) startNATS() error {
	dirs := s.opts.storeDirs()
	if len(dirs) == 1 {
		if err := checkListen(s.opts.Listen); err != nil {
			return err
		}
		trust, err := s.trust()
		if err != nil {
			return err
		}
		srv, err := embedded.Start(embedded.Options{Listen: s.opts.Listen, StoreDir: dirs[0], Trust: trust,
			Log: s.log.With().Str(logging.FieldComponent, "nats-server").Logger()})
		s.srv = srv
		return err
	}
	host, portStr, err := net.SplitHostPort(s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", s.opts.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("listen address %q: port: %w", s.opts.Listen, err)
	}
	ports := make([]int, len(dirs))
	for i := range ports {
		ports[i] = -1
		if port > 0 {
			ports[i] = port + i
			if err := checkListen(net.JoinHostPort(host, strconv.Itoa(port+i))); err != nil {
				return err
			}
		}
	}
	co := embedded.ClusterOptions{Name: "sluice-dev", Host: host, Ports: ports, StoreDirs: dirs}
	if co.Trust, err = s.trust(); err != nil {
		return err
	}
	s.cluster, err = embedded.StartCluster(co)
	return err
}

// roleOf is the credentials role each of dev's own connections uses with
// --secure: the services their own, the set-up connection the coordinator's
// (it creates every bucket, the lease's included), the rest the admin's.
var roleOf = map[string]string{
	"setup": creds.RoleCoordinator, configurator.Component: creds.RoleConfigurator,
	coordinator.Component: creds.RoleCoordinator, reaper.Component: creds.RoleReaper,
}

// connect opens a connection named for its user, closed by Stop; with
// --secure, with the credentials of its role (roleOf, else admin).
func (s *System) connect(name string) (*nats.Conn, error) {
	return s.connectAs(name, cmp.Or(roleOf[name], creds.RoleAdmin), "")
}

// connectAs opens a connection named name with the credentials of role
// (and node, for a node) when --secure, closed by Stop.
func (s *System) connectAs(name, role, node string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("sluice-dev-" + name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.log.Error().Err(err).Str("connection", name).Str("role", role).Msg("NATS reported an error")
		}),
	}
	if node != "" {
		opts = append(opts, nats.CustomInboxPrefix(creds.NodeInboxPrefix(node)))
	}
	if s.creds != nil {
		file, err := s.credsFile(role, node)
		if err != nil {
			return nil, fmt.Errorf("credentials for %s: %w", name, err)
		}
		opts = append(opts, nats.UserCredentials(file))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

// AdminCreds is the admin user's credentials file with --secure: the
// CLI's (SLUICE_NATS_CREDS).
func (s *System) AdminCreds() string {
	if s.creds == nil {
		return ""
	}
	file, err := s.credsFile(creds.RoleAdmin, "")
	if err != nil {
		return ""
	}
	return file
}

// Creds is the credentials setup with --secure, else nil.
func (s *System) Creds() *creds.Setup { return s.creds }

// loadCreds loads the credentials setup of a --secure data directory,
// making it on the first secure start.
func (s *System) loadCreds() error {
	if !s.opts.Secure {
		return nil
	}
	dir := s.opts.CredsDir()
	var err error
	if _, serr := os.Stat(filepath.Join(dir, "operator.nk")); serr == nil {
		s.creds, err = creds.Load(dir)
	} else {
		s.creds, err = creds.Init(dir, creds.InitOptions{ResolverDir: filepath.Join(s.opts.storeDirs()[0], "jwt")})
	}
	if err != nil {
		return fmt.Errorf("--secure: credentials in %s: %w", dir, err)
	}
	return nil
}

// credsFile is the credentials file of a user of role (and node) issued
// from the setup, issuing one the first time.
func (s *System) credsFile(role, node string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds.UserFile(role, node)
}

// trust is what the embedded servers trust with --secure, nil without.
func (s *System) trust() (*embedded.Trust, error) {
	if s.creds == nil {
		return nil, nil
	}
	op, sys, accounts, err := s.creds.Trust()
	if err != nil {
		return nil, err
	}
	return &embedded.Trust{Operator: op, SystemAccount: sys, Accounts: accounts}, nil
}
