package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Registries (docs/registries.md) are sources of intents the configurator
// syncs besides its own API: an operator stores a RegistrySpec in
// control/registry.<name>, the configurator reports each sync in
// registries/<name>, and a mass deletion it holds waits for
// control/registry.<name>.confirm.

func (a *app) registryCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Add, remove and confirm the registries the configurator syncs intents from",
		Long: `Besides 'sluice apply' (the built-in source "api"), the configurator syncs
intents from registries: a Redis server (one intent per key), a directory
of intent files (a GitOps checkout) or a branch of a Git repository. Every intent a registry brings is
stored with the registry's name as its source, and only that registry
changes it. 'sluice get registries' shows how each one's syncs go.`,
	}
	cmd.AddCommand(a.registryAddCommand(), a.registryRemoveCommand(), a.registryConfirmCommand())
	return cmd
}

func (a *app) registryAddCommand() *cobra.Command {
	var o registryspec.Options
	var update bool
	cmd := &cobra.Command{
		Use:   "add NAME (--redis URL [--prefix P] [--password-file F] [--ca-file F] | --dir PATH | (--git URL [--git-token-file F] [--ca-file F] [--git-ssh-key-file F --git-known-hosts F] | --git-dir DIR) [--branch B] [--path P] [--require-signed F] | --kubernetes [--kubeconfig F] [--namespace NS] [--kinds K,...])",
		Short: "Have the configurator sync intents from a Redis server, a directory, a Git branch or Kubernetes custom resources",
		Long: `Store a registry's spec in sluice-control/registry.NAME; the configurator
starts syncing it within a few seconds.

--redis reads one intent per key: PREFIX<kind>.<name> (for example
sluice:intents:layer2network.tenant-a) holds that intent as YAML or JSON,
in the format of 'sluice apply -f'. A password in the URL is refused: it
would be readable in the control bucket; give --password-file, a file the
configurator reads. rediss:// connects with TLS (--ca-file: the CA bundle).

--dir reads the *.yaml, *.yml and *.json files in a directory, as
'sluice apply -f DIR' does, and watches it. The path is on the
configurator's host; a relative one is made absolute against the current
directory.

--git follows a branch (--branch, default main) of a repository: an
https://, http:// or ssh:// URL of a Git server, or an scp-like
[user@]host:path (git@git.example.net:net/intents.git), which the
configurator fetches into a bare clone in its cache (--git-cache) at each
sync, or a file:// URL of a repository on the configurator's host, read in
place. As git reads it, a location is scp-like when it has a colon and no
slash before its first colon; anything else that is not a URL is a local
path (/srv/git/net:v2.git too), made absolute and stored as file://; --git-dir
names one on the configurator's host by its directory (a working tree or a
git directory, bare or not). At each sync the files directly in --path
(default: the repository's root) at the branch's head commit are read as
'sluice apply -f DIR' reads a directory; a working tree is never read. A
fetch that fails is unreachable: nothing changes. A branch rewound to an
older commit or rewritten (a force-push) is held, naming both commits:
nothing is synced from it until it descends from the commit in force
again, or the registry is added again with --update (which accepts the
branch as it is).

A server that asks for credentials takes an access token from
--git-token-file, a file on the configurator's host read at each fetch,
sent as HTTP basic auth (the URL's user, default x-access-token, and the
token as password); a password in the URL is refused, and the URL's user
is never shown. --ca-file: the CA bundle of an https:// server. An
ssh:// or scp-like server takes the private key in --git-ssh-key-file (unencrypted;
user: the URL's, default git), and its host key is checked against
--git-known-hosts (a known_hosts file); both are required.

--require-signed names a file of allowed keys on the configurator's host
(read at each sync): ASCII-armored OpenPGP public keys (gpg --export
--armor), or else an SSH allowed_signers file. A head commit that is
unsigned, signed by a key not in it (or in the other format), by an
expired or revoked key, or badly signed is held, naming the commit and
why; the intents in force stay until a commit signed by an allowed key
(git commit -S) is on the branch. A file holding a private key, no key,
or that does not parse is refused when this host can read it.

--kubernetes lists custom resources on a Kubernetes API server:
das-schiff-network-operator's Layer2NetworkConfiguration and
VRFRouteConfiguration (group network.t-caas.telekom.com), each mapped field
by field to an intent named as the resource (docs/registries.md has the
mapping), or with --kinds sluice's own Layer2Network, VRFRoute and
RoutingTable (group sluice.dev, namespaced; CRDs in the chart, spec as in
'sluice apply -f'; --namespace: only one namespace's). Every kind read
needs its CRD installed. The configurator reaches the server with --kubeconfig (a file
on its host, read at each sync; default: its pod's ServiceAccount) and
needs list and watch on those resources. A list that fails (unreachable,
forbidden, a CRD not installed) is unreachable: nothing changes. A field
sluice has no meaning for yet is reported in 'sluice get registries' and
the intent goes ahead without it; a resource whose fields cannot be
carried without widening it (a nodeSelector's matchExpressions, a deny
prefix item) is refused there, its last valid version staying in force.
Resources' status is not written.

A sync that would mark more than --hold-share of the registry's intents for
deletion (or an answer with no intent at all) marks nothing and waits for
'sluice registry confirm NAME'.

The spec is checked before anything is stored: a bad one is printed with
its field and the exit code is 1. An existing registry is replaced only
with --update.`,
		Example: `  sluice registry add tenants --redis redis://10.0.0.5:6379/0 --password-file /etc/sluice/redis-password
  sluice registry add gitops --dir /srv/gitops/intents --sync-interval 1m
  sluice registry add gitops --dir /srv/gitops/intents --hold-share 0.2 --update
  sluice registry add network --git file:///srv/git/network.git --branch main --path intents
  sluice registry add network --git https://git.example.net/net/intents.git --git-token-file /etc/sluice/git-token --path intents
  sluice registry add network --git git@git.example.net:net/intents.git --git-ssh-key-file /etc/sluice/deploy-key --git-known-hosts /etc/sluice/known_hosts
  sluice registry add das-schiff --kubernetes --kubeconfig /etc/sluice/kubeconfig`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRegistryFlags(o); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			return a.registryAdd(cmd.Context(), args[0], o, update)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Redis, "redis", "", "redis://[user@]host:port/db (or rediss:// for TLS) to read intents from")
	f.StringVar(&o.Prefix, "prefix", "", "with --redis: the prefix of the intents' keys (default "+registry.DefaultRedisPrefix+")")
	f.StringVar(&o.PasswordFile, "password-file", "", "with --redis: the absolute path of a file on the configurator's host holding the password")
	f.StringVar(&o.CAFile, "ca-file", "", "with --redis rediss:// or --git https://: the absolute path of a PEM CA bundle on the configurator's host (default: system roots)")
	f.StringVar(&o.Dir, "dir", "", "a directory of intent files on the configurator's host (made absolute)")
	f.StringVar(&o.Git, "git", "", "the Git repository whose branch is followed: https://, http://, ssh:// or scp-like user@host:path of a server; file:// or a path on the configurator's host")
	f.StringVar(&o.GitSSHKeyFile, "git-ssh-key-file", "", "with --git ssh:// or user@host:path: the absolute path of an unencrypted private key on the configurator's host that authenticates to the server")
	f.StringVar(&o.GitKnownHosts, "git-known-hosts", "", "with --git ssh:// or user@host:path: the absolute path of a known_hosts file on the configurator's host holding the server's host key")
	f.StringVar(&o.GitTokenFile, "git-token-file", "", "with --git https://: the absolute path of a file on the configurator's host holding an access token")
	f.StringVar(&o.GitDir, "git-dir", "", "a Git repository's directory on the configurator's host (working tree or git directory; made absolute)")
	f.StringVar(&o.Branch, "branch", "", "with --git or --git-dir: the branch followed (default "+registry.DefaultGitBranch+")")
	f.StringVar(&o.RequireSigned, "require-signed", "", "with --git or --git-dir: the absolute path of a file of allowed keys on the configurator's host (armored OpenPGP public keys, or an SSH allowed_signers file); a head commit not signed by a key of it is held")
	f.StringVar(&o.Path, "path", "", "with --git or --git-dir: the directory inside the repository holding the intent files (default: its root)")
	f.BoolVar(&o.Kubernetes, "kubernetes", false, "read intents from custom resources on a Kubernetes API server (das-schiff-network-operator's Layer2NetworkConfiguration and VRFRouteConfiguration)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "with --kubernetes: a kubeconfig file on the configurator's host, its current context used (made absolute; default: the configurator's in-cluster ServiceAccount)")
	f.StringVar(&o.Namespace, "namespace", "", "with --kubernetes: the namespace of namespaced kinds (default: every namespace)")
	f.StringSliceVar(&o.KubeKinds, "kinds", nil, "with --kubernetes: the kinds read, of "+strings.Join(registry.KubeKinds(), ", ")+" (default: "+strings.Join(registry.DefaultKubeKinds(), ", ")+")")
	f.BoolVar(&o.Poll, "poll", false, "with --dir: read it every sync interval, never watch it (for NFS or CIFS, where inotify misses other hosts' changes)")
	f.DurationVar(&o.SyncInterval, "sync-interval", 0, fmt.Sprintf("how often it is read when it announced no change (default %s)", registry.DefaultSyncInterval))
	f.Float64Var(&o.HoldShare, "hold-share", 0, fmt.Sprintf("the share (0-1) of its intents one sync may mark for deletion without 'sluice registry confirm' (default %v)", registry.DefaultHoldShare))
	f.BoolVar(&update, "update", false, "replace the registry if it exists")
	return cmd
}

