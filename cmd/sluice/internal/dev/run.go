package dev

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/pkg/render"
)

// Run starts a dev system, prints the banner to out and runs until ctx ends
// (Ctrl-C) or a service fails; then it stops everything in order.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	s, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprint(out, s.Banner())
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
	p("  NATS      %s", s.URL())
	p("  data      %s (remove it to start over)", s.opts.DataDir)
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
	switch seed := s.seeded; {
	case seed.Intents > 0:
		p("  examples  applied %d intents from %s (revision %s)", seed.Intents, s.opts.Examples, render.Short(seed.Revision))
	case !seed.FirstStart:
		p("  examples  not applied: the data directory already has intents (restart resumes where it stopped)")
	default:
		p("  examples  none")
	}
	p("")
	p("Try next:")
	if s.URL() != "nats://"+DefaultListen {
		p("  export SLUICE_NATS_URL=%s", s.URL())
	}
	broken := filepath.Join("examples", "broken") + "/"
	if s.opts.Examples != "" {
		broken = filepath.Join(s.opts.Examples, "broken") + "/"
	}
	p("  sluice get nodes")
	p("  sluice rollout status --watch")
	p("  sluice apply -f %-24s # shows validation errors; nothing is stored", broken)
	p("  sluice events")
	if len(s.opts.CheckCmds) == 0 {
		p("  sluice dev --check-cmd examples/checks/node-03-needs-table-10.sh  # then change table mgmt's tableId: node-03 fails its check, the rollout reverts (README: \"Break a node\")")
	}
	p("  with the nats CLI: nats kv ls; nats kv get sluice-status %s", firstOr(s.nodes, "node-01"))
	return b.String()
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}
