package configurator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/gittest"
	"github.com/sluicehq/sluice/pkg/natstest"
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