// checkRegistryFlags is the usage error of registry add's source flags.
func checkRegistryFlags(o registryspec.Options) error {
	var sources []string
	kube := map[bool]string{true: "--kubernetes"}[o.Kubernetes]
	for _, f := range []struct{ flag, value string }{{"--redis", o.Redis}, {"--dir", o.Dir}, {"--git", o.Git}, {"--git-dir", o.GitDir}, {"--kubernetes", kube}} {
		if f.value != "" {
			sources = append(sources, f.flag)
		}
	}
	redis, git := o.Redis != "", o.Git != "" || o.GitDir != ""
	switch {
	case len(sources) > 1:
		return fmt.Errorf("give one of --redis, --dir, --git, --git-dir and --kubernetes, not %s", strings.Join(sources, " and "))
	case len(sources) == 0:
		return errors.New("say where the registry reads: --redis URL, --dir PATH, --git URL, --git-dir DIR or --kubernetes")
	case !o.Kubernetes && (o.Kubeconfig != "" || o.Namespace != "" || len(o.KubeKinds) > 0):
		return fmt.Errorf("--kubeconfig, --namespace and --kinds go with --kubernetes, not %s", sources[0])
	case !redis && (o.Prefix != "" || o.PasswordFile != ""):
		return fmt.Errorf("--prefix and --password-file go with --redis, not %s", sources[0])
	case o.CAFile != "" && !redis && o.Git == "":
		return fmt.Errorf("--ca-file goes with --redis or --git, not %s", sources[0])
	case o.GitTokenFile != "" && o.Git == "":
		return fmt.Errorf("--git-token-file goes with --git, not %s", sources[0])
	case (o.GitSSHKeyFile != "" || o.GitKnownHosts != "") && o.Git == "":
		return fmt.Errorf("--git-ssh-key-file and --git-known-hosts go with --git, not %s", sources[0])
	case o.Poll && o.Dir == "":
		return fmt.Errorf("--poll goes with --dir, not %s: it is read every sync interval and on its change notices", sources[0])
	case !git && (o.Branch != "" || o.Path != "" || o.RequireSigned != ""):
		return fmt.Errorf("--branch, --path and --require-signed go with --git or --git-dir, not %s", sources[0])
	}
	return nil
}

