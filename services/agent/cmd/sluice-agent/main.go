// Command sluice-agent runs sluice's node agent on one node: it registers the
// node, applies its desired config and reports the node's status.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/services/agent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("SLUICE_NATS_URL", nats.DefaultURL), "NATS server URL (env SLUICE_NATS_URL)")
	node := fs.String("node", shortHostname(), "this node's name (default: the short host name, lower-cased)")
	labels := fs.String("labels", "", "this node's labels, k=v,k=v")
	stateDir := fs.String("state-dir", "/var/lib/sluice-agent", "directory for the last-good config and the apply marker")
	configFile := fs.String("config", "", "YAML file with applier, validate and checks (flags override it; check flags add to its checks)")
	applier := fs.String("applier", "file", "how configs are applied: file or exec")
	configPath := fs.String("config-path", "", "file the file applier writes (default <state-dir>/config.json); with --apply-mode file, where the exec applier writes it")
	applyCmd := fs.String("apply-cmd", "", "exec applier: shell command that applies the config (SLUICE_NODE, SLUICE_FINGERPRINT; SLUICE_CONFIG in file mode)")
	applyMode := fs.String("apply-mode", "stdin", "exec applier: how the config reaches --apply-cmd: stdin or file")
	validateCmd := fs.String("validate-cmd", "", "shell command run before each apply with SLUICE_CONFIG naming the desired config; non-zero exit: Invalid, nothing applied")
	var checkCmds, checkTCP, checkHTTP, checkIfaces multi
	fs.Var(&checkCmds, "check-cmd", "health check (repeatable): shell command with SLUICE_NODE and SLUICE_CONFIG; exit 0 = healthy")
	fs.Var(&checkTCP, "check-tcp", "health check (repeatable): TCP connect to host:port; host:port,refused also accepts a refused connection")
	fs.Var(&checkHTTP, "check-http", "health check (repeatable): GET URL[=status] (default status 200)")
	fs.Var(&checkIfaces, "check-interface", "health check (repeatable): network interface present and up")
	checkTimeout := fs.Duration("check-timeout", agent.DefaultCheckTimeout, "timeout of one attempt of a check")
	checkRetries := fs.Int("check-retries", 0, "further attempts a failing check gets")
	checkDeadline := fs.Duration("check-deadline", agent.DefaultCheckDeadline, "time all checks of one apply may take, retries included")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice-agent: "+format+"\n", a...)
		return 2
	}
	log, err := logging.New(stderr, *logLevel, false)
	if err != nil {
		return fail("--log-level: %v", err)
	}
	lbls, err := parseLabels(*labels)
	if err != nil {
		return fail("--labels: %v", err)
	}
	fc, err := loadConfig(*configFile)
	if err != nil {
		return fail("--config %s: %v", *configFile, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The file's settings apply unless the flag was given.
	pick := func(flagName, flagVal, fileVal string) string {
		if set[flagName] || fileVal == "" {
			return flagVal
		}
		return fileVal
	}
	kind := pick("applier", *applier, fc.Applier.Kind)
	path := pick("config-path", *configPath, fc.Applier.Path)
	var ap agent.Applier
	switch kind {
	case "file":
		if path == "" {
			path = filepath.Join(*stateDir, "config.json")
		}
		ap = agent.NewFileApplier(path)
	case "exec":
		cmd, mode := pick("apply-cmd", *applyCmd, fc.Applier.Command), pick("apply-mode", *applyMode, fc.Applier.Mode)
		if cmd == "" {
			return fail("--apply-cmd (applier.command): required with the exec applier")
		}
		if mode != string(agent.ApplyModeStdin) && mode != string(agent.ApplyModeFile) {
			return fail("--apply-mode (applier.mode) %q: want stdin or file", mode)
		}
		ap = agent.ExecApplier{Command: cmd, Mode: agent.ApplyMode(mode), Path: path}
	default:
		return fail("--applier (applier.kind) %q: want file or exec", kind)
	}
	if *checkRetries < 0 {
		return fail("--check-retries: %d is negative", *checkRetries)
	}
	timeout, retries, deadline := *checkTimeout, *checkRetries, *checkDeadline
	if !set["check-timeout"] && fc.CheckTimeout > 0 {
		timeout = time.Duration(fc.CheckTimeout)
	}
	if !set["check-retries"] && fc.CheckRetries > 0 {
		retries = fc.CheckRetries
	}
	if !set["check-deadline"] && fc.CheckDeadline > 0 {
		deadline = time.Duration(fc.CheckDeadline)
	}
	specs := fc.Checks
	for _, c := range checkCmds {
		specs = append(specs, checkSpec{Exec: c})
	}
	for _, c := range checkTCP {
		addr, refused := strings.CutSuffix(c, ",refused")
		specs = append(specs, checkSpec{TCP: addr, RefusedIsReachable: refused})
	}
	for _, c := range checkHTTP {
		s, err := httpCheckFlag(c)
		if err != nil {
			return fail("--check-http %s: %v", c, err)
		}
		specs = append(specs, s)
	}
	for _, c := range checkIfaces {
		specs = append(specs, checkSpec{Interface: c})
	}
	checks := make([]agent.CheckSpec, len(specs))
	for i, s := range specs {
		c, err := s.check()
		if err != nil {
			return fail("check %d: %v", i, err)
		}
		checks[i] = agent.CheckSpec{Check: c, Timeout: timeout, Retries: retries}
		if s.Timeout > 0 {
			checks[i].Timeout = time.Duration(s.Timeout)
		}
		if s.Retries != nil {
			checks[i].Retries = *s.Retries
		}
	}

	nc, err := nats.Connect(*server, nats.Name("sluice-agent "+*node), nats.MaxReconnects(-1))
	if err != nil {
		log.Error().Err(err).Str("server", *server).Msg("connect to NATS")
		return 1
	}
	defer nc.Close()
	a, err := agent.New(agent.Config{
		Conn:          nc,
		Settings:      contract.DefaultSettings(),
		Log:           log,
		Node:          *node,
		Labels:        lbls,
		StateDir:      *stateDir,
		Applier:       ap,
		Checks:        checks,
		CheckDeadline: deadline,
		ValidateCmd:   pick("validate-cmd", *validateCmd, fc.Validate),
		Version:       version,
	})
	if err != nil {
		log.Error().Err(err).Msg("configure agent")
		return 2
	}
	// After a reconnect, republished writes made while away are lost: fetch.
	nc.SetReconnectHandler(func(*nats.Conn) { a.Resync() })
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("agent stopped")
		return 1
	}
	return 0
}

// parseLabels parses "k=v,k=v".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not k=v", pair)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func shortHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".")
	return strings.ToLower(h)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
