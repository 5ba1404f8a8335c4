package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/pkg/creds"
)

// dashboardFlags are what `sluice dashboard` and `sluice dev` take.
type dashboardFlags struct {
	addr         string
	tokenFile    string
	groupBy      string
	allowedHosts []string
	// allowedHostFlag is --allowed-host as this command spells it.
	allowedHostFlag string
}

func (a *app) dashboardCommand() *cobra.Command {
	var df dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard [--addr 127.0.0.1:3100]",
		Short: "Serve the fleet dashboard in the browser, live, against the NATS this CLI connects to",
		Long: `Serve a live page of the fleet: every node on a map grouped by failure
domain and colored by phase, the running rollout with its waves and
failures grouped by fingerprint, the pause, the leader and the events. It
follows the buckets and the events stream once and pushes changes to every
open page (docs/dashboard.md).

It connects with this CLI's own connection flags and credentials. Controls
(pause, resume, abort, undo, retry, forgive) run the same commands as this
CLI and show them for confirmation; with readonly credentials they are
disabled.

It listens on loopback by default. Bound to any other address it requires
--token-file: every API request then carries the token (Authorization:
Bearer TOKEN), and the page asks for it once.

It answers only requests that name it in their Host header: its listen
address with its port (on 0.0.0.0 or ::, the address the client reached),
localhost, 127.0.0.1 and [::1] with its port, and the names given with
--allowed-host. Any other Host is refused with 421 before anything is read
or run, so a web page whose name rebinds to this machine (DNS rebinding)
gets nothing; controls must also come from a page of one of those names
(Origin). Behind a reverse proxy, or a port forwarded to another port, give
the name the browser uses: --allowed-host dashboard.example.com or
--allowed-host localhost:8080.`,
		Example: "  sluice dashboard\n  sluice dashboard --addr 0.0.0.0:3100 --token-file /etc/sluice/dashboard.token --allowed-host dashboard.example.com",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, serve, err := a.startDashboard(df)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.streams.Out, "sluice dashboard: %s (Ctrl-C stops it)\n", url)
			return serve(cmd.Context())
		},
	}
	df.register(cmd, dashboard.DefaultAddr, "listen address host:port (loopback by default; any other needs --token-file)")
	return cmd
}

func (df *dashboardFlags) register(cmd *cobra.Command, addr, usage string) {
	cmd.Flags().StringVar(&df.addr, flagName(cmd, "addr"), addr, usage)
	cmd.Flags().StringVar(&df.tokenFile, flagName(cmd, "token-file"), "", "file holding the token the dashboard requires (required unless it listens on loopback)")
	cmd.Flags().StringVar(&df.groupBy, flagName(cmd, "group-by"), "zone,rack", "labels the fleet map groups nodes by, outermost first")
	df.allowedHostFlag = "--" + flagName(cmd, "allowed-host")
	cmd.Flags().StringSliceVar(&df.allowedHosts, flagName(cmd, "allowed-host"), nil,
		"another name the dashboard answers to, NAME or NAME:PORT, such as a reverse proxy's (repeatable or comma-separated); "+
			"it answers only its listen address and localhost otherwise, refusing every other Host with 421 (DNS rebinding)")
}

// flagName prefixes the dashboard's flags with dashboard- in sluice dev.
func flagName(cmd *cobra.Command, name string) string {
	if cmd.Name() == "dashboard" {
		return name
	}
	return "dashboard-" + name
}

// startDashboard connects, listens and returns the page's URL and the
// function that serves it until ctx ends (then closes the connection).
func (a *app) startDashboard(df dashboardFlags) (string, func(context.Context) error, error) {
	token, err := readToken(df.tokenFile)
	if err != nil {
		return "", nil, &ExitError{Code: 2, Err: err}
	}
	readonly, err := a.readonlyReason()
	if err != nil {
		return "", nil, &ExitError{Code: 2, Err: err}
	}
	nc, js, err := a.jetStream()
	if err != nil {
		return "", nil, err
	}
	var groupBy []string
	for _, g := range strings.Split(df.groupBy, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groupBy = append(groupBy, g)
		}
	}
	who := a.dashboardWho()
	srv, err := dashboard.New(dashboard.Options{
		Addr: df.addr, AllowedHosts: df.allowedHosts, AllowedHostFlag: df.allowedHostFlag, Token: token, JS: js, Run: a.runner(who), Who: who, Readonly: readonly, GroupBy: groupBy,
		Logf: func(format string, args ...any) { fmt.Fprintf(a.streams.Err, format+"\n", args...) },
	})
	if err != nil {
		nc.Close()
		return "", nil, &ExitError{Code: 2, Err: err}
	}
	ln, err := net.Listen("tcp", df.addr)
	if err != nil {
		nc.Close()
		return "", nil, fmt.Errorf("listen on %s: %w (is another dashboard running? --addr, or --dashboard-addr in sluice dev, picks another; off runs none)", df.addr, err)
	}
	return "http://" + ln.Addr().String() + "/", func(ctx context.Context) error {
		defer nc.Close()
		return srv.Serve(ctx, ln)
	}, nil
}

// readToken reads --token-file: "" when none is named.
func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", fmt.Errorf("--token-file %s: the token is %d characters; use at least 16 (head -c 24 /dev/urandom | base64 > FILE)", path, len(token))
	}
	return token, nil
}

// readonlyReason says why these credentials may not use controls: a
// readonly user's are refused by the server.
func (a *app) readonlyReason() (string, error) {
	if a.auth.Creds == "" {
		return "", nil
	}
	role, err := creds.RoleOf(a.auth.Creds)
	if err != nil {
		return "", fmt.Errorf("--creds: %w", err)
	}
	if role == creds.RoleReadOnly {
		return fmt.Sprintf("these credentials (%s) are of the readonly role, which may only read; "+
			"controls need an admin user's (sluice creds issue admin)", a.auth.Creds), nil
	}
	return "", nil
}

// dashboardWho is who the dashboard's controls are recorded as: the user
// who started it, on its host, through the dashboard, with the name of its
// credentials file (the viewer of a loopback dashboard is that user; a
// shared one is as accountable as its credentials).
func (a *app) dashboardWho() string {
	who := operator() + " via the dashboard"
	if a.auth.Creds != "" {
		who += " (credentials " + filepath.Base(a.auth.Creds) + ")"
	}
	return who
}

// runner runs a control as this CLI would, with this CLI's connection and
// credentials, recording who as the requests' author, and returns what the
// command printed.
func (a *app) runner(who string) dashboard.Runner {
	return func(ctx context.Context, args []string) (string, error) {
		var out lockedBuffer
		sub := &app{streams: Streams{Out: &out, Err: &out}, version: a.version, now: a.now, by: who}
		err := sub.execute(ctx, args, func() { sub.server, sub.auth = a.server, a.auth })
		var ee *ExitError
		if errors.As(err, &ee) && ee.Err == nil {
			err = fmt.Errorf("%s exited %d", dashboard.CommandLine(args), ee.Code)
		}
		return out.String(), err
	}
}

// lockedBuffer is a bytes.Buffer a command writes while another goroutine
// reads it (a control's output; a test's).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
