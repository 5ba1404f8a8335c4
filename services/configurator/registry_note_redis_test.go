package configurator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The registry's status says keyspace notifications are off while they
// are, and stops saying it once they are turned on (CONFIG SET, no
// restart) and writes arrive, long before the 10-minute sync interval.
func TestRedisRegistry_NotificationsTurnedOn_StatusNoteClears(t *testing.T) {
	rds := redistest.Start(t) // the server default: no notifications
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	addRegistry(t, env, &sluicev1.RegistrySpec{Name: "cmdb", SyncInterval: durationpb.New(10 * time.Minute),
		Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: rds.URL()}}})
	natstest.Eventually(t, wait, "the note that notifications are off", func() bool {
		return strings.Contains(registryStatus(t, env, "cmdb").GetNote(), "keyspace notifications are off")
	})
	ctx := context.Background()
	rc := rds.Client()
	if err := rc.ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
		t.Fatal(err)
	}
	// A write every 200ms, so the watch is never silent for 30s.
	deadline := time.Now().Add(10 * time.Second)
	for vlan := 100; ; vlan++ {
		st := registryStatus(t, env, "cmdb")
		if st.GetNote() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after notifications were turned on the status still notes %q", st.GetNote())
		}
		doc := fmt.Sprintf("kind: Layer2Network\nname: tenant-a\nspec: {vlan: %d, vni: 10100}\n", vlan)
		if err := rc.Set(ctx, "sluice:intents:layer2network.tenant-a", doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