func (a *app) registryAdd(ctx context.Context, name string, o registryspec.Options, update bool) error {
	spec, err := registryspec.Build(name, o, operator(), a.now())
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("%s; nothing was stored", specFlags.Replace(err.Error()))}
	}
	if err := checkSignersFile(o.RequireSigned); err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("%w; nothing was stored", err)}
	}
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	controlKV := sn.kv[contract.BucketControl]
	replaced, err := registryspec.Put(ctx, controlKV, spec, update)
	switch {
	case errors.Is(err, registryspec.ErrExists):
		return &ExitError{Code: 1, Err: fmt.Errorf("%w: pass --update to replace it, or 'sluice registry remove %s' first", err, name)}
	case err != nil:
		return err
	}
	verb := "stored"
	if replaced {
		verb = "replaced"
	}
	fmt.Fprintf(a.streams.Out, "%s registry %s in %s/%s:\n", verb, name, contract.BucketControl, contract.RegistryKey(name))
	describeSpec(a.streams.Out, spec)
	fmt.Fprintln(a.streams.Out, "the configurator syncs it within a few seconds: sluice get registries")
	return nil
}

// describeSpec writes what a stored spec asks for, one aspect per line.
func describeSpec(w io.Writer, spec *sluicev1.RegistrySpec) {
	switch src := spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		r := src.Redis
		fmt.Fprintf(w, "  redis       %s, one intent per key %s<kind>.<name>\n", r.GetUrl(), cmp.Or(r.GetPrefix(), registry.DefaultRedisPrefix))
		if r.GetPasswordFile() != "" {
			fmt.Fprintf(w, "  password    read from %s on the configurator's host\n", r.GetPasswordFile())
		}
		if r.GetCaFile() != "" {
			fmt.Fprintf(w, "  CA bundle   %s on the configurator's host\n", r.GetCaFile())
		}
	case *sluicev1.RegistrySpec_Directory:
		fmt.Fprintf(w, "  directory   %s on the configurator's host (*.yaml, *.yml, *.json)\n", src.Directory.GetPath())
	case *sluicev1.RegistrySpec_Git:
		g := src.Git
		if registry.IsRemoteGitURL(g.GetUrl()) {
			fmt.Fprintf(w, "  git         %s, branch %s, fetched into the configurator's cache\n", registry.ShownURL(g.GetUrl()), cmp.Or(g.GetBranch(), registry.DefaultGitBranch))
		} else {
			fmt.Fprintf(w, "  git         %s on the configurator's host, branch %s\n", cmp.Or(g.GetUrl(), g.GetDir()), cmp.Or(g.GetBranch(), registry.DefaultGitBranch))
		}
		if g.GetTokenFile() != "" {
			fmt.Fprintf(w, "  token       read from %s on the configurator's host\n", g.GetTokenFile())
		}
		if g.GetCaFile() != "" {
			fmt.Fprintf(w, "  CA bundle   %s on the configurator's host\n", g.GetCaFile())
		}
		if g.GetSshKeyFile() != "" {
			fmt.Fprintf(w, "  ssh key     read from %s on the configurator's host; host key checked against %s\n", g.GetSshKeyFile(), g.GetKnownHostsFile())
		}
		if f := g.GetAllowedSignersFile(); f != "" {
			fmt.Fprintf(w, "  signed      a head commit not signed by a key of %s (on the configurator's host) is held\n", f)
		}
		fmt.Fprintf(w, "  path        %s at the branch's head commit (*.yaml, *.yml, *.json)\n", cmp.Or(g.GetPath(), "the repository's root"))
	case *sluicev1.RegistrySpec_Kubernetes:
		k := src.Kubernetes
		if k.GetKubeconfig() == "" {
			fmt.Fprintln(w, "  kubernetes  the configurator's in-cluster ServiceAccount")
		} else {
			fmt.Fprintf(w, "  kubernetes  the current context of %s on the configurator's host\n", k.GetKubeconfig())
		}
		kinds := k.GetKinds()
		if len(kinds) == 0 {
			kinds = registry.DefaultKubeKinds()
		}
		ns := ""
		if k.GetNamespace() != "" {
			ns = " (namespaced kinds: in namespace " + k.GetNamespace() + ")"
		}
		fmt.Fprintf(w, "  kinds       %s%s; a resource's status is not written\n", strings.Join(kinds, ", "), ns)
	}
	fmt.Fprintf(w, "  sync        every %s, and sooner when it announces a change\n", registry.SyncInterval(spec))
	fmt.Fprintf(w, "  hold        a sync marking more than %v of its intents for deletion waits for 'sluice registry confirm %s'\n",
		registry.HoldShare(spec), spec.GetName())
}

