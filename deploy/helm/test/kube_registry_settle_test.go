//go:build kube

package charttest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/deploy/helm/test/kube"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestKube_Registry_DeletedResources_SettleAndMassDeletionHolds: the rules
// every registry follows on deletions (docs/registries.md, "Deletions need
// evidence" and "Mass deletions are held"), for resources deleted on a real
// API server. One resource deleted is pending for the settle period, its
// intent still live, and marked once the period is over, not before; then
// three of the four left deleted at once are held, none marked, even past
// the settle period.
func TestKube_Registry_DeletedResources_SettleAndMassDeletionHolds(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	installDasSchiffCRDs(t, dyn)
	names := []string{"a", "b", "c", "d", "e"}
	for i, n := range names {
		createYAML(t, dyn, layer2GVR, "", "apiVersion: network.t-caas.telekom.com/v1alpha1\nkind: Layer2NetworkConfiguration\n"+
			"metadata: {name: "+n+"}\nspec: {id: "+strconv.Itoa(100+i)+", mtu: 1500, vni: "+strconv.Itoa(10100+i)+"}\n")
	}
	env := natstest.Start(t, contract.DefaultSettings())
	settle := 5 * time.Second
	runConfigurator(t, env, &settle)
	addKubeRegistry(t, env, "das-schiff", &sluicev1.KubernetesRegistry{Kubeconfig: c.Kubeconfig(t, c.Token)})
	live := func(n string) bool {
		in := storedIntent(t, env, "layer2network."+n)
		return in.GetSource() == "das-schiff" && !in.GetMarkedForDeletion()
	}
	natstest.Eventually(t, 30*time.Second, "the five resources synced", func() bool {
		return !slices.ContainsFunc(names, func(n string) bool { return !live(n) })
	})
	bg := context.Background()

	// One deleted: pending, not marked, for the settle period.
	if err := dyn.Resource(layer2GVR).Delete(bg, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var pending *sluicev1.PendingDeletion
	natstest.Eventually(t, 10*time.Second, "a pending deletion", func() bool {
		for _, p := range kubeRegistryStatus(t, env, "das-schiff").GetPending() {
			if p.GetIntent() == "layer2network/a" {
				pending = p
			}
		}
		return pending != nil
	})
	if got := pending.GetEffectiveAt().AsTime().Sub(pending.GetMissingSince().AsTime()); got != settle {
		t.Errorf("a's deletion effective %v after it went missing, want the settle period %v", got, settle)
	}
	if !live("a") {
		t.Fatalf("a is marked as soon as its resource is deleted: %v", storedIntent(t, env, "layer2network.a"))
	}
	natstest.Eventually(t, 30*time.Second, "a marked for deletion", func() bool {
		return storedIntent(t, env, "layer2network.a").GetMarkedForDeletion()
	})
	if at, due := storedIntent(t, env, "layer2network.a").GetUpdatedAt().AsTime(), pending.GetEffectiveAt().AsTime(); at.Before(due) {
		t.Errorf("a marked at %v, before its settle period ended at %v", at, due)
	}

	// Three of the four left deleted at once: more than the hold share.
	for _, n := range []string{"c", "d", "e"} {
		if err := dyn.Resource(layer2GVR).Delete(bg, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var held *sluicev1.HeldDeletion
	natstest.Eventually(t, 30*time.Second, "the deletion of c, d and e held", func() bool {
		held = kubeRegistryStatus(t, env, "das-schiff").GetHeld()
		return slices.Equal(held.GetIntents(), []string{"layer2network/c", "layer2network/d", "layer2network/e"})
	})
	// Past the settle period, syncs going on every second: still held,
	// nothing marked.
	since := kubeRegistryStatus(t, env, "das-schiff").GetLastSync().AsTime()
	natstest.Eventually(t, 30*time.Second, "syncs for longer than the settle period", func() bool {
		return kubeRegistryStatus(t, env, "das-schiff").GetLastSync().AsTime().Sub(since) > settle+2*time.Second
	})
	st := kubeRegistryStatus(t, env, "das-schiff")
	if st.GetHeld().GetDigest() != held.GetDigest() || len(st.GetPending()) != 0 {
		t.Errorf("after the settle period: held %v, pending %v; want the same hold and nothing pending", st.GetHeld(), st.GetPending())
	}
	for _, n := range []string{"b", "c", "d", "e"} {
		if !live(n) {
			t.Errorf("%s: %v; want it live: its deletion is held", n, storedIntent(t, env, "layer2network."+n))
		}
	}
}
