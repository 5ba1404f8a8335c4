package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/natsauth"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// EnvCredsDir sets the default of `sluice creds --dir`.
const EnvCredsDir = "SLUICE_CREDS_DIR"

// EventNodeRevoked records that `sluice creds revoke` cut a node off and
// deleted its presence: the node left the fleet.
const EventNodeRevoked = "NodeRevoked"

func (a *app) credsCommand() *cobra.Command {
	dir := os.Getenv(EnvCredsDir)
	if dir == "" {
		dir = "sluice-creds"
	}
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "Issue and revoke NATS credentials for sluice's roles and nodes",
		Long: `sluice authenticates with NATS's decentralized JWT auth: an operator, a
system account, and the sluice account with one scoped signing key per role.
A role's key can only issue users with that role's permissions: a node user
reads only its own desired config, writes only its own status and presence,
and publishes only its own events (docs/security.md has every role's subjects).

The directory holds the operator's and the accounts' seeds: keep it on an
operator's machine or in a secret store, never on the nodes. Give nats-server
its server.conf (include it), and each component its users/<name>.creds.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "the credentials directory (env "+EnvCredsDir+")")
	cmd.AddCommand(a.credsInitCommand(&dir), a.credsIssueCommand(&dir), a.credsListCommand(&dir),
		a.credsRevokeCommand(&dir), a.credsPushCommand(&dir), a.credsTLSCommand(&dir))
	return cmd
}

func (a *app) credsInitCommand(dir *string) *cobra.Command {
	var resolverDir string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the operator, the accounts and the roles' signing keys",
		Long: `Creates, in --dir (which must not hold an operator yet): the operator, the
system account with a user to push account updates (system.creds), the
sluice account with one scoped signing key per role, and server.conf, the
nats-server configuration to include: the operator, the system account and
a full resolver storing account JWTs in --resolver-dir.`,
		Example: "  sluice creds init --dir ./sluice-creds\n  sluice creds issue coordinator --dir ./sluice-creds",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := creds.Init(*dir, creds.InitOptions{ResolverDir: resolverDir})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.streams.Out, "created operator, system account and account %s (%s) in %s\n", creds.AccountName, s.AccountPublicKey(), *dir)
			fmt.Fprintf(a.streams.Out, "nats-server: include %s (resolver dir %s)\n", filepath.Join(*dir, "server.conf"), cmp.Or(resolverDir, "/data/jwt"))
			fmt.Fprintf(a.streams.Out, "next: sluice creds issue ROLE [--node NAME] --dir %s  (roles: %s)\n", *dir, strings.Join(creds.Roles, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&resolverDir, "resolver-dir", "", "where nats-server keeps account JWTs (default /data/jwt, beside the images' JetStream store)")
	return cmd
}

func (a *app) credsIssueCommand(dir *string) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "issue ROLE [--node NAME]",
		Short: "Issue a user: " + strings.Join(creds.Roles, ", "),
		Long: `Issues a user of ROLE and writes its credentials file to --dir/users/
(printed). Roles: configurator, coordinator, reaper (the services), admin
(the CLI: everything but the leader lease), readonly (the CLI's get, events
and rollout status), node (one agent, --node names it). Give the file to the
component with --creds (env SLUICE_NATS_CREDS) or, for an agent, in its
config file under nats.creds.`,
		Example: "  sluice creds issue node --node node-01\n  sluice creds issue readonly",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := creds.Load(*dir)
			if err != nil {
				return err
			}
			path, err := s.Issue(args[0], node)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			fmt.Fprintln(a.streams.Out, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "the node, for role node")
	return cmd
}

func (a *app) credsListCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the users issued, and which are revoked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := creds.Load(*dir)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tROLE\tNODE\tISSUED\tREVOKED\tKEY")
			for _, u := range s.Users {
				revoked := "-"
				if !u.RevokedAt.IsZero() {
					revoked = u.RevokedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, cmp.Or(u.Node, "-"), u.IssuedAt.Format(time.RFC3339), revoked, u.PublicKey)
			}
			return w.Flush()
		},
	}
}

func (a *app) credsRevokeCommand(dir *string) *cobra.Command {
	var noPush bool
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a user, or every user of a node, at once",
		Long: `Revokes the user NAME, or every user issued for the node NAME, in the sluice
account, and pushes the account to the NATS servers at --server (as the
system user, system.creds): they disconnect the revoked users at once and
refuse them from then on, without a restart. With --no-push only the
directory is updated; run 'sluice creds push' later. A revoked node's
agent can no longer renew its presence: once pushed, its presence key is
deleted (with the CLI's own credentials, --creds) and a NodeRevoked event
records it leaving, so it is not present at once rather than when its lease
ends (3m by default). Issue the node a new
user afterwards if it should come back (in a later second: a revocation
covers every user issued up to its second).`,
		Example: "  sluice creds revoke node-07 --server nats://nats-1:4222",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := creds.Load(*dir)
			if err != nil {
				return err
			}
			revoked, err := s.Revoke(args[0])
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			for _, u := range revoked {
				fmt.Fprintf(a.streams.Out, "revoked %s (role %s, key %s)\n", u.Name, u.Role, u.PublicKey)
			}
			if noPush {
				fmt.Fprintf(a.streams.Out, "not pushed: run `sluice creds push --dir %s` for the servers to apply it\n", *dir)
				return nil
			}
			if err := a.pushAccount(s, *dir); err != nil {
				return err
			}
			for _, node := range revokedNodes(revoked) {
				a.removePresence(cmd.Context(), node)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noPush, "no-push", false, "only update the directory; push later with 'sluice creds push'")
	return cmd
}

func (a *app) credsPushCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "push",
		Short: "Sign the sluice account again and push it (its revocations, this version's role permissions) to the NATS servers",
		Long: `Signs the sluice account again with this version's role permissions and the
revocations in --dir, and pushes it to the NATS servers at --server as the
system user. Run it after 'revoke --no-push', and after upgrading sluice to a
version whose roles may do more or less (docs/security.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := creds.Load(*dir)
			if err != nil {
				return err
			}
			if err := s.Resign(); err != nil {
				return err
			}
			return a.pushAccount(s, *dir)
		},
	}
}

