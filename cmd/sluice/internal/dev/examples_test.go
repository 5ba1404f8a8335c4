package dev

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
)

// composeLabels reads the agents' --labels from docker-compose.yaml.
func composeLabels(t *testing.T) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../../../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, m := range regexp.MustCompile(`"--node", "([^"]+)", "--labels", "([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		labels := map[string]string{}
		for _, kv := range strings.Split(m[2], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
		out[m[1]] = labels
	}
	if len(out) == 0 {
		t.Fatal("docker-compose.yaml: no agent with --node and --labels")
	}
	return out
}

// Every example intent reaches a node of `sluice dev`'s default fleet and
// of docker-compose's: an example that selects nothing teaches nothing
// (compose's racks are rack-a1 …, dev's rack-1 and rack-2).
func TestExamples_SelectNodesInDevAndCompose(t *testing.T) {
	examples, err := intent.ParseFiles("../../../../examples/layer2.yaml", "../../../../examples/tables.yaml", "../../../../examples/vrf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dev := map[string]map[string]string{}
	for i := range 5 { // sluice dev's default --agents
		dev[NodeName(i, 5)] = NodeLabels(i)
	}
	for fleet, nodes := range map[string]map[string]map[string]string{"sluice dev": dev, "docker compose": composeLabels(t)} {
		for _, in := range examples {
			n := 0
			for _, labels := range nodes {
				if render.Selects(intent.Selector(in), labels) {
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: example %s selects none of the %d nodes (nodeSelector %v)", fleet, intent.ID(in), len(nodes), intent.Selector(in).GetMatchLabels())
			}
		}
	}
}
