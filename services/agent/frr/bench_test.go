package frr_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// fiftyRoutes is the measured config: 50 VRF routes in 10 VRFs,
// each with an IPv4 and an IPv6 import and export item and a community.
func fiftyRoutes() *sluicev1.NodeConfig {
	cfg := &sluicev1.NodeConfig{}
	for v := range 10 {
		for r := range 5 {
			cfg.Intents = append(cfg.Intents, vrfRoute(fmt.Sprintf("leak-%d-%d", v, r), fmt.Sprintf("tenant%d", v), uint32(10*(r+1)), "65000:100",
				items(fmt.Sprintf("10.%d.%d.0/24 le 28", v, r), fmt.Sprintf("2001:db8:%x:%x::/64", v, r)),
				items(fmt.Sprintf("10.%d.%d.0/24", 100+v, r), fmt.Sprintf("2001:db8:%x:%x::/64 le 80", 0x100+v, r))))
		}
	}
	return cfg
}

// BenchmarkRender_50RoutesIn10VRFs is the render and merge cost of one
// apply (kernel VRFs, the operator's base file).
func BenchmarkRender_50RoutesIn10VRFs(b *testing.B) {
	cfg, s := fiftyRoutes(), settings()
	base, err := os.ReadFile(filepath.Join("testdata", "base.conf"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		out, err := frr.Render(cfg, s)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := frr.Merge(string(base), out); err != nil {
			b.Fatal(err)
		}
	}
}

// The benchmark's config is one FRR accepts.
func TestBenchmarkConfig_PassesFRRsCheck(t *testing.T) {
	requireVtysh(t)
	out := render(t, fiftyRoutes(), settings())
	if err := frr.Validate(ctxFor(t, 30*time.Second), merge(t, readTestdata(t, "base.conf"), out), ""); err != nil {
		t.Fatal(err)
	}
}