func (a *app) registryRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Stop syncing a registry; its intents stay in force",
		Long: `Delete sluice-control/registry.NAME (and a confirmation stored for it): the
configurator stops syncing the registry.

Its intents stay stored and in force: nothing is rolled out because a
registry was removed. Their source still names the registry, so no sync
changes them any more; 'sluice apply' can take one over (its source becomes
"api"), or 'sluice delete' removes it. Exit 0 when removed, 1 when there is
no such registry.`,
		Example: "  sluice registry remove gitops",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.registryRemove(cmd.Context(), args[0])
		},
	}
}

func (a *app) registryRemove(ctx context.Context, name string) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, controlKV := sn.js, sn.kv[contract.BucketControl]
	specs := store.New(controlKV, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	cur, err := specs.Get(ctx, contract.RegistryKey(name))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &ExitError{Code: 1, Err: fmt.Errorf("registry %s does not exist: nothing to remove (sluice get registries lists them)", name)}
	case err != nil && !undecodable(err): // an undecodable spec can be removed
		return fmt.Errorf("read registry %s: %w", name, err)
	}
	intents, _, err := list(ctx, js, contract.BucketIntents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	if err != nil {
		return err
	}
	if err := deleteKey(ctx, specs, contract.RegistryKey(name), cur.Revision); err != nil {
		return err
	}
	confirms := store.New(controlKV, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
	if c, err := confirms.Get(ctx, contract.RegistryConfirmKey(name)); err == nil || undecodable(err) {
		if err := deleteKey(ctx, confirms, contract.RegistryConfirmKey(name), c.Revision); err != nil {
			return err
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read registry %s's confirmation: %w", name, err)
	}
	n := 0
	for _, si := range intents {
		if si.GetSource() == name && !si.GetMarkedForDeletion() {
			n++
		}
	}
	fmt.Fprintf(a.streams.Out, "removed registry %s: the configurator stops syncing it\n", name)
	fmt.Fprintf(a.streams.Out, "its %d intent(s) stay stored and in force with source %s: 'sluice apply' takes one over, 'sluice delete' removes it\n", n, name)
	return nil
}

// deleteKey deletes control key if it is still at revision rev.
func deleteKey[T proto.Message](ctx context.Context, st *store.Store[T], key string, rev uint64) error {
	if err := st.Delete(ctx, key, rev); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%s/%s changed while it was being deleted; look at it (sluice get registries) and run again: %w", contract.BucketControl, key, err)
		}
		return fmt.Errorf("delete %s/%s: %w", contract.BucketControl, key, err)
	}
	return nil
}

