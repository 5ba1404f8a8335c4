// Package cli is the sluice command line: one file per command (apply and
// delete, get, rollout status, events, dev, dashboard, version), built with
// cobra.
// Entry point: Run(ctx, args, Streams{...}, version), which returns the
// process exit code.
//
// Read commands (get, rollout status, events) read the buckets and the
// events stream directly; write commands (apply, delete) go through the
// configurator's API, the only writer of intents; operator requests
// (abort, pause, reaper and registry commands) are stored in the control
// bucket for the service that acts on them.
//
// `sluice rollout status` is several rooms: rollout.go (the command, which
// rollout to show), rollout_watch.go (--watch), rollout_draw.go (redrawn on
// a terminal, changed lines in a pipe), progress.go (the status block) and
// nodetable.go (its table of nodes). exitcodes.go is every command's exit
// codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natsauth"
)

// DefaultServer is the NATS URL used without --server or SLUICE_NATS_URL.
const DefaultServer = "nats://127.0.0.1:4222"

// Streams are where a command reads and writes.
type Streams struct {
	Out, Err io.Writer
	// TTY says Out is a terminal: `rollout status --watch` then redraws in place.
	TTY bool
}

// ExitError ends the command with Code; a nil Err prints nothing more.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// silentExit ends the command with code after the command has already said why.
func silentExit(code int) error { return &ExitError{Code: code} }

// app holds what every command shares.
type app struct {
	streams Streams
	version string
	server  string
	auth    natsauth.Options      // --creds, --tls-ca, …
	denied  atomic.Pointer[error] // the first permission the server refused
	// stop ends the command's context: a refused permission stops the
	// command at once, rather than at its request's deadline.
	stop func(error)
	now  func() time.Time
	// by names who asks in the requests the command writes, when it is not
	// this process's user: the dashboard's controls run for a viewer.
	by string
	// failCode, when set, is the exit code of a failure that has no code
	// of its own (1 otherwise): diff's 1 means "changes", so it fails 6.
	failCode int
	// note, while a watch runs, says a line where the watch prints
	// (drawer.note): the connection's moves between servers.
	note atomic.Pointer[func(string)]
}

// connNote says line, with the time, where a running watch prints; nothing
// when none runs (a short command's retries are its own business).
func (a *app) connNote(line string) {
	if f := a.note.Load(); f != nil {
		(*f)(a.now().Format(time.TimeOnly) + " " + line)
	}
}

// Run runs the sluice command line with args (without the program name) and
// returns the exit code.
func Run(ctx context.Context, args []string, s Streams, version string) int {
	return run(ctx, args, s, version, time.Now)
}

// run is Run with the clock the commands read ages and times from: tests
// fix it, so that an age printed in seconds does not depend on how long
// the command took.
func run(ctx context.Context, args []string, s Streams, version string, now func() time.Time) int {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	a := &app{streams: s, version: version, now: now, stop: stop}
	err := a.execute(ctx, args, nil)
	if err == nil {
		return 0
	}
	code := 1
	var ee *ExitError
	// An error may echo what the user typed or the store holds (a name, a
	// registry key): contract.Escape writes its control characters as
	// visible escapes, so that it cannot drive the terminal.
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(s.Err, "error: %s\n", contract.Escape(ee.Err.Error()))
		}
		code = ee.Code
	} else {
		fmt.Fprintf(s.Err, "error: %s\n", contract.Escape(err.Error()))
	}
	if code == 1 && a.failCode != 0 {
		return a.failCode
	}
	return code
}

