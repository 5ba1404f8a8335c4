package configurator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// netDoc declares layer2 network name as an intent file does.
func netDoc(name string, vlan int) string {
	return fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d}\n", name, vlan, 10000+vlan)
}

func gitSpec(name, url string) *sluicev1.RegistrySpec {
	return &sluicev1.RegistrySpec{Name: name, SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: url, Path: "intents"}}}
}

// A git registry goes through the rules every registry does: its commits
// sync in place, a deleted file is marked after the settle period, and a
// branch rewound to an older commit is held, nothing changed, until it
// descends from the commit in force again.
func TestGitRegistry_FollowsTheBranch(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	g := gittest.New(t)
	c1 := g.Commit("red, green and blue", map[string]string{
		"intents/red.yaml": netDoc("red", 100), "intents/green.yaml": netDoc("green", 101), "intents/blue.yaml": netDoc("blue", 102)})
	start(t, env, func(c *configurator.Config) { c.DeleteAfter = new(time.Second) })
	addRegistry(t, env, gitSpec("gitops", g.URL()))

	waitStored(t, env, "layer2network.blue", "blue synced from the branch", func(v *sluicev1.StoredIntent) bool {
		return v != nil && v.GetSource() == "gitops" && v.GetOrigin() == "blue.yaml"
	})
	natstest.Eventually(t, wait, "status SYNCED at the head commit", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 3 && st.GetCommit().GetHash() == c1
	})
	if c := registryStatus(t, env, "gitops").GetCommit(); c.GetSubject() != "red, green and blue" || c.GetAuthor() != gittest.Author {
		t.Errorf("commit in force %v, want its subject and author", c)
	}

	// One file changed: synced in place.
	c2 := g.Commit("red: vlan 110", map[string]string{"intents/red.yaml": netDoc("red", 110)})
	waitStored(t, env, "layer2network.red", "red's new VLAN", func(v *sluicev1.StoredIntent) bool {
		return v.GetIntent().GetLayer2Network().GetVlan() == 110
	})

	// One file deleted: pending, then marked after the settle period.
	c3 := g.Commit("retire green", map[string]string{"intents/green.yaml": ""})
	waitStored(t, env, "layer2network.green", "green marked after the settle period", func(v *sluicev1.StoredIntent) bool { return v.GetMarkedForDeletion() })
	natstest.Eventually(t, wait, "green announced pending first", func() bool {
		p := evs.ofType("RegistryDeletionPending")
		return len(p) > 0 && strings.Contains(p[0].GetReason(), "layer2network/green at ")
	})
	natstest.Eventually(t, wait, "the commit in force to be the deletion's", func() bool {
		return registryStatus(t, env, "gitops").GetCommit().GetHash() == c3
	})

	// Rewound to c2 (which has green): held naming both commits; green
	// stays marked, red stays, nothing is synced from c2.
	g.ForcePush(c2)
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "the rewind to be held", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD
	})
	if e := st.GetError(); !strings.Contains(e, "was rewound") || !strings.Contains(e, c2[:12]) || !strings.Contains(e, c3[:12]) {
		t.Errorf("held with error %q, want it to name %s and %s", e, c2[:12], c3[:12])
	}
	if st.GetCommit().GetHash() != c3 {
		t.Errorf("commit in force while held = %s, want %s", st.GetCommit().GetHash(), c3)
	}
	for range 2 { // two more attempts: the status is written after each
		at := registryStatus(t, env, "gitops").GetUpdatedAt().AsTime()
		natstest.Eventually(t, wait, "another sync attempt", func() bool {
			return registryStatus(t, env, "gitops").GetUpdatedAt().AsTime().After(at)
		})
	}
	if v := getStored(t, env, "layer2network.green"); !v.GetMarkedForDeletion() {
		t.Error("green was un-marked from the rewound branch")
	}
	if n := len(evs.ofType("RegistryAnswerHeld")); n != 1 {
		t.Errorf("%d RegistryAnswerHeld events, want 1 (once, not at every sync)", n)
	}

	// A commit on top of the one in force (c2 → c3 → c4 fast-forwards the
	// branch): merged again.
	g.Git(g.Work, "reset", "--quiet", "--hard", c3)
	c4 := g.Commit("red: vlan 111", map[string]string{"intents/red.yaml": netDoc("red", 111)})
	waitStored(t, env, "layer2network.red", "red's VLAN of c4", func(v *sluicev1.StoredIntent) bool {
		return v.GetIntent().GetLayer2Network().GetVlan() == 111
	})
	natstest.Eventually(t, wait, "status SYNCED at c4", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetError() == "" && st.GetCommit().GetHash() == c4
	})
	natstest.Eventually(t, wait, "a RegistryAnswerReleased event", func() bool { return len(evs.ofType("RegistryAnswerReleased")) == 1 })
	if v := getStored(t, env, "layer2network.green"); !v.GetMarkedForDeletion() {
		t.Error("green was un-marked")
	}
}

