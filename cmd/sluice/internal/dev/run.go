package dev

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Run starts a dev system, prints the banner to out and runs until ctx ends
// (Ctrl-C) or a service fails; then it stops everything in order.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	s, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprint(out, s.Banner())
	if s.cluster != nil {
		stop := s.toggleOnSignal(out)
		defer stop()
	}
	err = s.Wait()
	fmt.Fprintln(out, "sluice dev stopped")
	return err
}

// Banner says where everything is and what to try next.
func (s *System) Banner() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("sluice dev is running; Ctrl-C stops it.")
	p("")
	if c := s.cluster; c != nil {
		p("  NATS      %d-server cluster, every bucket R%d: %s", c.Size(), s.opts.Settings.Replicas, s.URL())
		p("            one server can stop and sluice carries on: kill -USR1 %d stops %s, again restarts it", os.Getpid(), c.Name(c.Size()-1))
	} else {
		p("  NATS      %s (one server, buckets R%d)", s.URL(), s.opts.Settings.Replicas)
	}
	if s.dashboardURL != "" {
		p("  dashboard %s (the fleet, live, in the browser)", s.dashboardURL)
	}
	if s.httpAddr != "" {
		p("  metrics   http://%s/metrics, readiness http://%s/readyz (every service and agent)", s.httpAddr, s.httpAddr)
	}
	p("  data      %s (remove it to start over)", s.opts.DataDir)
	if s.creds != nil {
		p("  secure    operator mode: every service and agent connects as a user of its role, each agent its own node's (credentials in %s)", s.creds.Dir)
	}
	switch n := len(s.nodes); n {
	case 0:
		p("  agents    none")
	default:
		p("  agents    %d: %s … %s, labelled zone=zone-a|b|c, rack=rack-1|2", n, s.nodes[0], s.nodes[n-1])
	}
	p("  log       %s", s.logPath)
	for _, c := range s.opts.CheckCmds {
		p("  check     %s (every agent, after each apply; failing restores last-good)", c)
	}
	for _, spec := range s.registries {
		given := slices.ContainsFunc(s.opts.Registries, func(o *sluicev1.RegistrySpec) bool { return o.GetName() == spec.GetName() })
		from := "synced by the configurator"
		if !given {
			from = "stored by an earlier start or 'sluice registry add': synced too"
		}
		p("  registry  %s: %s (%s, %s)", spec.GetName(), registryspec.Location(spec), registryspec.Kind(spec), from)
	}
	if len(s.registries) > 0 {
		p("            registries are kept in the data directory across restarts; 'sluice registry remove NAME' stops syncing one")
	}
	if s.loss != nil {
		p("  STORE     %s: nothing is started (no rollout, no deletion) until you recover:", s.loss)
		p("            sluice recover --confirm-empty starts from nothing; docs/operations.md, \"Disaster recovery\"")
	}
	switch seed := s.seeded; {
	case seed.Held != "":
		p("  examples  not applied: %s", seed.Held)
	case seed.Intents > 0:
		p("  examples  applied %d intents from %s (revision %s)", seed.Intents, s.opts.Examples, render.Short(seed.Revision))
	case !seed.FirstStart:
		p("  examples  not applied: the data directory already has intents (restart resumes where it stopped)")
	default:
		p("  examples  none")
	}
	p("")
	p("Try next (in another terminal; 'make build && export PATH=$PWD/bin:$PATH' first, so exit codes come through):")
	if s.URL() != "nats://"+DefaultListen {
		p("  export SLUICE_NATS_URL=%s", s.URL())
	}
	if s.creds != nil {
		// Absolute, so that the export holds in any directory.
		admin, dir := absPath(s.AdminCreds()), absPath(s.creds.Dir)
		p("  export SLUICE_NATS_CREDS=%s   # the admin user; sluice creds issue readonly --dir %s for a read-only one", admin, dir)
		p("  export NATS_CREDS=$SLUICE_NATS_CREDS   # for the nats CLI")
		p("  sluice creds list --dir %s; sluice creds revoke node-02 --dir %s   # node-02 is cut off at once", dir, dir)
	}
	broken := filepath.Join("examples", "broken") + "/"
	if s.opts.Examples != "" {
		broken = filepath.Join(s.opts.Examples, "broken") + "/"
	}
	p("  sluice get nodes")
	p("  sluice rollout status --watch")
	p("  sluice apply -f %-24s # shows validation errors; nothing is stored", broken)
	p("  sluice events")
	p("  sluice rollout history; sluice diff -f <dir>; sluice rollout undo | abort | retry")
	p("  sluice pause --wait; sluice get pause; sluice resume   # every instance acknowledges")
	for _, line := range registryHints(s.registries) {
		p("  %s", line)
	}
	if len(s.opts.CheckCmds) == 0 {
		p("  sluice dev --check-cmd examples/checks/node-03-needs-table-10.sh  # then change table mgmt's tableId: node-03 fails its check, the rollout reverts (README: \"Break a node\")")
	}
	p("  with the nats CLI: nats kv ls; nats kv get sluice-status %s --raw", firstOr(s.nodes, "node-01"))
	return b.String()
}

