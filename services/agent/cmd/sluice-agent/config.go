package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natsauth"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// options are the command line.
type options struct {
	common                                      cmdutil.Common
	node, labels, stateDir, configFile          string
	kubeNodeLabels                              bool
	kubeconfig                                  string
	applier, configPath, applyCmd, applyMode    string
	validateCmd                                 string
	checkCmds, checkTCP, checkHTTP, checkIfaces multi
	checkTimeout, checkDeadline                 time.Duration
	applierTimeout, validateTimeout             time.Duration
	checkRetries                                int
	netlink                                     netlinkFlags
	netChecks                                   netCheckFlags
	frr                                         frrFlags
	// warnings found while building the config, logged at start.
	warnings []string
}

func (o *options) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.common.Register(fs)
	fs.StringVar(&o.node, "node", shortHostname(), "this node's name (default: the short host name, lower-cased)")
	fs.StringVar(&o.labels, "labels", "", "this node's labels, k=v,k=v (with --kube-node-labels: added to the Node's, and winning over them)")
	fs.BoolVar(&o.kubeNodeLabels, "kube-node-labels", os.Getenv("SLUICE_KUBE_NODE_LABELS") == "true",
		"publish the labels of the Kubernetes Node named --node, and follow their changes (needs get, list and watch on nodes; env SLUICE_KUBE_NODE_LABELS=true)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig for --kube-node-labels outside a cluster (default: the in-cluster ServiceAccount)")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/sluice-agent", "directory for the last-good config and the apply marker")
	fs.StringVar(&o.configFile, "config", "", "YAML file with applier, validate and checks (flags override it; check flags add to its checks)")
	fs.StringVar(&o.applier, "applier", "file", "how configs are applied: file, exec, netlink (links, VXLAN, bridges and VRF devices through netlink), frr (routing through FRR's frr-reload) or netlink,frr (both, one operation: docs/agent.md)")
	fs.StringVar(&o.configPath, "config-path", "", "file the file applier writes (default <state-dir>/config.json); with --apply-mode file, where the exec applier writes it")
	fs.StringVar(&o.applyCmd, "apply-cmd", "", "exec applier: shell command that applies the config (SLUICE_NODE, SLUICE_FINGERPRINT; SLUICE_CONFIG in file mode)")
	fs.StringVar(&o.applyMode, "apply-mode", "stdin", "exec applier: how the config reaches --apply-cmd: stdin or file")
	fs.StringVar(&o.validateCmd, "validate-cmd", "", "shell command run before each apply with SLUICE_CONFIG naming the desired config; non-zero exit: Invalid, nothing applied")
	fs.DurationVar(&o.validateTimeout, "validate-timeout", agent.DefaultValidateTimeout, "time one run of --validate-cmd may take")
	fs.DurationVar(&o.applierTimeout, "applier-timeout", agent.DefaultApplierTimeout,
		"time one call of the applier may take: its validation (frr) or its apply, a restore of last-good included (the desired config's deadline still bounds the whole operation)")
	fs.Var(&o.checkCmds, "check-cmd", "health check (repeatable): shell command with SLUICE_NODE and SLUICE_CONFIG; exit 0 = healthy")
	fs.Var(&o.checkTCP, "check-tcp", "health check (repeatable): TCP connect to host:port; host:port,refused also accepts a refused connection")
	fs.Var(&o.checkHTTP, "check-http", "health check (repeatable): GET URL[=status] (default status 200)")
	fs.Var(&o.checkIfaces, "check-interface", "health check (repeatable): network interface present and up")
	o.netChecks.register(fs)
	fs.DurationVar(&o.checkTimeout, "check-timeout", agent.DefaultCheckTimeout, "timeout of one attempt of a check")
	fs.IntVar(&o.checkRetries, "check-retries", 0, "further attempts a failing check gets")
	fs.DurationVar(&o.checkDeadline, "check-deadline", agent.DefaultCheckDeadline, "time all checks of one apply may take, retries included")
	o.netlink.register(fs)
	o.frr.register(fs)
	return fs
}