// A repository that does not exist is unreachable: nothing is changed.
func TestGitRegistry_MissingRepository_IsUnreachable(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	addRegistry(t, env, gitSpec("gitops", "file://"+t.TempDir()+"/gone.git"))
	natstest.Eventually(t, wait, "status UNREACHABLE naming the repository", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE && strings.Contains(st.GetError(), "open repository") &&
			st.GetKind() == "git"
	})
}

// A commit that removes every intent file is never read as "no intent":
// with the directory left, the empty answer's deletion is held as any
// registry's is; with the directory gone, the answer is held naming the
// path. Nothing is marked either way.
func TestGitRegistry_MassDeletion_IsHeld(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	c1 := g.Commit("red and green", map[string]string{
		"intents/red.yaml": netDoc("red", 100), "intents/green.yaml": netDoc("green", 101), "intents/README.md": "intents\n"})
	start(t, env, func(c *configurator.Config) { c.DeleteAfter = new(time.Duration) })
	addRegistry(t, env, gitSpec("gitops", g.URL()))
	natstest.Eventually(t, wait, "status SYNCED at c1", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 2 && st.GetCommit().GetHash() == c1
	})

	// Every intent file removed, the directory left: the deletion is held.
	g.Commit("remove every intent", map[string]string{"intents/red.yaml": "", "intents/green.yaml": ""})
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "the empty answer's deletion held", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && st.GetHeld() != nil
	})
	if r := st.GetHeld().GetReason(); !strings.Contains(r, "answered with no intent at all while it owns 2 intents") || !strings.Contains(r, "sluice registry confirm gitops") {
		t.Errorf("held deletion's reason %q, want it to say the answer is empty and how to confirm", r)
	}
	if st.GetIntents() != 2 {
		t.Errorf("status intents = %d, want 2 (the intents in force, not the empty answer)", st.GetIntents())
	}

	// The directory removed (README too): held naming the path.
	g.Git(g.Work, "rm", "--quiet", "-r", "intents")
	g.Commit("remove the intents directory", nil)
	natstest.Eventually(t, wait, "the removed path held", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && strings.Contains(st.GetError(), "path intents is not a directory")
	})
	for _, key := range []string{"layer2network.red", "layer2network.green"} {
		if v := getStored(t, env, key); v == nil || v.GetMarkedForDeletion() {
			t.Errorf("%s = %v, want it stored and not marked", key, v)
		}
	}
}