// execute runs args as a command of a; pin, when set, runs once the flags
// are registered (and hold their defaults), so that it can fix what no
// flag given may change. An error says which permission the server refused.
func (a *app) execute(ctx context.Context, args []string, pin func()) error {
	root := a.rootCommand()
	if pin != nil {
		pin()
	}
	root.SetArgs(args)
	root.SetOut(a.streams.Out)
	root.SetErr(a.streams.Err)
	err := root.ExecuteContext(ctx)
	if d := a.denied.Load(); d != nil {
		// The server refused a publish or subscription. It says so on the
		// side, not in answer to the request, so the command saw only its
		// context end (`events` then ends as if caught up): the refusal is
		// the error.
		err = refusal(*d)
	}
	return err
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Roll network configuration out across a fleet, a few nodes at a time",
		Long: `sluice rolls network intents (VLAN/VXLAN networks, VRF route leaking, routing
tables) out across a fleet a few nodes at a time, reverts when a node fails its
health checks, and remembers the bad config.

Start everything locally with 'sluice dev' (or 'make run'), then:
  sluice get nodes
  sluice apply -f examples/
  sluice rollout status --watch`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version, as 'sluice version' prints it.
		Version: a.version,
	}
	root.SetVersionTemplate("sluice {{.Version}}\n")
	// A flag that does not parse is a usage error, like any other.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: ExitUsage, Err: err} })
	server := os.Getenv("SLUICE_NATS_URL")
	if server == "" {
		server = DefaultServer
	}
	root.PersistentFlags().StringVarP(&a.server, "server", "s", server, "NATS URL of the sluice control plane (env SLUICE_NATS_URL)")
	a.auth.Register(root.PersistentFlags())
	root.AddCommand(
		a.applyCommand(),
		a.deleteCommand(),
		a.diffCommand(),
		a.verifyCommand(),
		a.getCommand(),
		a.describeCommand(),
		a.freezeCommand(),
		a.rolloutCommand(),
		a.fingerprintCommand(),
		a.pauseCommand(),
		a.resumeCommand(),
		a.reaperCommand(),
		a.recoverCommand(),
		a.backupCommand(),
		a.restoreCommand(),
		a.registryCommand(),
		a.eventsCommand(),
		a.devCommand(),
		a.dashboardCommand(),
		a.credsCommand(),
		a.versionCommand(),
	)
	refuseUnknownSubcommands(root)
	a.addCompletions(root)
	return root
}

// refuseUnknownSubcommands makes a mistyped subcommand (`sluice aply`,
// `sluice rollout statsu`) a usage error (exit 2) with suggestions, or the
// group's commands when none is close (`sluice rollout promote`); cobra
// would print a group's help and exit 0, and fail the root's with exit 1. A
// group given no subcommand prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	if !c.HasParent() {
		// cobra refuses an unknown subcommand of the root itself, as a
		// plain error (exit 1): take the arguments, and refuse it here.
		c.Args = cobra.ArbitraryArgs
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets for the root only
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
		} else {
			// Nothing close (`sluice rollout promote`): the commands there are.
			msg += "\n\n" + cmd.CommandPath() + " has: " + strings.Join(subcommandNames(cmd), ", ") + "\n"
		}
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s\nRun '%s --help' for usage", msg, cmd.CommandPath())}
	}
}

// subcommandNames are c's available subcommands, as help lists them.
func subcommandNames(c *cobra.Command) []string {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return names
}

// connect opens a connection to the control plane, saying what to do when
// nothing listens.
// composeServers is every NATS server docker-compose publishes on this
// host (docker-compose.yaml): nats-1, nats-2, nats-3.
const composeServers = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"

// clusterHint says, after "cannot reach NATS at URL", how to name every
// server of a cluster when url names one: the CLI fails over only among the
// servers it is given.
func clusterHint(url string) string {
	if strings.Contains(url, ",") {
		return ""
	}
	return "\nwith a NATS cluster (docker-compose's, helm's), name every server, comma-separated, so that one down is not the end: " +
		"--server or SLUICE_NATS_URL=" + composeServers + " for docker-compose"
}

// startHint says, after "cannot reach NATS at URL", what to start: sluice
// dev for one server (or, under docker-compose, nats-1: the one the default
// URL reaches), the cluster for several (none of which answered).
func startHint(url string) string {
	if n := strings.Count(url, ",") + 1; n > 1 {
		return fmt.Sprintf("none of its %d servers answers: is the cluster up (docker-compose ps; sluice dev --nats-cluster 3)?", n)
	}
	return "is `sluice dev` (make run) running? Under docker-compose this is nats-1 alone: is it up (docker-compose ps)?"
}