// registryHints are the banner's commands that change what the registries
// hold; the configurator syncs every change within seconds.
func registryHints(specs []*sluicev1.RegistrySpec) []string {
	var out []string
	for _, spec := range specs {
		switch src := spec.GetSource().(type) {
		case *sluicev1.RegistrySpec_Redis:
			key := cmp.Or(src.Redis.GetPrefix(), registry.DefaultRedisPrefix) + intent.KeyOf(intent.KindLayer2Network, "tenant-x")
			out = append(out,
				fmt.Sprintf(`redis-cli -u %s SET %s '{"kind":"Layer2Network","name":"tenant-x","spec":{"vlan":400,"vni":10400}}'`, src.Redis.GetUrl(), key),
				fmt.Sprintf("  # registry %s: one intent per key; DEL %s marks it for deletion", spec.GetName(), key))
		case *sluicev1.RegistrySpec_Directory:
			out = append(out,
				fmt.Sprintf(`printf 'kind: RoutingTable\nname: lab\nspec: {tableId: 42}\n' > %s`, filepath.Join(src.Directory.GetPath(), "lab.yaml")),
				fmt.Sprintf("  # registry %s: add, edit or remove *.yaml files in %s", spec.GetName(), src.Directory.GetPath()))
		case *sluicev1.RegistrySpec_Git:
			repo := cmp.Or(src.Git.GetDir(), strings.TrimPrefix(src.Git.GetUrl(), "file://"))
			out = append(out,
				`printf 'kind: RoutingTable\nname: lab\nspec: {tableId: 42}\n' > lab.yaml && git add lab.yaml && git commit -m lab`,
				fmt.Sprintf("  # in a working tree of %s (then git push, if a clone): registry %s reads branch %s's head commit every sync interval",
					repo, spec.GetName(), cmp.Or(src.Git.GetBranch(), registry.DefaultGitBranch)))
		}
	}
	if len(out) > 0 {
		out = append(out, "sluice get registries; sluice get intents   # SOURCE names the registry and the key or file")
	}
	return out
}

// absPath is p made absolute; p as it is when that fails.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}

// toggleOnSignal stops the cluster's last server on SIGUSR1 and restarts it
// on the next, to show failover; it returns a function that stops listening.
func (s *System) toggleOnSignal(out io.Writer) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	quit := make(chan struct{})
	go func() {
		c := s.cluster
		last := c.Size() - 1
		for {
			select {
			case <-quit:
				return
			case <-s.done:
				return
			case <-sigs:
			}
			if c.Server(last) != nil {
				c.Stop(last)
				s.log.Warn().Str("server", c.Name(last)).Msg("NATS server stopped (SIGUSR1); the others carry on")
				fmt.Fprintf(out, "stopped NATS server %s; SIGUSR1 again restarts it\n", c.Name(last))
				continue
			}
			if err := c.Restart(last); err != nil {
				s.log.Error().Err(err).Str("server", c.Name(last)).Msg("NATS server restart failed")
				fmt.Fprintf(out, "restarting NATS server %s failed: %v\n", c.Name(last), err)
				continue
			}
			s.log.Info().Str("server", c.Name(last)).Msg("NATS server restarted (SIGUSR1)")
			fmt.Fprintf(out, "restarted NATS server %s\n", c.Name(last))
		}
	}()
	return func() { signal.Stop(sigs); close(quit) }
}