// lockedBuffer is a log sink the configurator's goroutines write to while
// the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A repository on a Git server (git http-backend over HTTP) is cloned into
// the configurator's cache and followed; the server stopped is
// unreachable, the intents in force stay, and the commit in force with
// them; a force-push to an older commit is held.
func TestGitRegistry_Remote_ServerDownIsUnreachable_ForcePushIsHeld(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	c1 := g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	c2 := g.Commit("green", map[string]string{"intents/green.yaml": netDoc("green", 101)})
	srv := g.Serve(gittest.ServeOptions{})
	cache := t.TempDir()
	start(t, env, func(c *configurator.Config) { c.GitCache = cache; c.DeleteAfter = new(time.Duration) })
	addRegistry(t, env, gitSpec("gitops", srv.URL))

	natstest.Eventually(t, wait, "status SYNCED at the head commit", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 2 && st.GetCommit().GetHash() == c2
	})
	if clones, _ := filepath.Glob(filepath.Join(cache, "gitops-*.git")); len(clones) != 1 {
		t.Errorf("clones in the cache = %q, want one", clones)
	}

	// Force-push to c1 (no green): held, green stays.
	g.ForcePush(c1)
	natstest.Eventually(t, wait, "the force-push to be held", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && strings.Contains(st.GetError(), "was rewound")
	})
	if v := getStored(t, env, "layer2network.green"); v == nil || v.GetMarkedForDeletion() {
		t.Errorf("green after a held force-push: %v, want it in force", v)
	}
	g.ForcePush(c2)

	// A new commit, then the server stopped: unreachable, nothing changes.
	c3 := g.Commit("blue", map[string]string{"intents/blue.yaml": netDoc("blue", 102)})
	waitStored(t, env, "layer2network.blue", "blue synced from the server", func(v *sluicev1.StoredIntent) bool { return v != nil })
	srv.Stop()
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "status UNREACHABLE naming the server", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE
	})
	if !strings.Contains(st.GetError(), "fetch branch main of "+srv.URL) || st.GetCommit().GetHash() != c3 {
		t.Errorf("unreachable: error %q, commit in force %s; want the fetch named and %s", st.GetError(), st.GetCommit().GetHash(), c3)
	}
	for _, key := range []string{"layer2network.red", "layer2network.green", "layer2network.blue"} {
		if v := getStored(t, env, key); v == nil || v.GetMarkedForDeletion() {
			t.Errorf("%s while the server is down: %v, want it in force", key, v)
		}
	}
}

// A server that requires a token: none is an error naming the registry and
// authentication; the token from the file syncs. The token is nowhere in
// the status, the events or the log, and neither is the URL's user.
func TestGitRegistry_Remote_Token_IsNeverShown(t *testing.T) {
	const token = "ghp_T0ken-never-shown-7781"
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	g := gittest.New(t)
	c1 := g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	srv := g.Serve(gittest.ServeOptions{TLS: true, Token: token})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	start(t, env, func(c *configurator.Config) {
		c.GitCache = t.TempDir()
		c.Log = zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t)))
	})

	spec := gitSpec("gitops", srv.URL)
	spec.GetGit().CaFile = srv.CAFile(t, dir)
	addRegistry(t, env, spec)
	natstest.Eventually(t, wait, "status UNREACHABLE naming authentication", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE &&
			strings.Contains(st.GetError(), "registry gitops") && strings.Contains(st.GetError(), "authentication required")
	})

	spec = gitSpec("withtoken", strings.Replace(srv.URL, "https://", "https://deploy-"+token+"@", 1))
	spec.GetGit().CaFile, spec.GetGit().TokenFile = srv.CAFile(t, dir), tokenFile
	addRegistry(t, env, spec)
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "status SYNCED with the token", func() bool {
		st = registryStatus(t, env, "withtoken")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetCommit().GetHash() == c1
	})
	srv.Stop()
	natstest.Eventually(t, wait, "status UNREACHABLE with the server stopped", func() bool {
		return registryStatus(t, env, "withtoken").GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE
	})

	shown := []string{logs.String(), prototext.Format(registryStatus(t, env, "gitops")), prototext.Format(registryStatus(t, env, "withtoken"))}
	for _, e := range evs.all() {
		shown = append(shown, prototext.Format(e))
	}
	if !strings.Contains(logs.String(), "authentication required") {
		t.Errorf("the log does not say authentication was required:\n%s", logs.String())
	}
	for _, s := range shown {
		if strings.Contains(s, token) || strings.Contains(s, "deploy-") {
			t.Errorf("the token or the URL's user is shown:\n%s", s)
		}
	}
}

