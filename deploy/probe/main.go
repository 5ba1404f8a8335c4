// Command probe GETs one URL and exits 0 when the answer is 200 OK, else 1:
// the healthcheck of the nats-server image, which is FROM scratch and so
// has no curl or wget (the sluice binaries have their own --probe). The
// image runs it as
//
//	/probe http://127.0.0.1:8222/healthz
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/pkg/health"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL")
		os.Exit(2)
	}
	os.Exit(probe(os.Args[1], os.Stdout))
}

// probe is the sluice binaries' --probe: health.Probe (2s bound).
func probe(url string, out io.Writer) int { return health.Probe(context.Background(), url, out) }