// agentConfig builds the agent's settings from the parsed flags of fs and
// the --config file; a flag given on the command line wins over the file,
// and the --check-* flags add checks after the file's. Conn, Settings, Log
// and Version are left to the caller. Errors name the flag or field.
func (o *options) agentConfig(fs *flag.FlagSet) (agent.Config, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	pick := func(flagName, flagVal, fileVal string) string {
		if set[flagName] || fileVal == "" {
			return flagVal
		}
		return fileVal
	}
	var cfg agent.Config
	lbls, err := parseLabels(o.labels)
	if err != nil {
		return cfg, fmt.Errorf("--labels: %w", err)
	}
	fc, err := loadConfig(o.configFile)
	if err != nil {
		return cfg, fmt.Errorf("--config %s: %w", o.configFile, err)
	}
	path := pick("config-path", o.configPath, fc.Applier.Path)
	switch kind := pick("applier", o.applier, fc.Applier.Kind); kind {
	case "file":
		if path == "" {
			path = filepath.Join(o.stateDir, "config.json")
		}
		cfg.Applier = agent.NewFileApplier(path)
	case "exec":
		cmd, mode := pick("apply-cmd", o.applyCmd, fc.Applier.Command), pick("apply-mode", o.applyMode, fc.Applier.Mode)
		if strings.TrimSpace(cmd) == "" {
			return cfg, errors.New("--apply-cmd (applier.command): required with the exec applier")
		}
		if mode != string(agent.ApplyModeStdin) && mode != string(agent.ApplyModeFile) {
			return cfg, fmt.Errorf("--apply-mode (applier.mode) %q: want stdin or file", mode)
		}
		cfg.Applier = agent.ExecApplier{Command: cmd, Mode: agent.ApplyMode(mode), Path: path}
	case "netlink", "frr", "netlink,frr", "frr,netlink":
		withNetlink, withFRR, err := applierKinds(kind)
		if err != nil {
			return cfg, err
		}
		var parts agent.Appliers
		var host *hostnet.Host
		if withNetlink {
			h, err := o.netlink.host(set, fc.Netlink)
			if err != nil {
				return cfg, fmt.Errorf("--applier netlink: %w", err)
			}
			a, warning, err := netlinkApplier(h)
			if err != nil {
				return cfg, err
			}
			if warning != "" {
				o.warnings = append(o.warnings, warning)
			}
			parts, host = append(parts, agent.NamedApplier{Name: "netlink", Applier: a}), &h
		}
		if withFRR {
			a, warnings, err := o.frr.frrApplier(set, fc.FRR, host, &o.netlink, o.stateDir)
			if err != nil {
				return cfg, err
			}
			o.warnings = append(o.warnings, warnings...)
			parts = append(parts, agent.NamedApplier{Name: "frr", Applier: a})
		}
		cfg.Applier = parts[0].Applier
		if len(parts) > 1 {
			cfg.Applier = parts
		}
	default:
		return cfg, fmt.Errorf("--applier (applier.kind) %q: want file, exec, netlink, frr or netlink,frr", kind)
	}
	inst := o.frr.instance(set, fc.FRR)

	if o.checkRetries < 0 {
		return cfg, fmt.Errorf("--check-retries: %d is negative", o.checkRetries)
	}
	if o.checkTimeout <= 0 || o.checkDeadline <= 0 {
		return cfg, errors.New("--check-timeout and --check-deadline must be positive")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"applier-timeout", o.applierTimeout}, {"validate-timeout", o.validateTimeout}} {
		if f.d <= 0 {
			return cfg, fmt.Errorf("--%s %s: must be positive", f.name, f.d)
		}
	}
	cfg.ApplierTimeout, cfg.ValidateTimeout = o.applierTimeout, o.validateTimeout
	if !set["applier-timeout"] && fc.ApplierTimeout > 0 {
		cfg.ApplierTimeout = time.Duration(fc.ApplierTimeout)
	}
	if !set["validate-timeout"] && fc.ValidateTimeout > 0 {
		cfg.ValidateTimeout = time.Duration(fc.ValidateTimeout)
	}
	timeout, retries, deadline := o.checkTimeout, o.checkRetries, o.checkDeadline
	if !set["check-timeout"] && fc.CheckTimeout > 0 {
		timeout = time.Duration(fc.CheckTimeout)
	}
	if !set["check-retries"] && fc.CheckRetries > 0 {
		retries = fc.CheckRetries
	}
	if !set["check-deadline"] && fc.CheckDeadline > 0 {
		deadline = time.Duration(fc.CheckDeadline)
	}
	for i, s := range fc.Checks {
		s.frr = inst
		c, err := s.spec(timeout, retries)
		if err != nil {
			return cfg, fmt.Errorf("--config %s: checks[%d]: %w", o.configFile, i, err)
		}
		cfg.Checks = append(cfg.Checks, c)
	}
	flagChecks := []struct {
		flag   string
		values multi
		parse  func(string) (checkSpec, error)
	}{
		{"check-cmd", o.checkCmds, func(v string) (checkSpec, error) { return checkSpec{Exec: v}, nil }},
		{"check-tcp", o.checkTCP, func(v string) (checkSpec, error) {
			addr, refused := strings.CutSuffix(v, ",refused")
			return checkSpec{TCP: addr, RefusedIsReachable: refused}, nil
		}},
		{"check-http", o.checkHTTP, httpCheckFlag},
		{"check-interface", o.checkIfaces, func(v string) (checkSpec, error) { return checkSpec{Interface: v}, nil }},
	}
	for _, fl := range flagChecks {
		for _, v := range fl.values {
			if strings.TrimSpace(v) == "" {
				return cfg, fmt.Errorf("--%s: empty value", fl.flag)
			}
			s, err := fl.parse(v)
			if err == nil {
				var c agent.CheckSpec
				if c, err = s.spec(timeout, retries); err == nil {
					cfg.Checks = append(cfg.Checks, c)
				}
			}
			if err != nil {
				return cfg, fmt.Errorf("--%s %s: %w", fl.flag, v, err)
			}
		}
	}
	netChecks, err := o.netChecks.specs(timeout, retries)
	if err != nil {
		return cfg, err
	}
	cfg.Checks = append(cfg.Checks, netChecks...)
	frrChecks, err := o.frr.specs(inst, timeout, retries)
	if err != nil {
		return cfg, err
	}
	cfg.Checks = append(cfg.Checks, frrChecks...)
	cfg.Node, cfg.Labels, cfg.StateDir = o.node, lbls, o.stateDir
	cfg.CheckDeadline = deadline
	// The connection: a flag on the command line wins over the file, the
	// file over the environment (the flags' defaults).
	onCmdLine := natsauth.Options{}
	for name, dst := range map[string]*string{"creds": &onCmdLine.Creds, "nkey": &onCmdLine.NKey, "nats-user": &onCmdLine.User,
		"nats-password-file": &onCmdLine.PasswordFile, "tls-ca": &onCmdLine.TLSCA, "tls-cert": &onCmdLine.TLSCert,
		"tls-key": &onCmdLine.TLSKey, "tls-server-name": &onCmdLine.TLSServerName} {
		if set[name] {
			*dst = fs.Lookup(name).Value.String()
		}
	}
	o.common.Auth = onCmdLine.Merge(fc.NATS).Merge(o.common.Auth)
	// A node's credentials allow replies under its own inbox prefix only.
	o.common.InboxPrefix = creds.NodeInboxPrefix(o.node)
	cfg.ValidateCmd = pick("validate-cmd", o.validateCmd, fc.Validate)
	return cfg, nil
}

