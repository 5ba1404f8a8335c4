package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The registry commands only touch the control bucket (and read the
// registries and intents buckets), so their tests run on bare buckets
// with no service that could change what the test writes.

func specs(env *natstest.Env) *store.Store[*sluicev1.RegistrySpec] {
	return store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
}

func confirms(env *natstest.Env) *store.Store[*sluicev1.RegistryConfirm] {
	return store.New(env.Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
}

// storedSpec reads control/registry.<name>; nil when there is none.
func storedSpec(t *testing.T, env *natstest.Env, name string) *sluicev1.RegistrySpec {
	t.Helper()
	e, err := specs(env).Get(context.Background(), contract.RegistryKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return e.Value
}

// writeStatus stores a registry's status as the configurator would.
func writeStatus(t *testing.T, env *natstest.Env, st *sluicev1.RegistryStatus) {
	t.Helper()
	statuses := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} })
	if _, err := statuses.Mutate(context.Background(), st.GetName(), func(*sluicev1.RegistryStatus) (*sluicev1.RegistryStatus, error) { return st, nil }); err != nil {
		t.Fatal(err)
	}
}

func TestRegistryAdd_StoresTheSpecItWasGiven(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "intents"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	tests := []struct {
		name string
		args []string
		want *sluicev1.RegistrySpec // without by and at
	}{
		{
			name: "redis", args: []string{"tenants", "--redis", "redis://ops@10.0.0.5:6379/2", "--prefix", "t:", "--password-file", "/etc/sluice/redis",
				"--sync-interval", "1m", "--hold-share", "0.2"},
			want: &sluicev1.RegistrySpec{Name: "tenants", SyncInterval: durationpb.New(time.Minute), HoldShare: 0.2,
				Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: "redis://ops@10.0.0.5:6379/2", Prefix: "t:", PasswordFile: "/etc/sluice/redis"}}},
		},
		{
			name: "relative directory made absolute", args: []string{"gitops", "--dir", "intents"},
			want: &sluicev1.RegistrySpec{Name: "gitops",
				Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: filepath.Join(work, "intents")}}},
		},
		{
			name: "git URL", args: []string{"network", "--git", "file:///srv/git/network.git", "--branch", "prod", "--path", "intents/"},
			want: &sluicev1.RegistrySpec{Name: "network",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "file:///srv/git/network.git", Branch: "prod", Path: "intents/"}}},
		},
		{
			name: "git server with a token", args: []string{"remote", "--git", "https://git.example/net/intents.git", "--git-token-file", "/etc/sluice/git-token",
				"--ca-file", "/etc/sluice/git-ca.pem", "--path", "intents", "--require-signed", "/etc/sluice/allowed_signers"},
			want: &sluicev1.RegistrySpec{Name: "remote",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "https://git.example/net/intents.git", Path: "intents",
					TokenFile: "/etc/sluice/git-token", CaFile: "/etc/sluice/git-ca.pem", AllowedSignersFile: "/etc/sluice/allowed_signers"}}},
		},
		{
			name: "git server over ssh", args: []string{"ssh", "--git", "ssh://git@git.example/net.git", "--git-ssh-key-file", "/etc/sluice/git-key", "--git-known-hosts", "/etc/sluice/known_hosts"},
			want: &sluicev1.RegistrySpec{Name: "ssh",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "ssh://git@git.example/net.git", SshKeyFile: "/etc/sluice/git-key", KnownHostsFile: "/etc/sluice/known_hosts"}}},
		},
		{
			name: "git server scp-like", args: []string{"scp", "--git", "git@git.example:net/intents.git", "--git-ssh-key-file", "/etc/sluice/git-key", "--git-known-hosts", "/etc/sluice/known_hosts"},
			want: &sluicev1.RegistrySpec{Name: "scp",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "git@git.example:net/intents.git", SshKeyFile: "/etc/sluice/git-key", KnownHostsFile: "/etc/sluice/known_hosts"}}},
		},
		{
			name: "git path with a colon made a file URL", args: []string{"colon", "--git", "/srv/git/net:v2.git"},
			want: &sluicev1.RegistrySpec{Name: "colon",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "file:///srv/git/net:v2.git"}}},
		},
		{
			name: "relative git path made a file URL", args: []string{"relative", "--git", "./intents"},
			want: &sluicev1.RegistrySpec{Name: "relative",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: "file://" + filepath.Join(work, "intents")}}},
		},
		{
			name: "relative git directory made absolute", args: []string{"local", "--git-dir", "intents"},
			want: &sluicev1.RegistrySpec{Name: "local",
				Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Dir: filepath.Join(work, "intents")}}},
		},
		{
			name: "kubernetes in-cluster", args: []string{"das-schiff", "--kubernetes"},
			want: &sluicev1.RegistrySpec{Name: "das-schiff",
				Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{}}},
		},
		{
			name: "kubernetes with a relative kubeconfig made absolute and one kind", args: []string{"l2", "--kubernetes", "--kubeconfig", "kube/config",
				"--kinds", "Layer2NetworkConfiguration"},
			want: &sluicev1.RegistrySpec{Name: "l2",
				Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{Kubeconfig: filepath.Join(work, "kube/config"),
					Kinds: []string{"Layer2NetworkConfiguration"}}}},
		},
		{
			name: "polled directory", args: []string{"nfs", "--dir", "intents", "--poll"},
			want: &sluicev1.RegistrySpec{Name: "nfs",
				Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: filepath.Join(work, "intents"), Poll: true}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, env.URL, append([]string{"registry", "add"}, tt.args...)...)
			if code != 0 || !strings.Contains(stdout, "stored registry "+tt.want.GetName()) ||
				!strings.Contains(stdout, "the configurator syncs it within a few seconds: sluice get registries") {
				t.Fatalf("registry add: exit %d\n%s%s", code, stdout, stderr)
			}
			got := storedSpec(t, env, tt.want.GetName())
			if got.GetBy() == "" || got.GetAt() == nil {
				t.Errorf("stored spec %v does not say who added it and when", got)
			}
			got.By, got.At = "", nil
			if !proto.Equal(got, tt.want) {
				t.Errorf("stored spec\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestRegistryAdd_BadSpec_PrintsTheFieldAndStoresNothing(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	dir := t.TempDir()
	// --require-signed files this host can read are checked at add.
	pgp := gittest.PGPKey(t, "Ada Admin <ada@example.net>", gittest.PGPOptions{})
	keyFile := func(name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret, none, garbled := keyFile("secret.asc", pgp.Secret(t)), keyFile("none.asc", "# nobody yet\n"),
		keyFile("garbled.asc", pgp.Public[:len(pgp.Public)/2])
	tests := []struct {
		name     string
		args     []string // after registry add
		wantCode int
		want     string // in stderr
	}{
		{"private key to verify with", []string{"bad", "--git-dir", dir, "--require-signed", secret}, 1, "--require-signed " + secret + ": line 1 opens a private key block"},
		{"no key to verify with", []string{"bad", "--git-dir", dir, "--require-signed", none}, 1, "--require-signed " + none + ": it lists no key"},
		{"keys that do not parse", []string{"bad", "--git-dir", dir, "--require-signed", garbled}, 1, "--require-signed " + garbled + ": the public key block of line 1 has no END line"},
		{"hold share above 1", []string{"bad", "--dir", dir, "--hold-share", "2"}, 1, "--hold-share: 2 is not a share"},
		{"password in the URL", []string{"bad", "--redis", "redis://:secret@10.0.0.5:6379/0"}, 1, "--redis: holds a password, which would be readable by everyone who can read the registry spec; remove it from the URL and put it in a file named by --password-file"},
		{"CA file without TLS", []string{"bad", "--redis", "redis://10.0.0.5:6379/0", "--ca-file", "/etc/ca.pem"}, 1, "--ca-file: set, but --redis is not rediss://"},
		{"sync interval too short", []string{"bad", "--dir", dir, "--sync-interval", "10ms"}, 1, "--sync-interval: 10ms is outside"},
		{"built-in name", []string{contract.SourceAPI, "--dir", dir}, 1, "NAME: \"api\" is the name of a built-in source"},
		{"both sources", []string{"bad", "--dir", dir, "--redis", "redis://10.0.0.5:6379/0"}, 2, "give one of --redis, --dir, --git, --git-dir and --kubernetes, not --redis and --dir"},
		{"kubernetes and a directory", []string{"bad", "--dir", dir, "--kubernetes"}, 2, "not --dir and --kubernetes"},
		{"kubeconfig without kubernetes", []string{"bad", "--dir", dir, "--kubeconfig", "/k"}, 2, "--kubeconfig, --namespace and --kinds go with --kubernetes, not --dir"},
		{"namespace of cluster-scoped kinds", []string{"bad", "--kubernetes", "--namespace", "net"}, 1, "--namespace: Layer2NetworkConfiguration and VRFRouteConfiguration are cluster-scoped"},
		{"unknown kind", []string{"bad", "--kubernetes", "--kinds", "Layer2NetworkConfiguration,Node"}, 1, "--kinds[1]: Node is not a kind sluice reads"},
		{"two git sources", []string{"bad", "--git", "file:///srv/net.git", "--git-dir", dir}, 2, "not --git and --git-dir"},
		{"no source", []string{"bad"}, 2, "--redis URL, --dir PATH, --git URL, --git-dir DIR or --kubernetes"},
		{"git URL over ssh without a key", []string{"bad", "--git", "ssh://git@git.example/net.git", "--git-known-hosts", "/etc/ssh/known"}, 1, "--git-ssh-key-file: required with an ssh:// URL"},
		{"git protocol", []string{"bad", "--git", "git://git.example/net.git"}, 1, `--git: "git://git.example/net.git": give an https://, http:// or ssh:// URL`},
		{"scp-like without a key", []string{"bad", "--git", "git@git.example:net.git", "--git-known-hosts", "/etc/ssh/known"}, 1, "--git-ssh-key-file: required with an ssh:// URL"},
		{"scp-like without a path", []string{"bad", "--git", "git@git.example:"}, 1, `--git: "git@git.example:" names no path after the colon`},
		{"scp-like with a port", []string{"bad", "--git", "[git.example:2222]:net.git"}, 1, `--git: "[git.example:2222]:net.git" is scp-like ([user@]host:path) but has a bracketed host; write it as ssh://`},
		{"ssh key with a git directory", []string{"bad", "--git-dir", dir, "--git-ssh-key-file", "/k"}, 2, "--git-ssh-key-file and --git-known-hosts go with --git, not --git-dir"},
		{"password in the git URL", []string{"bad", "--git", "https://ada:s3cret@git.example/net.git"}, 1, `--git: "https://git.example/net.git" carries a password, which would be readable in the control bucket: remove it from the URL and put the token in a file named by --git-token-file`},
		{"token over http", []string{"bad", "--git", "http://git.example/net.git", "--git-token-file", "/t"}, 1, "--git-token-file: set with an http:// URL, which would send the token unencrypted; use https://"},
		{"relative token file", []string{"bad", "--git", "https://git.example/net.git", "--git-token-file", "t"}, 1, `--git-token-file: "t" is not an absolute path`},
		{"token file with a git directory", []string{"bad", "--git-dir", dir, "--git-token-file", "/t"}, 2, "--git-token-file goes with --git, not --git-dir"},
		{"CA file with a directory", []string{"bad", "--dir", dir, "--ca-file", "/ca.pem"}, 2, "--ca-file goes with --redis or --git, not --dir"},
		{"CA file with a local git URL", []string{"bad", "--git", "file:///srv/net.git", "--ca-file", "/ca.pem"}, 1, "--git-token-file and --ca-file go with an https:// URL"},
		{"bad branch", []string{"bad", "--git-dir", dir, "--branch", "a..b"}, 1, `--branch: "a..b" is not a branch name`},
		{"absolute path", []string{"bad", "--git-dir", dir, "--path", "/intents"}, 1, `--path: "/intents" is absolute`},
		{"branch without git", []string{"bad", "--dir", dir, "--branch", "main"}, 2, "--branch, --path and --require-signed go with --git or --git-dir, not --dir"},
		{"signed without git", []string{"bad", "--dir", dir, "--require-signed", "/etc/sluice/allowed_signers"}, 2, "--require-signed go with --git or --git-dir, not --dir"},
		{"relative allowed signers", []string{"bad", "--git-dir", dir, "--require-signed", "allowed_signers"}, 1, `--require-signed: "allowed_signers" is not an absolute path`},
		{"redis flag with a directory", []string{"bad", "--dir", dir, "--prefix", "x:"}, 2, "go with --redis"},
		{"poll without a directory", []string{"bad", "--redis", "redis://10.0.0.5:6379/0", "--poll"}, 2, "--poll goes with --dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice(t, env.URL, append([]string{"registry", "add"}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d naming %q\n%s", code, stderr, tt.wantCode, tt.want, stdout)
			}
			keys, err := specs(env).Keys(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// The control bucket also holds the store's identity, which
			// its manager wrote before the test began.
			keys = slices.DeleteFunc(keys, func(k string) bool { return k == contract.KeyStoreID })
			if len(keys) > 0 {
				t.Errorf("stored %v; want nothing", keys)
			}
		})
	}
}

