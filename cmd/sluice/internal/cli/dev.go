package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

func (a *app) devCommand() *cobra.Command {
	opts := dev.Options{}
	var noExamples bool
	var replicas int
	var leaderLease, nodeLease time.Duration
	var redisURL, watchDir string
	var git devGit
	var deleteAfter time.Duration
	var df dashboardFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of sluice in this process, on an embedded NATS server, with simulated agents",
		Long: `Dev runs an embedded nats-server (file storage under DATA/nats), the
configurator, the rollout-coordinator, the reaper and N agents named node-01,
node-02 …, labelled zone=zone-a|b|c and rack=rack-1|2. Each agent writes the
config it applies to DATA/agents/<node>/config.json.

On the first start of a data directory the examples are applied; later starts
resume where the last one stopped and never undo what you applied. Remove the
data directory to start over.

Every service logs JSON to DATA/sluice.log; --verbose also prints the logs here.

With --nats-cluster 3, three embedded servers run clustered over loopback
(DATA/nats-1 … nats-3) and every bucket has 3 replicas: kill -USR1 <pid>
stops one server and sluice carries on (again restarts it).

With --redis and --watch-dir the configurator also syncs intents from a
Redis server (registry "redis": one intent per key sluice:intents:<kind>.<name>)
and from the intent files in a directory (registry "dir", created if
missing), as 'sluice registry add' would store them (docs/registries.md).
With --git-dir (a repository here) or --git URL (https://, http://,
ssh://, user@host:path or file://; --git-token-file for a server that asks
for a token; clones kept in DATA/git; --git-ssh-key-file and
--git-known-hosts for ssh:// and user@host:path) it follows branch main of a Git repository (registry "git":
the intent files at the root of the branch's head commit).
An intent removed from one is marked for deletion once every answer has
lacked it for the settle period: --registry-delete-after, by default 1m
here (twice the sync interval); 'sluice registry confirm' marks it at once.

With --secure the server runs in operator mode with a credentials setup in
DATA/creds (as 'sluice creds init' makes it): each service connects as a user
of its role and each agent as its own node's, which reads only its own
desired config and writes only its own status. The banner prints the admin
credentials for the CLI (SLUICE_NATS_CREDS).

Only one sluice dev runs on a data directory: it holds a lock on DATA/LOCK.`,
		Example: "  sluice dev\n  sluice dev --agents 20 --max-parallel 25%\n  sluice dev --redis redis://127.0.0.1:6379/0 --watch-dir ./intents\n  sluice dev --nats-cluster 3 --data ./.sluice-r3\n  sluice dev --secure --data ./.sluice-secure\n  sluice dev --check-cmd 'test \"$SLUICE_NODE\" != node-03'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if noExamples {
				opts.Examples = ""
			} else if _, err := os.Stat(opts.Examples); err != nil {
				if cmd.Flags().Changed("examples") {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--examples: %w", err)}
				}
				if !errors.Is(err, os.ErrNotExist) {
					return err
				}
				opts.Examples = "" // the default directory is absent: run without examples
			}
			if err := checkMaxParallel(opts.MaxParallel); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if err := dashboard.CheckAllowedHosts(df.allowedHostFlag, df.allowedHosts); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			settings, err := devSettings(cmd, replicas, leaderLease, nodeLease, opts.NATSCluster)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			opts.Settings = settings
			if opts.Registries, err = a.devRegistries(redisURL, watchDir, git); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if cmd.Flags().Changed("registry-delete-after") {
				if err := configurator.CheckDeleteAfter(deleteAfter); err != nil {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--registry-delete-after %s: %w", deleteAfter, err)}
				}
				opts.RegistryDeleteAfter = &deleteAfter
			}
			if df.addr != dashboard.Off {
				opts.Dashboard = a.devDashboard(df)
			}
			opts.Stderr = a.streams.Err
			opts.Version = a.version
			return dev.Run(cmd.Context(), opts, a.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data", "./"+dev.DefaultDataDir, "data directory (NATS storage, agents' state, log)")
	f.StringVar(&opts.Listen, "listen", dev.DefaultListen, "NATS listen address host:port")
	f.IntVar(&opts.Agents, "agents", dev.DefaultAgents, "number of simulated agents")
	f.StringVar(&opts.Examples, "examples", "./examples", "directory of intents applied on the first start of the data directory")
	f.BoolVar(&noExamples, "no-examples", false, "apply no examples, even on a first start")
	f.StringVar(&opts.MaxParallel, "max-parallel", "1", "max parallel of the examples' rollout: a count or a percentage")
	f.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringArrayVar(&opts.CheckCmds, "check-cmd", nil, "health check every agent runs after each apply (repeatable): a shell command with SLUICE_NODE and SLUICE_CONFIG set; non-zero exit restores the node's last-good config")
	f.BoolVarP(&opts.Verbose, "verbose", "v", false, "also print the services' logs to stderr")
	f.IntVar(&opts.NATSCluster, "nats-cluster", 1, "embedded NATS servers: 1, or 3 clustered over loopback (ports --listen, +1, +2) to show failover")
	f.IntVar(&replicas, "replicas", 0, "replicas of every bucket (env SLUICE_REPLICAS; default: the number of NATS servers)")
	f.StringVar(&redisURL, "redis", "", "also sync intents from this Redis server (registry \"redis\"): redis://host:port/db")
	f.StringVar(&watchDir, "watch-dir", "", "also sync the intent files in this directory (registry \"dir\"; created if missing)")
	f.StringVar(&git.dir, "git-dir", "", "also sync the intent files at the head of branch main of this Git repository (registry \"git\"; its working tree or git directory)")
	f.StringVar(&git.url, "git", "", "also sync the intent files at the head of branch main of the Git repository at this URL (registry \"git\"; https://, http://, ssh://, user@host:path, file:// or a path; cloned into DATA/git)")
	f.StringVar(&git.tokenFile, "git-token-file", "", "with --git https://: a file holding the server's access token")
	f.StringVar(&git.sshKey, "git-ssh-key-file", "", "with --git ssh://: an unencrypted private key that authenticates to the server")
	f.StringVar(&git.knownHosts, "git-known-hosts", "", "with --git ssh://: a known_hosts file holding the server's host key")
	f.StringVar(&git.requireSigned, "require-signed", "", "with --git or --git-dir: a file of allowed keys (armored OpenPGP public keys, or an SSH allowed_signers file); a head commit not signed by a key of it is held")
	f.DurationVar(&deleteAfter, "registry-delete-after", 0, "how long an intent must be missing from every answer of its registry before it is marked for deletion; 0 marks it at once (default: twice the registry's sync interval, at least 30s)")
	f.BoolVar(&opts.Secure, "secure", false, "run NATS in operator mode: every service and agent gets its own role's credentials (kept in DATA/creds); see docs/security.md")
	f.DurationVar(&leaderLease, "leader-lease", contract.DefaultSettings().LeaderLease, "the coordinator's leader lease (env SLUICE_LEADER_LEASE; at least 1s)")
	f.DurationVar(&nodeLease, "node-lease", contract.DefaultSettings().NodeLease, "how long a node's presence lasts without a heartbeat; agents beat every third of it (env SLUICE_NODE_LEASE; at least 1s)")
	df.register(cmd, dashboard.DefaultAddr, "the dashboard's listen address host:port; off runs none")
	f.StringVar(&opts.HTTPAddr, "http-addr", "", "serve /healthz, /readyz and /metrics (every service's and the agents' metrics) on host:port, as each service's --http-addr does; empty: not served")
	return cmd
}

// devDashboard starts the dashboard of sluice dev: it connects as the CLI
// would, with the admin credentials under --secure.
func (a *app) devDashboard(df dashboardFlags) func(*dev.System) (string, func(context.Context) error, error) {
	return func(s *dev.System) (string, func(context.Context) error, error) {
		sub := &app{streams: a.streams, version: a.version, now: a.now, server: s.URL()}
		sub.auth.Creds = s.AdminCreds()
		return sub.startDashboard(df)
	}
}

// devGit is sluice dev's --git-dir, --git and --git-token-file.
type devGit struct{ dir, url, tokenFile, requireSigned, sshKey, knownHosts string }

// devRegistries builds the specs of --redis, --watch-dir and --git-dir or
// --git, named "redis", "dir" and "git", as 'sluice registry add' builds
// them; the watched directory is created if missing.
func (a *app) devRegistries(redisURL, watchDir string, git devGit) ([]*sluicev1.RegistrySpec, error) {
	var specs []*sluicev1.RegistrySpec
	if redisURL != "" {
		spec, err := registryspec.Build("redis", registryspec.Options{Redis: redisURL}, operator(), a.now())
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		specs = append(specs, spec)
	}
	if watchDir != "" {
		if err := os.MkdirAll(watchDir, 0o755); err != nil {
			return nil, fmt.Errorf("--watch-dir: %w", err)
		}
		spec, err := registryspec.Build("dir", registryspec.Options{Dir: watchDir}, operator(), a.now())
		if err != nil {
			return nil, fmt.Errorf("--watch-dir: %w", err)
		}
		specs = append(specs, spec)
	}
	switch {
	case git.dir != "" && git.url != "":
		return nil, errors.New("give --git-dir or --git, not both: the registry \"git\" follows one repository")
	case git.tokenFile != "" && git.url == "":
		return nil, errors.New("--git-token-file goes with --git URL")
	case (git.sshKey != "" || git.knownHosts != "") && git.url == "":
		return nil, errors.New("--git-ssh-key-file and --git-known-hosts go with --git URL")
	case git.requireSigned != "" && git.url == "" && git.dir == "":
		return nil, errors.New("--require-signed goes with --git or --git-dir")
	case git.dir != "" || git.url != "":
		// The files are on this host, as the configurator is: made absolute.
		tokenFile, signers := absOrEmpty(git.tokenFile), absOrEmpty(git.requireSigned)
		o := registryspec.Options{Git: git.url, GitDir: git.dir, GitTokenFile: tokenFile, RequireSigned: signers,
			GitSSHKeyFile: absOrEmpty(git.sshKey), GitKnownHosts: absOrEmpty(git.knownHosts)}
		spec, err := registryspec.Build("git", o, operator(), a.now())
		if err != nil {
			return nil, fmt.Errorf("%s", specFlags.Replace(err.Error()))
		}
		if err := checkSignersFile(signers); err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// devSettings are the bucket settings of `sluice dev`: flags win over
// SLUICE_REPLICAS, SLUICE_LEADER_LEASE and SLUICE_NODE_LEASE; replicas
// default to the number of NATS servers.
func devSettings(cmd *cobra.Command, replicas int, lease, nodeLease time.Duration, servers int) (contract.Settings, error) {
	s := contract.DefaultSettings()
	s.Replicas, s.LeaderLease, s.NodeLease = max(servers, 1), lease, nodeLease
	if v, ok := os.LookupEnv("SLUICE_REPLICAS"); ok && !cmd.Flags().Changed("replicas") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("SLUICE_REPLICAS=%q: want a number of replicas", v)
		}
		replicas = n
	}
	if replicas != 0 || cmd.Flags().Changed("replicas") {
		s.Replicas = replicas
	}
	for _, d := range []struct {
		env, flag string
		dst       *time.Duration
	}{{"SLUICE_LEADER_LEASE", "leader-lease", &s.LeaderLease}, {"SLUICE_NODE_LEASE", "node-lease", &s.NodeLease}} {
		v, ok := os.LookupEnv(d.env)
		if !ok || cmd.Flags().Changed(d.flag) {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return s, fmt.Errorf("%s=%q: want a duration such as %s", d.env, v, *d.dst)
		}
		*d.dst = parsed
	}
	return s, s.Validate()
}

// absOrEmpty is p made absolute against the working directory; "" stays "".
func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