func (a *app) connect() (*nats.Conn, error) {
	auth, err := a.auth.NATS()
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if natsauth.IsPermissionViolation(err) {
			a.denied.CompareAndSwap(nil, &err)
			if a.stop != nil {
				a.stop(err)
			}
		}
	})
	// A watch is silent while its connection moves to another server (a
	// server of the cluster stopped): say so, so a CI log explains the gap.
	moves := []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				a.connNote(fmt.Sprintf("lost the connection to NATS (%v); reconnecting", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { a.connNote("reconnected to NATS at " + nc.ConnectedUrlRedacted()) }),
	}
	nc, err := nats.Connect(a.server, append(append([]nats.Option{nats.Name("sluice-cli"), nats.Timeout(3 * time.Second), onErr}, moves...), auth...)...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			return nil, fmt.Errorf("cannot reach NATS at %s: %s (%w)%s", a.server, startHint(a.server), err, clusterHint(a.server))
		}
		if hint := natsauth.ConnectHint(err); hint != "" {
			return nil, fmt.Errorf("connect to NATS at %s: %w\n%s", a.server, err, hint)
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w", a.server, err)
	}
	return nc, nil
}

// refusal is the error of a command whose publish or subscription the
// server refused (err, as the connection's error handler got it): what was
// refused, and which of the CLI's roles may do it.
func refusal(err error) error {
	verb, subject, roles, ok := creds.RolesAllowed(err)
	if !ok {
		return fmt.Errorf("the NATS server refused it: %w (these credentials' role may not do this: see docs/security.md)", err)
	}
	var cli []string
	for _, r := range roles {
		if r == creds.RoleAdmin || r == creds.RoleReadOnly {
			cli = append(cli, r)
		}
	}
	who := "no role the CLI is issued may do it"
	switch {
	case len(cli) > 0:
		who = "the " + strings.Join(cli, " or the ") + " role may (sluice creds issue " + cli[0] + ")"
	case len(roles) > 0:
		who = "only the " + strings.Join(roles, ", ") + " role may, not a role of the CLI's"
	}
	return fmt.Errorf("the NATS server refused it: these credentials may not %s to %q; %s (docs/security.md)", verb, subject, who)
}

// jetStream connects and returns a JetStream context; close the conn when done.
func (a *app) jetStream() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := a.connect()
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// session is one command's connection to the control plane: the
// connection, its JetStream context and the buckets the command bound
// (bind). Close it when done.
type session struct {
	nc *nats.Conn
	js jetstream.JetStream
	kv map[string]jetstream.KeyValue // by bucket name
}

// Close closes the connection.
func (s *session) Close() { s.nc.Close() }

// bind connects and binds the buckets named (bucket: a missing one is
// explained), the preamble of every command that reads or writes state.
func (a *app) bind(ctx context.Context, buckets ...string) (*session, error) {
	nc, js, err := a.jetStream()
	if err != nil {
		return nil, err
	}
	s := &session{nc: nc, js: js, kv: map[string]jetstream.KeyValue{}}
	for _, name := range buckets {
		kv, err := bucket(ctx, js, name)
		if err != nil {
			nc.Close()
			return nil, err
		}
		s.kv[name] = kv
	}
	return s, nil
}

// bucket opens one sluice bucket, explaining a missing one.
func bucket(ctx context.Context, js jetstream.KeyValueManager, name string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, fmt.Errorf("bucket %s does not exist: no sluice service has started on this server yet (start them, or run `sluice dev`)", name)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrJetStreamNotEnabled):
		return nil, fmt.Errorf("open bucket %s: JetStream is not enabled on this NATS server: %w", name, err)
	case err != nil:
		return nil, fmt.Errorf("open bucket %s: %w", name, err)
	}
	return kv, nil
}