// fileConfig is the --config file: how configs are applied, validated and
// checked. Unknown fields are errors.
type fileConfig struct {
	Applier struct {
		Kind    string `json:"kind"`    // file | exec | netlink | frr | netlink,frr
		Path    string `json:"path"`    // file: the file written; exec file mode: where the config is written
		Command string `json:"command"` // exec: the command
		Mode    string `json:"mode"`    // exec: stdin | file
	} `json:"applier"`
	Validate        string      `json:"validate"`
	ValidateTimeout duration    `json:"validateTimeout"`
	ApplierTimeout  duration    `json:"applierTimeout"`
	CheckTimeout    duration    `json:"checkTimeout"`
	CheckRetries    int         `json:"checkRetries"`
	CheckDeadline   duration    `json:"checkDeadline"`
	Checks          []checkSpec `json:"checks"`
	// NATS: credentials and TLS (the --creds, --tls-* flags win over it).
	NATS natsauth.Options `json:"nats"`
	// Netlink: the host's network settings of the netlink applier (the
	// --uplink, --vtep-address, … flags win over it).
	Netlink hostnet.Host `json:"netlink"`
	// FRR: the node's FRR settings of the FRR applier and where FRR is
	// (the --frr-* flags win over it).
	FRR frrSection `json:"frr"`
}