// With --require-signed, an unsigned head commit is held naming it and
// changes nothing; a commit signed by an allowed key on top is synced.
func TestGitRegistry_RequireSigned_UnsignedCommitIsHeld(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	key, pub := gittest.SSHKey(t, "ada@example.net")
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(signers, []byte("ada@example.net "+pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.SignWith(key)
	c1 := g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	start(t, env)
	spec := gitSpec("gitops", g.URL())
	spec.GetGit().AllowedSignersFile = signers
	addRegistry(t, env, spec)
	natstest.Eventually(t, wait, "the signed commit synced", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetCommit().GetHash() == c1
	})

	g.SignWith("")
	c2 := g.Commit("red: vlan 110, unsigned", map[string]string{"intents/red.yaml": netDoc("red", 110)})
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "the unsigned commit held", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD
	})
	if e := st.GetError(); !strings.Contains(e, c2[:12]) || !strings.Contains(e, "it is not signed") || st.GetCommit().GetHash() != c1 {
		t.Errorf("held: error %q, commit in force %s; want %s named as not signed and %s in force", e, st.GetCommit().GetHash(), c2[:12], c1)
	}
	if v := getStored(t, env, "layer2network.red").GetIntent().GetLayer2Network().GetVlan(); v != 100 {
		t.Errorf("red's VLAN while the unsigned commit is held = %d, want 100", v)
	}

	g.SignWith(key)
	g.Commit("red: vlan 110, signed", nil)
	waitStored(t, env, "layer2network.red", "red's new VLAN from the signed commit", func(v *sluicev1.StoredIntent) bool {
		return v.GetIntent().GetLayer2Network().GetVlan() == 110
	})
}

// Every head a git registry's sync moves records where it came from: the
// registry and the commit (hash, author, committer, time, subject), and
// the HeadMoved and RevisionCreated events name the commit; the revision
// itself stays content-addressed. A head the API moves has no source.
func TestGitRegistry_HeadRecordsTheCommit(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	g := gittest.New(t)
	c1 := g.Commit("add red\n\nThe body is not recorded.", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	logs := &lockedBuffer{}
	start(t, env, func(c *configurator.Config) { c.Log = zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t))) })
	addRegistry(t, env, gitSpec("gitops", g.URL()))

	var head *sluicev1.Head
	natstest.Eventually(t, wait, "the head moved by the sync of c1", func() bool {
		head = headNow(t, env)
		return head.GetRevision() != ""
	})
	src := head.GetSource()
	c := src.GetCommit()
	if src.GetRegistry() != "gitops" || c.GetHash() != c1 || c.GetSubject() != "add red" ||
		c.GetAuthor() != gittest.Author || c.GetCommitter() != gittest.Author || c.GetTime() == nil {
		t.Fatalf("head source = %v, want registry gitops, commit %s, its author, committer, time and subject", src, c1)
	}
	rev := getRevision(t, env, head.GetRevision())
	if render.RevisionID(rev.GetIntents()) != head.GetRevision() {
		t.Errorf("revision %s is not the hash of its intents", head.GetRevision())
	}
	want := c1[:12] + " (Ada Admin: add red)"
	natstest.Eventually(t, wait, "HeadMoved and RevisionCreated naming the commit", func() bool {
		moved, created := evs.ofType("HeadMoved"), evs.ofType("RevisionCreated")
		return len(moved) == 1 && len(created) == 1 &&
			strings.Contains(moved[0].GetReason(), "from git registry gitops commit "+want) &&
			strings.Contains(created[0].GetReason(), "from git registry gitops commit "+want)
	})
	// The registry's own event and log line name the commit its sync read.
	natstest.Eventually(t, wait, "RegistrySynced naming the commit", func() bool {
		synced := evs.ofType("RegistrySynced")
		return len(synced) == 1 && strings.HasSuffix(synced[0].GetReason(), "; from git registry gitops commit "+want)
	})
	var line struct{ Message, Commit, Reason string }
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"registry synced"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.Commit != c1[:12] || !strings.Contains(line.Reason, "commit "+want) {
		t.Errorf("the registry synced log line has commit %q, reason %q; want %s and %q", line.Commit, line.Reason, c1[:12], want)
	}

	// The API's change: no source, even though the intents the sync
	// brought are still in the revision.
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{find(t, examples(t), "routingtable/mgmt")}})
	natstest.Eventually(t, wait, "the head moved by the apply", func() bool {
		return headNow(t, env).GetGeneration() == head.GetGeneration()+1
	})
	if s := headNow(t, env).GetSource(); s != nil {
		t.Errorf("head moved by an apply has source %v, want none", s)
	}
}