func TestRegistryAdd_Twice_RefusedUnlessUpdate(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	dir := t.TempDir()
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", dir); code != 0 {
		t.Fatalf("first add: exit %d: %s", code, stderr)
	}
	code, _, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", dir, "--hold-share", "0.1")
	if code != 1 || !strings.Contains(stderr, "registry gitops already exists (directory "+dir) || !strings.Contains(stderr, "--update") {
		t.Errorf("second add: exit %d, stderr %q; want 1 saying it exists and how to replace it", code, stderr)
	}
	if got := storedSpec(t, env, "gitops").GetHoldShare(); got != 0 {
		t.Errorf("a refused add changed the spec: hold share %v", got)
	}
	code, stdout, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", dir, "--hold-share", "0.1", "--update")
	if code != 0 || !strings.Contains(stdout, "replaced registry gitops") {
		t.Fatalf("add --update: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := storedSpec(t, env, "gitops").GetHoldShare(); got != 0.1 {
		t.Errorf("hold share after --update: %v, want 0.1", got)
	}
}

func TestRegistryRemove_DeletesTheSpecAndItsConfirmation(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", t.TempDir()); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	if _, err := confirms(env).Create(ctx, contract.RegistryConfirmKey("gitops"), &sluicev1.RegistryConfirm{Digest: "d1"}); err != nil {
		t.Fatal(err)
	}
	intents := store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	l2 := &sluicev1.Intent{Name: "tenant-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 100, Vni: 10100}}}
	if _, err := intents.Create(ctx, "layer2network.tenant-a", &sluicev1.StoredIntent{Intent: l2, Source: "gitops", Origin: "a.yaml"}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := sluice(t, env.URL, "registry", "remove", "gitops")
	if code != 0 || !strings.Contains(stdout, "its 1 intent(s) stay stored and in force") {
		t.Fatalf("remove: exit %d\n%s%s", code, stdout, stderr)
	}
	if s := storedSpec(t, env, "gitops"); s != nil {
		t.Errorf("spec still stored: %v", s)
	}
	if _, err := confirms(env).Get(ctx, contract.RegistryConfirmKey("gitops")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("confirmation after remove: %v, want not found", err)
	}
	if _, err := intents.Get(ctx, "layer2network.tenant-a"); err != nil {
		t.Errorf("the registry's intent after remove: %v, want it kept", err)
	}

	code, _, stderr = sluice(t, env.URL, "registry", "remove", "gitops")
	if code != 1 || !strings.Contains(stderr, "registry gitops does not exist") {
		t.Errorf("removing it again: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
}

func TestRegistryConfirm_StoresTheHeldDeletionsDigest(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", t.TempDir()); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	if code, _, stderr := sluice(t, env.URL, "registry", "confirm", "gitops"); code != 1 || !strings.Contains(stderr, "registry gitops holds no deletion") {
		t.Errorf("confirm without a status: exit %d, stderr %q; want 1, nothing held", code, stderr)
	}
	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "gitops", State: sluicev1.RegistryState_REGISTRY_STATE_SYNCED})
	if code, _, stderr := sluice(t, env.URL, "registry", "confirm", "gitops"); code != 1 || !strings.Contains(stderr, "registry gitops holds no deletion") {
		t.Errorf("confirm with nothing held: exit %d, stderr %q; want 1, nothing held", code, stderr)
	}
	if _, err := confirms(env).Get(ctx, contract.RegistryConfirmKey("gitops")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused confirm stored something: %v", err)
	}

	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "gitops", State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
		Held: &sluicev1.HeldDeletion{Intents: []string{"layer2network/tenant-a", "routingtable/mgmt"}, Digest: "9f86d081884c7d659a2f", Reason: "the answer holds no intent"}})
	code, stdout, stderr := sluice(t, env.URL, "registry", "confirm", "gitops", "--reason", "checkout emptied on purpose")
	if code != 0 || !strings.Contains(stdout, "held deletion of 2 intent(s) (digest 9f86d081884c)") {
		t.Fatalf("confirm: exit %d\n%s%s", code, stdout, stderr)
	}
	e, err := confirms(env).Get(ctx, contract.RegistryConfirmKey("gitops"))
	if err != nil || e.Value.GetDigest() != "9f86d081884c7d659a2f" || e.Value.GetReason() != "checkout emptied on purpose" || e.Value.GetBy() == "" || e.Value.GetAt() == nil {
		t.Errorf("stored confirmation %v, %v; want the held digest with who, when and why", e.Value, err)
	}
}

