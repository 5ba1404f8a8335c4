package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Limits of what a failure reports.
const (
	// MaxCheckOutput is how much of a check's output (its end) is reported.
	MaxCheckOutput = 4 << 10
	// maxNodeFault is how much of a node fault's reason (its end) is
	// reported in NodeStatus.node_fault.
	maxNodeFault = 512
)

// Check is one health check run after a config is applied. Run returns
// what the check saw (reported when it fails) and an error when the node is
// unhealthy.
type Check interface {
	Name() string
	Run(ctx context.Context, env CheckEnv) (output string, err error)
}

// CheckEnv is what a check knows about the config it checks.
type CheckEnv struct {
	// Node is the node's name (SLUICE_NODE).
	Node string
	// ConfigPath is a file holding the applied config as JSON
	// (SLUICE_CONFIG); "" if there is none.
	ConfigPath string
	// Fingerprint is the applied config's fingerprint (SLUICE_FINGERPRINT).
	Fingerprint string
	// Config is the applied config itself, for checks built into the agent
	// (those reading the gateways and VRFs in force); never changed by one.
	Config *sluicev1.DesiredConfig
}

func (e CheckEnv) environ() []string {
	return []string{"SLUICE_NODE=" + e.Node, "SLUICE_CONFIG=" + e.ConfigPath, "SLUICE_FINGERPRINT=" + e.Fingerprint}
}

// CheckSpec is a check with its own timeout and retries.
type CheckSpec struct {
	Check Check
	// Timeout bounds one attempt (default DefaultCheckTimeout).
	Timeout time.Duration
	// Retries is how many more attempts a failing check gets (default 0).
	Retries int
}

// Validate reports what is wrong with s, naming the check and the setting.
func (s CheckSpec) Validate() error {
	if s.Check == nil {
		return errors.New("no check")
	}
	if s.Timeout < 0 {
		return fmt.Errorf("check %q: timeout %s is negative", s.Check.Name(), s.Timeout)
	}
	if s.Retries < 0 {
		return fmt.Errorf("check %q: retries %d is negative", s.Check.Name(), s.Retries)
	}
	if v, ok := s.Check.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("check %q: %w", s.Check.Name(), err)
		}
	}
	return nil
}

// ExecCheck runs Command with /bin/sh -c; exit status 0 is healthy. Its
// environment has SLUICE_NODE, SLUICE_CONFIG (path of the applied config as
// JSON) and SLUICE_FINGERPRINT. Output is stdout and stderr combined.
type ExecCheck struct {
	Label   string // "" = "exec: " + Command
	Command string
}

// Name returns Label or a name made from the command.
func (c ExecCheck) Name() string { return orLabel(c.Label, "exec: "+c.Command) }

// Validate reports an empty command.
func (c ExecCheck) Validate() error {
	if strings.TrimSpace(c.Command) == "" {
		return errors.New("exec command is empty")
	}
	return nil
}

// Run runs the command.
func (c ExecCheck) Run(ctx context.Context, env CheckEnv) (string, error) {
	return runShell(ctx, c.Command, env.environ(), nil)
}

// TCPCheck connects to Addr (host:port). With RefusedIsReachable a refused
// connection counts as healthy: the host answered, so the network works.
type TCPCheck struct {
	Label              string // "" = "tcp: " + Addr
	Addr               string
	RefusedIsReachable bool
}

// Name returns Label or a name made from the address.
func (c TCPCheck) Name() string { return orLabel(c.Label, "tcp: "+c.Addr) }

// Validate reports an address that is not host:port.
func (c TCPCheck) Validate() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err == nil && (host == "" || port == "") {
		err = errors.New("host and port are both required")
	}
	if err != nil {
		return fmt.Errorf("tcp address %q is not host:port: %w", c.Addr, err)
	}
	return nil
}

// Run dials Addr.
func (c TCPCheck) Run(ctx context.Context, _ CheckEnv) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		if c.RefusedIsReachable && errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Sprintf("%s refused the connection: reachable", c.Addr), nil
		}
		return err.Error(), err
	}
	_ = conn.Close()
	return fmt.Sprintf("connected to %s", c.Addr), nil
}