func (a *app) registryConfirmCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "confirm NAME [--reason TEXT]",
		Short: "Let a registry's held or pending deletion go ahead now",
		Long: `When one sync of a registry would mark more of its intents for deletion than
its hold share allows (or the registry answers with no intent at all), the
configurator marks nothing and holds the deletion: an emptied Redis or a
bad checkout looks like that. A smaller deletion is pending: an intent
missing from the registry's answers is marked only once every answer has
lacked it for the settle period (the configurator's
--registry-delete-after), as a recovering source answers partially.
'sluice get registries' shows what is held or pending.

If the deletion is meant, confirm it: the confirmation names the held (or
else the pending) deletion's digest and is stored in
sluice-control/registry.NAME.confirm; the configurator then marks those
intents for deletion at its next sync, at once (the reaper removes them
later). If the registry's content changes meanwhile, the digest no longer
matches and nothing is marked on it. Exit 0 when stored, 1 when the
registry holds no deletion and has none pending.`,
		Example: "  sluice registry confirm gitops --reason 'tenant-b and tenant-c decommissioned'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.registryConfirm(cmd.Context(), args[0], reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the confirmation")
	return cmd
}

func (a *app) registryConfirm(ctx context.Context, name, reason string) error {
	sn, err := a.bind(ctx, contract.BucketControl)
	if err != nil {
		return err
	}
	defer sn.Close()
	js, controlKV := sn.js, sn.kv[contract.BucketControl]
	spec, bad, err := getOne(ctx, js, contract.BucketControl, contract.RegistryKey(name), func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	switch {
	case err != nil:
		return err
	case spec == nil && len(bad) == 0:
		return &ExitError{Code: 1, Err: fmt.Errorf("registry %s does not exist: nothing to confirm (sluice get registries lists them)", name)}
	}
	status, bad, err := getOne(ctx, js, contract.BucketRegistries, name, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} })
	switch {
	case err != nil:
		return err
	case len(bad) > 0:
		return &ExitError{Code: 1, Err: fmt.Errorf("the status of registry %s does not decode (%s): the configurator rewrites it at its next sync; try again then", name, bad[0].Reason)}
	}
	// A held deletion, or else the pending one: a hold empties the pending
	// set, so the status never shows both.
	what, digest, ids := "held", status.GetHeld().GetDigest(), status.GetHeld().GetIntents()
	if len(ids) == 0 && len(status.GetPending()) > 0 {
		what, digest, ids = "pending", status.GetPendingDigest(), nil
		for _, p := range status.GetPending() {
			ids = append(ids, p.GetIntent())
		}
	}
	if len(ids) == 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("registry %s holds no deletion and has none pending: nothing to confirm", name)}
	}
	req := &sluicev1.RegistryConfirm{Digest: digest, By: operator(), At: timestamppb.New(a.now()), Reason: reason}
	if err := putRequest(ctx, store.New(controlKV, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} }), contract.RegistryConfirmKey(name), req); err != nil {
		return err
	}
	fmt.Fprintf(a.streams.Out, "confirmed registry %s's %s deletion of %d intent(s) (digest %s): %s\n",
		name, what, len(ids), shortN(digest, 12), listSome(ids, 10))
	fmt.Fprintln(a.streams.Out, "the configurator marks them for deletion at its next sync (at once: it watches for confirmations); the reaper removes them once no revision in use refers to them")
	return nil
}