// registryFixture is what TestGetRegistries reads: two registries with
// specs, statuses the configurator would write (one of a removed
// registry), and intents from every source. The statuses' times are
// relative to the time it returns.
func registryFixture(t *testing.T, env *natstest.Env) time.Time {
	t.Helper()
	ctx := context.Background()
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "gitops", "--dir", "/srv/gitops"); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "tenants", "--redis", "redis://10.0.0.5:6379/0"); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "fresh", "--dir", "/srv/fresh"); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	now := time.Now()
	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "gitops", Kind: "directory", State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
		LastSync: timestamppb.New(now.Add(-40 * time.Second)),
		Held: &sluicev1.HeldDeletion{Intents: []string{"layer2network/tenant-b", "layer2network/tenant-c"}, Digest: "abcdef0123456789",
			Reason: "the answer drops 2 of 3 intents (hold share 0.5)", Since: timestamppb.New(now.Add(-time.Minute))},
		Invalid:   []*sluicev1.FieldError{{Intent: "layer2network/bad", Field: "spec.vlan", Rule: "must be 1-4094"}},
		Conflicts: []*sluicev1.RegistryConflict{{Intent: "layer2network/tenant-a", Owner: "tenants"}, {Intent: "routingtable/mgmt", Owner: "api"}}})
	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "tenants", Kind: "redis", State: sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE,
		LastSync: timestamppb.New(now.Add(-10 * time.Minute)), UnreachableSince: timestamppb.New(now.Add(-3 * time.Minute)), Attempts: 4,
		Error: "dial tcp 10.0.0.5:6379: connect: connection refused", Note: "keyspace notifications are off on the server: polling only"})
	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "removed", Kind: "redis", State: sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE,
		UnreachableSince: timestamppb.New(now), Error: "gone"})
	intents := store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	for i, si := range []*sluicev1.StoredIntent{
		{Source: "api"}, {Source: "undo"}, {Source: "api", MarkedForDeletion: true},
		{Source: "gitops", Origin: "b.yaml"}, {Source: "gitops", Origin: "c.yaml"}, {Source: "gitops", MarkedForDeletion: true},
		{Source: "tenants"},
		{Source: "removed"},
	} {
		name := "t" + string(rune('a'+i))
		si.Intent = &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: uint32(100 + i)}}}
		if _, err := intents.Create(ctx, "routingtable."+name, si); err != nil {
			t.Fatal(err)
		}
	}
	return now
}