// HTTPCheck GETs URL and expects ExpectStatus (default 200).
type HTTPCheck struct {
	Label        string // "" = "http: " + URL
	URL          string
	ExpectStatus int
}

// Name returns Label or a name made from the URL.
func (c HTTPCheck) Name() string { return orLabel(c.Label, "http: "+c.URL) }

// Validate reports a URL that is not http(s)://host/… and a status that is
// not an HTTP status.
func (c HTTPCheck) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return fmt.Errorf("http url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("http url %q: want http://host/path or https://host/path", c.URL)
	case c.ExpectStatus != 0 && (c.ExpectStatus < 100 || c.ExpectStatus > 599):
		return fmt.Errorf("expected status %d is not an HTTP status (100-599)", c.ExpectStatus)
	}
	return nil
}

// Run sends the request.
func (c HTTPCheck) Run(ctx context.Context, _ CheckEnv) (string, error) {
	want := c.ExpectStatus
	if want == 0 {
		want = http.StatusOK
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return err.Error(), err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error(), err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxCheckOutput))
	out := strings.TrimSpace(resp.Status + "\n" + string(body))
	if resp.StatusCode != want {
		return out, fmt.Errorf("GET %s: status %d, want %d", c.URL, resp.StatusCode, want)
	}
	return out, nil
}

// InterfaceCheck expects the network interface Interface to exist and be up.
type InterfaceCheck struct {
	Label     string // "" = "interface: " + Interface
	Interface string
}

// Name returns Label or a name made from the interface.
func (c InterfaceCheck) Name() string { return orLabel(c.Label, "interface: "+c.Interface) }

// Validate reports an empty interface name.
func (c InterfaceCheck) Validate() error {
	if strings.TrimSpace(c.Interface) == "" {
		return errors.New("interface name is empty")
	}
	return nil
}

// Run looks the interface up.
func (c InterfaceCheck) Run(context.Context, CheckEnv) (string, error) {
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		err = fmt.Errorf("interface %s: %w", c.Interface, err)
		return err.Error(), err
	}
	out := fmt.Sprintf("interface %s: flags %s", c.Interface, ifi.Flags)
	if ifi.Flags&net.FlagUp == 0 {
		return out, fmt.Errorf("interface %s is down", c.Interface)
	}
	return out, nil
}

func orLabel(label, def string) string {
	if label != "" {
		return label
	}
	return def
}

// checkFailure names the check that failed and what it said.
type checkFailure struct {
	name, output string
	err          error
	// nodeFault, from validate only: why the node could not apply the
	// config (ErrNodeFault), reported as NodeStatus.node_fault.
	nodeFault string
}

// runChecks runs specs in order until one fails, each attempt bounded by its
// timeout, failing attempts retried after pause, all of it within deadline.
// It returns nil when every check passes. each, if set, is told which check
// starts ("check 2 of 3: ping") and returns what to call when it ended.
func runChecks(ctx context.Context, specs []CheckSpec, deadline, pause time.Duration, env CheckEnv, each func(step string) func()) *checkFailure {
	if len(specs) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for i, s := range specs {
		done := func() {}
		if each != nil {
			done = each(fmt.Sprintf("check %d of %d: %s", i+1, len(specs), s.Check.Name()))
		}
		f := runCheck(dctx, s, pause, env)
		done()
		if f != nil {
			if errors.Is(dctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
				f.err = fmt.Errorf("checks did not pass within their deadline %s: %w", deadline, f.err)
			}
			return f
		}
	}
	return nil
}

func runCheck(ctx context.Context, s CheckSpec, pause time.Duration, env CheckEnv) *checkFailure {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	f := &checkFailure{name: s.Check.Name()}
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		out, err := s.Check.Run(actx, env)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err == nil {
			return nil
		}
		if timedOut {
			err = fmt.Errorf("timed out after %s: %w", timeout, err)
		}
		f.output, f.err = tail(out, MaxCheckOutput), err
		if attempt >= s.Retries {
			if s.Retries > 0 {
				f.err = fmt.Errorf("%d attempts: %w", attempt+1, err)
			}
			return f
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return f
		case <-t.C:
		}
	}
}

// tail returns the last n bytes of s, marked when cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