// listSome joins the first most items, saying how many more there are.
func listSome(items []string, most int) string {
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// checkSignersFile refuses a --require-signed file that holds a private
// key, no key, or does not parse, when it can be read here. The file is
// the configurator's, on its host: one this host cannot read is left to
// the sync, which makes the registry unreachable if it is not right.
func checkSignersFile(file string) error {
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	if err := registry.CheckAllowedKeys(data); err != nil {
		return fmt.Errorf("--require-signed %s: %w", file, err)
	}
	return nil
}

// specFlags names the flags of `registry add` for the fields of a registry
// spec that the spec's checks name (they check stored specs too, where the
// field names are right).
var specFlags = strings.NewReplacer(
	"redis.url", "--redis",
	"redis.password_file", "--password-file",
	"redis.ca_file", "--ca-file",
	"leave ca_file empty", "leave out --ca-file",
	"redis.prefix", "--prefix",
	"directory.path", "--dir",
	"git.token_file", "--git-token-file",
	"git.allowed_signers_file", "--require-signed",
	"git.ssh_key_file", "--git-ssh-key-file",
	"git.known_hosts_file", "--git-known-hosts",
	"git.ca_file", "--ca-file",
	"git.url", "--git",
	"git.dir", "--git-dir",
	"git.branch", "--branch",
	"git.path", "--path",
	"kubernetes.kubeconfig", "--kubeconfig",
	"kubernetes.namespace", "--namespace",
	"kubernetes.kinds", "--kinds",
	"git: give git.url or git.dir", "give --git or --git-dir",
	"sync_interval", "--sync-interval",
	"hold_share", "--hold-share",
	"name:", "NAME:",
)
