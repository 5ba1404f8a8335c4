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
	"net/http"
	"os"
	"time"
)

// timeout bounds the whole request; Docker's own healthcheck timeout is the
// outer bound.
const timeout = 2 * time.Second

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL")
		os.Exit(2)
	}
	os.Exit(probe(os.Args[1], os.Stdout))
}

// probe GETs url and prints the status and the start of the body to out.
func probe(url string, out io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(out, "probe %s: %v\n", url, err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(out, "probe %s: %v\n", url, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	fmt.Fprintf(out, "%s %s\n", resp.Status, body)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