// checkSpec is one check of the config file (or of a --check-* flag);
// exactly one of Exec, TCP, HTTP, Interface, the network checks (Gateway,
// Peer, Uplink) and the FRR checks (BGP, Route) is set.
type checkSpec struct {
	Name               string   `json:"name"`
	Exec               string   `json:"exec"`
	TCP                string   `json:"tcp"`
	RefusedIsReachable bool     `json:"refusedIsReachable"`
	HTTP               string   `json:"http"`
	ExpectStatus       int      `json:"expectStatus"`
	Interface          string   `json:"interface"`
	Timeout            duration `json:"timeout"`
	Retries            *int     `json:"retries"`
	netCheckFields
	frrCheckFields
}

// invalid is an error in s's fields, naming s when it has a name (as the
// agent's errors do).
func (s checkSpec) invalid(format string, a ...any) error {
	if s.Name != "" {
		format = fmt.Sprintf("check %q: ", s.Name) + format
	}
	return fmt.Errorf(format, a...)
}

// spec builds the agent's check from s, with timeout and retries where s
// sets none, and checks it.
func (s checkSpec) spec(timeout time.Duration, retries int) (agent.CheckSpec, error) {
	var kinds []agent.Check
	if s.Exec != "" {
		kinds = append(kinds, agent.ExecCheck{Label: s.Name, Command: s.Exec})
	}
	if s.TCP != "" {
		kinds = append(kinds, agent.TCPCheck{Label: s.Name, Addr: s.TCP, RefusedIsReachable: s.RefusedIsReachable})
	}
	if s.HTTP != "" {
		kinds = append(kinds, agent.HTTPCheck{Label: s.Name, URL: s.HTTP, ExpectStatus: s.ExpectStatus})
	}
	if s.Interface != "" {
		kinds = append(kinds, agent.InterfaceCheck{Label: s.Name, Interface: s.Interface})
	}
	nets, err := s.netCheckFields.checks(s.Name)
	if err != nil {
		return agent.CheckSpec{}, s.invalid("%w", err)
	}
	kinds = append(kinds, nets...)
	frrs, err := s.frrCheckFields.checks(s.Name)
	if err != nil {
		return agent.CheckSpec{}, s.invalid("%w", err)
	}
	kinds = append(kinds, frrs...)
	switch {
	case len(kinds) != 1:
		return agent.CheckSpec{}, s.invalid("set exactly one of exec, tcp, http, interface, gateway, peer, uplink, bgp, route")
	case s.RefusedIsReachable && s.TCP == "":
		return agent.CheckSpec{}, s.invalid("refusedIsReachable: only for a tcp check")
	case s.ExpectStatus != 0 && s.HTTP == "":
		return agent.CheckSpec{}, s.invalid("expectStatus: only for an http check")
	case s.Retries != nil && *s.Retries < 0:
		return agent.CheckSpec{}, s.invalid("retries: %d is negative", *s.Retries)
	}
	c := agent.CheckSpec{Check: kinds[0], Timeout: timeout, Retries: retries}
	if s.Timeout > 0 {
		c.Timeout = time.Duration(s.Timeout)
	}
	if s.Retries != nil {
		c.Retries = *s.Retries
	}
	return c, c.Validate()
}

// duration reads "5s" style durations.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("%s is negative", s)
	}
	*d = duration(v)
	return nil
}

// loadConfig reads the --config file; "" is an empty one. The checks are
// checked when they are built (agentConfig).
func loadConfig(path string) (*fileConfig, error) {
	c := &fileConfig{}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return nil, err
	}
	if c.CheckRetries < 0 {
		return nil, fmt.Errorf("checkRetries: %d is negative", c.CheckRetries)
	}
	return c, nil
}

// httpCheckFlag parses --check-http URL[=status]. A URL's query may hold
// "=", so only a trailing =NNN is a status.
func httpCheckFlag(v string) (checkSpec, error) {
	i := strings.LastIndex(v, "=")
	if i < 0 {
		return checkSpec{HTTP: v}, nil
	}
	n, err := strconv.Atoi(v[i+1:])
	if err != nil {
		return checkSpec{HTTP: v}, nil
	}
	if n < 100 || n > 599 {
		return checkSpec{}, fmt.Errorf("status %d is not an HTTP status", n)
	}
	return checkSpec{HTTP: v[:i], ExpectStatus: n}, nil
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
	if errs := contract.CheckLabels("--labels", out, contract.MaxNodeLabels); len(errs) > 0 {
		return nil, errors.Join(errs...)
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

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ", ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