// pushAccount connects to --server as the system user (with the TLS
// options given) and pushes the account.
func (a *app) pushAccount(s *creds.Setup, dir string) error {
	o := a.auth
	o.Creds, o.NKey, o.User, o.PasswordFile = s.SystemCreds(), "", "", ""
	opts, err := o.NATS()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(a.server, append([]nats.Option{nats.Name("sluice-creds"), nats.Timeout(3 * time.Second)}, opts...)...)
	if err != nil {
		return fmt.Errorf("connect to %s as the system user to push the account (the directory is updated; retry with `sluice creds push --dir %s`): %w", a.server, dir, err)
	}
	defer nc.Close()
	if err := s.Push(nc, 5*time.Second); err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("%w (is the server in operator mode with a full resolver, as server.conf configures?)", err)
		}
		return err
	}
	fmt.Fprintf(a.streams.Out, "pushed account %s to %s\n", s.AccountPublicKey(), a.server)
	return nil
}

func (a *app) credsTLSCommand(dir *string) *cobra.Command {
	var hosts []string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "tls --hosts NAME,...",
		Short: "Make a local CA and a certificate for the NATS servers",
		Long: `Makes a certificate authority in --dir/tls (once; ca.pem and ca.key are kept)
and a certificate for the NATS servers naming --hosts (DNS names and IP
addresses), for client connections and the cluster's routes: server.pem and
server.key. Clients trust it with --tls-ca DIR/tls/ca.pem. For a compose
stack or a lab; a production fleet's certificates come from its own PKI.`,
		Example: "  sluice creds tls --hosts nats-1,nats-2,nats-3,localhost,127.0.0.1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := creds.TLS(*dir, hosts, validFor)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			fmt.Fprintf(a.streams.Out, "CA %s\nserver certificate %s (key %s) for %s\n", f.CA, f.Cert, f.Key, strings.Join(hosts, ", "))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "the names and addresses clients reach the servers by (comma-separated)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the server certificate is valid")
	return cmd
}

// revokedNodes are the nodes whose users were revoked, sorted, each once.
func revokedNodes(users []creds.User) []string {
	var nodes []string
	for _, u := range users {
		if u.Node != "" && !slices.Contains(nodes, u.Node) {
			nodes = append(nodes, u.Node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// removePresence deletes a revoked node's presence key and records its
// leaving (NodeRevoked). Its agent, disconnected and refused, can no longer
// renew the key; without this the node would show present until its lease
// ran out. A failure is only reported: the revocation stands, and the lease
// ends it anyway.
func (a *app) removePresence(ctx context.Context, node string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	err := func() error {
		// A connection of its own: a permission refused here is reported
		// as a note, not as the command's failure (a.connect's handler
		// would end the command with it), since the revocation stands.
		auth, err := a.auth.NATS()
		if err != nil {
			return err
		}
		onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if natsauth.IsPermissionViolation(err) {
				refused(refusal(err))
			}
		})
		nc, err := nats.Connect(a.server, append([]nats.Option{nats.Name("sluice-cli"), nats.Timeout(3 * time.Second), onErr}, auth...)...)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		kv, err := bucket(ctx, js, contract.BucketNodes)
		if err != nil {
			return err
		}
		if err := kv.Delete(ctx, node); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
				err = cause
			}
			return fmt.Errorf("delete %s/%s: %w", contract.BucketNodes, node, err)
		}
		em := events.NewEmitter(js, zerolog.Nop(), contract.ComponentCLI, a.now)
		em.Emit(&sluicev1.Event{
			Kind: contract.KindNode, Id: node, Node: node, Type: EventNodeRevoked,
			Reason: "credentials revoked by " + operator() + ": presence deleted, the node has left the fleet (issue it new credentials to bring it back)",
		})
		em.Flush(ctx)
		return nil
	}()
	if err != nil {
		fmt.Fprintf(a.streams.Err, "note: could not remove %s's presence (%v): it shows present until its lease ends\n", node, err)
		return
	}
	fmt.Fprintf(a.streams.Out, "%s has left the fleet: presence deleted (event %s)\n", node, EventNodeRevoked)
}
