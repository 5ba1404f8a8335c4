package creds_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
)

// TestPushedRolePermissions_ReachConnectedUsersThroughAReconnect: the role
// permissions live in the account JWT as scoped signing key templates. A
// push of a changed account (what `sluice creds push` does after an
// upgrade) makes the server close the connections of the users signed by a
// changed role's key (nats-server: an altered scope evicts its users); they
// reconnect at once, as every sluice binary does, under the new
// permissions. Users of the other roles keep their connections. No restart.
func TestPushedRolePermissions_ReachConnectedUsersThroughAReconnect(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	n1 := connectAs(t, env, creds.RoleNode, "node-01")
	admin := connectAs(t, env, creds.RoleAdmin, "")
	subject := contract.EventSubject(contract.KindNode, "node-01")
	got, err := admin.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(env.URL, nats.UserCredentials(env.Creds.SystemCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	// delivered publishes a numbered message and says whether the admin
	// receives it within wait. Messages of earlier tries that arrive late
	// are skipped: only this try's message counts.
	sent := 0
	delivered := func(wait time.Duration) bool {
		sent++
		id := []byte(strconv.Itoa(sent))
		if err := n1.nc.Publish(subject, id); err != nil {
			t.Fatal(err)
		}
		until := time.Now().Add(wait)
		for {
			m, err := got.NextMsg(max(time.Until(until), time.Millisecond))
			if err != nil {
				return false
			}
			if bytes.Equal(m.Data, id) {
				return true
			}
		}
	}
	// margin: returns as soon as the message comes.
	if !delivered(30 * time.Second) {
		t.Fatalf("node-01 cannot publish %s before the change", subject)
	}

	// The node role, changed: its own events are denied.
	ac, err := jwt.DecodeAccountClaims(env.Creds.Account)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for key := range ac.SigningKeys {
		scope, ok := ac.SigningKeys.GetScope(key)
		if us, isUser := scope.(*jwt.UserScope); ok && isUser && us.Role == creds.RoleNode {
			us.Template.Pub.Deny.Add("sluice.events.>")
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("found %d node-role scoped keys in the account, want 1", changed)
	}
	seed, err := os.ReadFile(filepath.Join(env.Creds.Dir, "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	operator, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	if env.Creds.Account, err = ac.Encode(operator); err != nil {
		t.Fatal(err)
	}
	// margin: Push returns with the server's answer and each poll as soon
	// as its condition holds; the bounds only catch a hang.
	if err := env.Creds.Push(sys, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "node-01, still connected, refused "+subject, func() bool {
		// Each try publishes. The refusal the server reports proves it; not
		// receiving the message within 200ms only backs it up (a refused
		// message never comes, and one merely late makes the poll try again).
		return !delivered(200*time.Millisecond) && n1.d.has(subject)
	})

	// Signed again with this version's permissions and pushed: allowed again.
	if err := env.Creds.Resign(); err != nil {
		t.Fatal(err)
	}
	if err := env.Creds.Push(sys, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each try waits a second for its own message: one published before the
	// reconnect is refused, and the next try's is not.
	natstest.Eventually(t, 30*time.Second, "node-01, still connected, may publish "+subject+" again",
		func() bool { return delivered(time.Second) })
	// One eviction per push that changed its role; the admin role never changed.
	if r := n1.nc.Stats().Reconnects; r != 2 || !n1.nc.IsConnected() {
		t.Errorf("node-01 reconnected %d time(s) (connected now: %v); want 2, one per push that changed its role", r, n1.nc.IsConnected())
	}
	if r := admin.nc.Stats().Reconnects; r != 0 {
		t.Errorf("the admin user, whose role did not change, reconnected %d time(s); want 0", r)
	}
}
