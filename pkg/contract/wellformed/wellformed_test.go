package wellformed_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/contract/wellformed"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func desired(node string) *sluicev1.DesiredConfig {
	cfg := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: "a"}}}
	return &sluicev1.DesiredConfig{Node: node, Config: cfg, Fingerprint: render.Fingerprint(cfg)}
}

func l2(name string) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{}}}
}

func TestCheck(t *testing.T) {
	at := timestamppb.Now()
	mismatched := desired("n1")
	mismatched.Fingerprint = "abc"
	noConfig := desired("n1")
	noConfig.Config = nil
	tests := []struct {
		name    string
		bucket  string
		key     string
		value   proto.Message
		wantErr string // "" = well-formed
	}{
		{"intent", contract.BucketIntents, "layer2network.a", &sluicev1.StoredIntent{Intent: l2("a")}, ""},
		{"intent under another key", contract.BucketIntents, "layer2network.b", &sluicev1.StoredIntent{Intent: l2("a")}, `not "layer2network.b"`},
		{"empty intent", contract.BucketIntents, "layer2network.a", &sluicev1.StoredIntent{}, "holds no intent"},

		{"revision", contract.BucketRevisions, "r1", &sluicev1.Revision{Id: "r1"}, ""},
		{"empty revision", contract.BucketRevisions, "r1", &sluicev1.Revision{}, `names revision ""`},
		{"head", contract.BucketRevisions, contract.KeyHead, &sluicev1.Head{Revision: "r1", Generation: 1}, ""},
		{"empty head", contract.BucketRevisions, contract.KeyHead, &sluicev1.Head{}, "names no revision"},
		{"head read as a revision", contract.BucketRevisions, contract.KeyHead, &sluicev1.Revision{Id: "head"}, "holds a Head"},
		{"journal", contract.BucketRevisions, contract.KeyPending, &sluicev1.ApplyJournal{HasPrior: true}, ""},
		{"empty journal", contract.BucketRevisions, contract.KeyPending, &sluicev1.ApplyJournal{}, "holds no apply"},

		{"desired", contract.BucketNodeConfigs, contract.DesiredKey("n1"), desired("n1"), ""},
		{"backup", contract.BucketNodeConfigs, contract.BackupKey("n1.rack.a"), desired("n1.rack.a"), ""},
		{"empty backup (another type)", contract.BucketNodeConfigs, contract.BackupKey("n1"), &sluicev1.DesiredConfig{}, `names node ""`},
		{"backup of another node", contract.BucketNodeConfigs, contract.BackupKey("n1"), desired("n2"), `"n2", not "n1"`},
		{"no fingerprint", contract.BucketNodeConfigs, contract.DesiredKey("n1"), &sluicev1.DesiredConfig{Node: "n1"}, "no fingerprint or no config"},
		{"no config", contract.BucketNodeConfigs, contract.DesiredKey("n1"), noConfig, "no fingerprint or no config"},
		{"fingerprint not its config's", contract.BucketNodeConfigs, contract.DesiredKey("n1"), mismatched, "does not match its config"},
		{"fence", contract.BucketNodeConfigs, contract.KeyFence, &sluicev1.Fence{Epoch: 2, Holder: "c1"}, ""},
		{"empty fence", contract.BucketNodeConfigs, contract.KeyFence, &sluicev1.Fence{}, "epoch and holder"},
		{"unknown nodeconfigs key", contract.BucketNodeConfigs, "n1.other", desired("n1"), "not a key of this bucket"},

		{"fingerprint record", contract.BucketFingerprints, "abc", &sluicev1.InvalidFingerprint{Fingerprint: "abc"}, ""},
		{"empty fingerprint record", contract.BucketFingerprints, "abc", &sluicev1.InvalidFingerprint{}, `names fingerprint ""`},

		{"status", contract.BucketStatus, "n1", &sluicev1.NodeStatus{Node: "n1"}, ""},
		{"status of another node", contract.BucketStatus, "n1", &sluicev1.NodeStatus{Node: "n2"}, `"n2", not "n1"`},
		{"status with its node's labels", contract.BucketStatus, "n1",
			&sluicev1.NodeStatus{Node: "n1", NodeLabels: map[string]string{"topology.kubernetes.io/zone": "eu-1a", "rack": "r1"}}, ""},
		{"status with too many node labels", contract.BucketStatus, "n1",
			&sluicev1.NodeStatus{Node: "n1", NodeLabels: manyLabels(contract.MaxNodeLabels + 1)}, "the status's node_labels has 257 labels, over the limit of 256"},
		{"status with a control character in a node label", contract.BucketStatus, "n1",
			&sluicev1.NodeStatus{Node: "n1", NodeLabels: map[string]string{"zone": "a\x1b[31m"}}, `holds the control character U+001B`},
		{"presence", contract.BucketNodes, "n1", &sluicev1.NodePresence{Node: "n1"}, ""},
		{"empty presence", contract.BucketNodes, "n1", &sluicev1.NodePresence{}, `names node ""`},
		{"presence with a Kubernetes node's labels", contract.BucketNodes, "n1",
			&sluicev1.NodePresence{Node: "n1", Labels: map[string]string{"topology.kubernetes.io/zone": "eu-1a", "node-role.kubernetes.io/worker": ""}}, ""},
		{"presence with too many labels", contract.BucketNodes, "n1",
			&sluicev1.NodePresence{Node: "n1", Labels: manyLabels(contract.MaxNodeLabels + 1)}, "the presence has 257 labels, over the limit of 256"},
		{"presence with a 900 KB label value", contract.BucketNodes, "n1",
			&sluicev1.NodePresence{Node: "n1", Labels: map[string]string{"zone": strings.Repeat("a", 900_000)}}, `label zone has a value of 900,000 characters, over the limit of 63`},
		{"presence with a control character in a label", contract.BucketNodes, "n1",
			&sluicev1.NodePresence{Node: "n1", Labels: map[string]string{"zone": "a\x1b[31m"}}, `holds the control character U+001B`},

		{"rollout", contract.BucketRollouts, "1-abc", &sluicev1.Rollout{Id: "1-abc"}, ""},
		{"empty rollout", contract.BucketRollouts, "1-abc", &sluicev1.Rollout{}, `names rollout ""`},
		{"active", contract.BucketRollouts, contract.KeyActive, &sluicev1.RolloutRef{Rollout: "1-abc", Revision: "abc"}, ""},
		{"empty last-applied", contract.BucketRollouts, contract.KeyLastApplied, &sluicev1.RolloutRef{}, "names no rollout"},
		{"active read as a rollout", contract.BucketRollouts, contract.KeyActive, &sluicev1.Rollout{Id: "active"}, "holds a RolloutRef"},

		{"lease", contract.BucketLeases, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "c1", Session: "s", AcquiredAt: timestamppb.Now()}, ""},
		{"a fence at the lease key", contract.BucketLeases, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "c1", Epoch: 5}, "names no holder, session or time acquired"},
		{"empty lease", contract.BucketLeases, contract.LeaseCoordinator, &sluicev1.LeaderLease{}, "names no holder"},
		{"instance", contract.BucketInstances, "agent.n1", &sluicev1.Instance{Component: "agent", Instance: "n1"}, ""},
		{"empty instance", contract.BucketInstances, "agent.n1", &sluicev1.Instance{}, "names instance"},
		{"registry status", contract.BucketRegistries, "redis", &sluicev1.RegistryStatus{Name: "redis"}, ""},
		{"empty registry status", contract.BucketRegistries, "redis", &sluicev1.RegistryStatus{}, `names registry ""`},

		{"pause", contract.BucketControl, contract.KeyPause, &sluicev1.PauseRequest{Paused: true, Generation: 1}, ""},
		{"empty pause", contract.BucketControl, contract.KeyPause, &sluicev1.PauseRequest{}, "no generation"},
		{"bad joiners", contract.BucketControl, contract.KeyPause, &sluicev1.PauseRequest{Generation: 1, Joiners: "all"}, "joiners"},
		{"rollout pause", contract.BucketControl, contract.RolloutPauseKey("1-abc"), &sluicev1.PauseRequest{Generation: 2, Rollout: "1-abc"}, ""},
		{"rollout pause of another", contract.BucketControl, contract.RolloutPauseKey("1-abc"), &sluicev1.PauseRequest{Generation: 2, Rollout: "2-abc"}, `not "1-abc"`},
		{"abort", contract.BucketControl, contract.AbortKey("1-abc"), &sluicev1.AbortRequest{Rollout: "1-abc"}, ""},
		{"empty abort", contract.BucketControl, contract.AbortKey("1-abc"), &sluicev1.AbortRequest{}, `names rollout ""`},
		{"forgive", contract.BucketControl, contract.ForgiveKey("abc"), &sluicev1.ForgiveRequest{Fingerprint: "abc"}, ""},
		{"freeze", contract.BucketControl, contract.FreezeKey("xmas"), &sluicev1.Freeze{Id: "xmas", From: timestamppb.New(time.Unix(100, 0)), To: timestamppb.New(time.Unix(200, 0))}, ""},
		{"freeze of another", contract.BucketControl, contract.FreezeKey("xmas"), &sluicev1.Freeze{Id: "easter", From: timestamppb.New(time.Unix(100, 0)), To: timestamppb.New(time.Unix(200, 0))}, `not "xmas"`},
		{"freeze ending before it starts", contract.BucketControl, contract.FreezeKey("xmas"), &sluicev1.Freeze{Id: "xmas", From: timestamppb.New(time.Unix(200, 0)), To: timestamppb.New(time.Unix(100, 0))}, "no period"},
		{"empty forgive", contract.BucketControl, contract.ForgiveKey("abc"), &sluicev1.ForgiveRequest{}, `names fingerprint ""`},
		{"store confirm", contract.BucketControl, contract.KeyStoreConfirm, &sluicev1.StoreConfirm{By: "ops", At: at}, ""},
		{"store confirm naming no one", contract.BucketControl, contract.KeyStoreConfirm, &sluicev1.StoreConfirm{At: at}, "names no operator"},
		{"store id", contract.BucketControl, contract.KeyStoreID, &sluicev1.StoreID{Id: "3f2a9c", CreatedAt: at}, ""},
		{"store id without an id", contract.BucketControl, contract.KeyStoreID, &sluicev1.StoreID{CreatedAt: at}, "has no id"},
		{"reap confirm", contract.BucketControl, contract.KeyReapConfirm, &sluicev1.ReapConfirm{Nodes: []string{"n1"}, At: at}, ""},
		{"empty reap confirm", contract.BucketControl, contract.KeyReapConfirm, &sluicev1.ReapConfirm{At: at}, "names no node"},
		{"registry spec", contract.BucketControl, contract.RegistryKey("redis"), &sluicev1.RegistrySpec{Name: "redis"}, ""},
		{"empty registry spec", contract.BucketControl, contract.RegistryKey("redis"), &sluicev1.RegistrySpec{}, `names registry ""`},
		{"registry confirm", contract.BucketControl, contract.RegistryConfirmKey("redis"), &sluicev1.RegistryConfirm{Digest: "d"}, ""},
		{"empty registry confirm", contract.BucketControl, contract.RegistryConfirmKey("redis"), &sluicev1.RegistryConfirm{}, "names no digest"},
		{"unknown control key", contract.BucketControl, "other", &sluicev1.PauseRequest{Generation: 1}, "not a key of this bucket"},

		{"a bucket sluice does not know", "other", "k", &sluicev1.Revision{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := wellformed.Check(tc.bucket, tc.key, tc.value)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check(%s, %s) = %v, want well-formed", tc.bucket, tc.key, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check(%s, %s) = %v, want an error containing %q", tc.bucket, tc.key, err, tc.wantErr)
			}
		})
	}
}

// Every bucket sluice has is checked: a bucket added to the contract
// without rules would hand values of another type out as empty ones.
func TestCheck_EveryBucketHasRules(t *testing.T) {
	for _, b := range contract.AllBuckets() {
		if !wellformed.Known(b) {
			t.Errorf("bucket %s has no well-formedness rules", b)
		}
	}
}

// manyLabels is n valid labels.
func manyLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("l%05d", i)] = "v"
	}
	return m
}