func TestGetRegistries_ShowsEachSourceAndWhatNeedsAnOperator(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	now := registryFixture(t, env)

	// injected clock: "40s" and "(1m ago)" read the fixture's time, not
	// how long the fixture and the command took.
	code, stdout, stderr := sluiceAt(t, env.URL, now, "get", "registries")
	if code != 0 {
		t.Fatalf("get registries: exit %d: %s", code, stderr)
	}
	table, footer, _ := strings.Cut(stdout, "\n\n")
	wantRows := [][]string{
		{"NAME", "KIND", "LOCATION", "STATE", "LAST-SYNC", "INTENTS", "MARKED"},
		{"api", "api", "sluice", "apply", "-", "-", "2", "1"},
		{"fresh", "directory", "/srv/fresh", "no", "status", "yet", "-", "0", "0"},
		{"gitops", "directory", "/srv/gitops", "Held", "40s", "2", "1"},
		{"tenants", "redis", "redis://10.0.0.5:6379/0", "Unreachable", "10m", "1", "0"},
	}
	lines := strings.Split(table, "\n")
	if len(lines) != len(wantRows) {
		t.Fatalf("table has %d lines, want %d (the removed registry is not listed):\n%s", len(lines), len(wantRows), stdout)
	}
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), "|"); got != strings.Join(wantRows[i], "|") {
			t.Errorf("row %d:\n got %s\nwant %s", i, got, strings.Join(wantRows[i], "|"))
		}
	}
	for _, want := range []string{
		"gitops holds a deletion of 2 intent(s) (digest abcdef012345) since ",
		" (1m ago): the answer drops 2 of 3 intents (hold share 0.5) — confirm with: sluice registry confirm gitops\n",
		"gitops: layer2network/bad: spec.vlan: must be 1-4094\n",
		"gitops: layer2network/tenant-a is also declared by tenants, which owns it; gitops's version is ignored\n",
		"tenants: layer2network/tenant-a is also declared by gitops (conflict)\n",
		"gitops: routingtable/mgmt is also declared by api, which owns it; gitops's version is ignored\n",
		"api: routingtable/mgmt is also declared by gitops (conflict)\n",
		"tenants unreachable since ",
		" (3m ago), 4 failed fetch(es) in a row: dial tcp 10.0.0.5:6379: connect: connection refused\n",
		"tenants: keyspace notifications are off on the server: polling only\n",
		"1 intent(s) have source removed, which is not a registry (removed?): they stay in force",
	} {
		if !strings.Contains(footer, want) {
			t.Errorf("below the table, missing %q:\n%s", want, footer)
		}
	}
	if strings.Contains(stdout, "gone") {
		t.Errorf("the removed registry's status is shown:\n%s", stdout)
	}
	// Each registry's lines are together, in the table's order, its state first.
	if a, g, tn, tc := strings.Index(footer, "api:"), strings.Index(footer, "gitops holds"), strings.Index(footer, "tenants unreachable"),
		strings.Index(footer, "tenants: layer2network/tenant-a"); !(a < g && g < tn && tn < tc) {
		t.Errorf("footer not grouped in table order:\n%s", footer)
	}

	code, stdout, stderr = sluice(t, env.URL, "get", "registries", "-o", "json")
	if code != 0 {
		t.Fatalf("-o json: exit %d: %s", code, stderr)
	}
	var got struct {
		Items []struct {
			Name    string         `json:"name"`
			Kind    string         `json:"kind"`
			Intents int            `json:"intents"`
			Spec    map[string]any `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("-o json: %v\n%s", err, stdout)
	}
	var names []string
	for _, it := range got.Items {
		names = append(names, it.Name+"/"+it.Kind)
	}
	if strings.Join(names, ",") != "api/api,fresh/directory,gitops/directory,tenants/redis" || got.Items[2].Intents != 2 || got.Items[2].Spec["name"] != "gitops" {
		t.Errorf("-o json items %v:\n%s", names, stdout)
	}
}

// The configurator's reason may already say how to confirm: it is said
// once. Invalid intents are listed up to ten, then counted.
func TestRegistryFooter_HeldOnceAndAtMostTenInvalid(t *testing.T) {
	var invalid []*sluicev1.FieldError
	for i := range 12 {
		invalid = append(invalid, &sluicev1.FieldError{Intent: fmt.Sprintf("routingtable/t%d", i), Field: "spec.tableId", Rule: "must be 1-4294967294"})
	}
	l := newRegistryList(map[string]*sluicev1.RegistrySpec{"dir": {Name: "dir"}},
		[]*sluicev1.RegistryStatus{{Name: "dir", State: sluicev1.RegistryState_REGISTRY_STATE_HELD, Invalid: invalid, Held: &sluicev1.HeldDeletion{
			Intents: []string{"routingtable/lab"}, Digest: "ce0fc0ecbace99", Since: ago(time.Minute),
			Reason: "the registry answered with no intent at all. If they are gone, confirm: sluice registry confirm dir."}}}, nil)
	lines := l.footer(now)
	if len(lines) != 12 {
		t.Fatalf("footer has %d lines, want the held one, ten invalid and a count:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if strings.Count(lines[0], "sluice registry confirm dir") != 1 || !strings.Contains(lines[0], "dir holds a deletion of 1 intent(s) (digest ce0fc0ecbace) since ") {
		t.Errorf("held line %q; want the confirm named once", lines[0])
	}
	if lines[10] != "dir: routingtable/t9: spec.tableId: must be 1-4294967294" || lines[11] != "dir: (+2 more invalid intents)" {
		t.Errorf("invalid lines end with %q, %q", lines[10], lines[11])
	}
}

// A git registry's footer says which commit is in force, and an answer it
// holds (a rewound branch) with its reason; the table's location names the
// branch and path.
func TestRegistryFooter_GitCommitInForceAndHeldAnswer(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 15, 0, 0, time.Local)
	spec := &sluicev1.RegistrySpec{Name: "net", Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{
		Url: "file:///srv/git/net.git", Branch: "prod", Path: "intents"}}}
	l := newRegistryList(map[string]*sluicev1.RegistrySpec{"net": spec},
		[]*sluicev1.RegistryStatus{{Name: "net", Kind: "git", State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
			Error: "held: branch prod was rewound: its head 1111 is an ancestor of commit 2222 in force",
			Commit: &sluicev1.GitCommit{Hash: "2222333344445555666677778888999900001111", Subject: "retire tenant-b",
				Author: "Ada Admin <ada@example.net>", Time: timestamppb.New(at)}}}, nil)
	want := []string{
		"net answer held: branch prod was rewound: its head 1111 is an ancestor of commit 2222 in force",
		`net: commit in force 222233334444 "retire tenant-b" by Ada Admin <ada@example.net>, 2026-11-30 09:15:00`,
	}
	if got := l.footer(now); !slices.Equal(got, want) {
		t.Errorf("footer\n got %q\nwant %q", got, want)
	}
	if got := l.table(now)[2]; got[1] != "git" || got[2] != "file:///srv/git/net.git branch prod path intents" || got[3] != "Held" {
		t.Errorf("row %q; want kind git, the location with branch and path, state Held", got)
	}
}

// A registry with a deletion pending (no hold): get registries says when
// each intent becomes effective, -o json carries the same, and confirm
// names the pending set's digest.
func TestRegistryPending_ShownAndConfirmed(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	if code, _, stderr := sluice(t, env.URL, "registry", "add", "cmdb", "--redis", "redis://10.0.0.5:6379/0"); code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	at := now.Add(25 * time.Second)
	writeStatus(t, env, &sluicev1.RegistryStatus{Name: "cmdb", Kind: "redis", State: sluicev1.RegistryState_REGISTRY_STATE_SYNCED,
		LastSync: ago(5 * time.Second), PendingDigest: "0123456789abcdef", Declared: 2,
		Pending: []*sluicev1.PendingDeletion{{Intent: "layer2network/tenant-v", MissingSince: ago(5 * time.Second), EffectiveAt: timestamppb.New(at)}}})

	// injected clock: "(in 25s)" reads the status's times against now.
	code, stdout, stderr := sluiceAt(t, env.URL, now, "get", "registries")
	if code != 0 {
		t.Fatalf("get registries: exit %d: %s", code, stderr)
	}
	want := "cmdb: 1 intent(s) pending deletion, no longer declared: layer2network/tenant-v at " + at.Local().Format(time.DateTime) +
		" (in 25s); each is marked then unless an answer declares it again — to mark them at once: sluice registry confirm cmdb"
	if !strings.Contains(stdout, want) {
		t.Errorf("get registries does not say what is pending and when:\nwant %s\n%s", want, stdout)
	}
	// injected clock: after the effective time it says when it happens, never a negative duration.
	if _, stdout, _ := sluiceAt(t, env.URL, at.Add(time.Minute), "get", "registries"); !strings.Contains(stdout, "(due: at the registry's next sync)") {
		t.Errorf("get registries past the effective time:\n%s", stdout)
	}
	code, stdout, stderr = sluice(t, env.URL, "get", "registries", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"intent": "layer2network/tenant-v"`) || !strings.Contains(stdout, `"effectiveAt": "`+at.UTC().Format(time.RFC3339)+`"`) {
		t.Errorf("-o json: exit %d, want the pending deletion with its effective time:\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = sluice(t, env.URL, "registry", "confirm", "cmdb", "--reason", "tenant-v retired")
	if code != 0 || !strings.Contains(stdout, "confirmed registry cmdb's pending deletion of 1 intent(s) (digest 0123456789ab): layer2network/tenant-v") {
		t.Fatalf("confirm: exit %d\n%s%s", code, stdout, stderr)
	}
	e, err := confirms(env).Get(ctx, contract.RegistryConfirmKey("cmdb"))
	if err != nil || e.Value.GetDigest() != "0123456789abcdef" || e.Value.GetReason() != "tenant-v retired" {
		t.Errorf("stored confirmation %v, %v; want the pending set's digest", e.Value, err)
	}
}

func TestDev_NegativeRegistryDeleteAfter_RefusedNamingTheFlag(t *testing.T) {
	code, _, stderr := sluice(t, "nats://127.0.0.1:1", "dev", "--no-examples", "--data", t.TempDir(), "--registry-delete-after", "-5s")
	if code != 2 || !strings.Contains(stderr, "--registry-delete-after -5s: a settle period cannot be negative") {
		t.Fatalf("exit %d, stderr %q; want 2 naming the flag", code, stderr)
	}
}

// The user information of a git server's URL (which may be a token) is
// stored as given but never printed: not by registry add, not by get
// registries.
func TestRegistryAdd_GitURLUser_IsNeverShown(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	const user = "ghp_userToken123"
	code, stdout, stderr := sluice(t, env.URL, "registry", "add", "remote", "--git", "https://"+user+"@git.example/net.git", "--git-token-file", "/etc/sluice/git-token")
	if code != 0 || !strings.Contains(stdout, "https://git.example/net.git, branch main, fetched into the configurator's cache") ||
		!strings.Contains(stdout, "token       read from /etc/sluice/git-token on the configurator's host") {
		t.Fatalf("registry add: exit %d\n%s%s", code, stdout, stderr)
	}
	_, list, _ := sluice(t, env.URL, "get", "registries")
	if !strings.Contains(list, "https://git.example/net.git branch main") {
		t.Errorf("get registries does not show the registry:\n%s", list)
	}
	for _, out := range []string{stdout, stderr, list} {
		if strings.Contains(out, user) {
			t.Errorf("the URL's user is shown:\n%s", out)
		}
	}
}

// sluice dev's --git, --git-token-file and --require-signed build the
// registry "git" as registry add would, files made absolute; what does
// not go together is refused naming the flags.
func TestDevRegistries_Git(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, _ := os.Getwd()
	a := &app{now: time.Now}
	specs, err := a.devRegistries("", "", devGit{url: "https://git.example/net.git", tokenFile: "token", requireSigned: "signers"})
	if err != nil || len(specs) != 1 {
		t.Fatalf("devRegistries: %v, %v", specs, err)
	}
	g := specs[0].GetGit()
	if specs[0].GetName() != "git" || g.GetUrl() != "https://git.example/net.git" || g.GetTokenFile() != filepath.Join(wd, "token") ||
		g.GetAllowedSignersFile() != filepath.Join(wd, "signers") {
		t.Errorf("spec = %v", specs[0])
	}
	for _, tt := range []struct {
		given devGit
		want  string
	}{
		{devGit{url: "https://git.example/net.git", dir: "repo"}, "give --git-dir or --git, not both"},
		{devGit{dir: "repo", tokenFile: "t"}, "--git-token-file goes with --git URL"},
		{devGit{requireSigned: "s"}, "--require-signed goes with --git or --git-dir"},
		{devGit{url: "git://git.example/net.git"}, `--git: "git://git.example/net.git"`},
		{devGit{url: "ssh://git.example/net.git", knownHosts: "kh"}, "--git-ssh-key-file: required with an ssh:// URL"},
		{devGit{dir: "repo", sshKey: "k"}, "--git-ssh-key-file and --git-known-hosts go with --git URL"},
	} {
		if _, err := a.devRegistries("", "", tt.given); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("devRegistries(%+v): err = %v, want %q", tt.given, err, tt.want)
		}
	}
}
