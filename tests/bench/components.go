package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/nats-io/nats-server/v2/server"
)

// The components a run is split into. Every goroutine of the bench
// process carries the pprof label "component" of the one that started it
// (goroutines inherit their creator's labels), and every NATS connection is
// named after its component, so the processor time and the messages of a
// measured rollout can be told apart by component within one process.
const (
	compServer       = "server"       // the embedded nats-server, JetStream included
	compConfigurator = "configurator" // the real configurator
	compReaper       = "reaper"       // the real reaper
	compAgents       = "agents"       // the simulated agents (the real agent code, a timer for an apply)
	compCoordinator  = "coordinator"  // the measured coordinator (a child process, or in-process)
	compBench        = "bench"        // the bench's own driving and polling
	compRuntime      = "runtime"      // samples with no label: the garbage collector's workers and the like
)

// Component is one component's share of a measured rollout, per node of
// the fleet: the messages its connections sent to the server and received
// from it, and its processor time (absent where it cannot be told apart:
// a coordinator in a child process is measured whole, by /proc).
type Component struct {
	MsgsSentPerNode     float64  `json:"msgs_sent_per_node"`
	MsgsReceivedPerNode float64  `json:"msgs_received_per_node"`
	BytesPerNode        float64  `json:"bytes_per_node"`
	CPUUSPerNode        *float64 `json:"cpu_us_per_node,omitempty"`
}

// as runs f with the goroutine labels of component c, so that every
// goroutine f starts (a connection's read loop, a subscription's handler,
// a service's loop) is counted as c's.
func as(c string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("component", c), func(context.Context) { f() })
}

// componentOfConn is the component a connection's name says it belongs to:
// the part before the first '-' ("agents-3" → agents).
func componentOfConn(name string) string {
	c, _, _ := strings.Cut(name, "-")
	return c
}

// connCounts is messages and bytes per component, summed over its
// connections as the server counts them.
type connCounts map[string]struct{ sent, received, bytes int64 }

// countConns reads every open client connection's counters from the
// server (connz), summed by component. A connection's InMsgs are what its
// client sent, OutMsgs what it was delivered.
func countConns(s *server.Server) (connCounts, error) {
	cz, err := s.Connz(&server.ConnzOptions{Limit: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("connz: %w", err)
	}
	out := connCounts{}
	for _, c := range cz.Conns {
		k := componentOfConn(c.Name)
		v := out[k]
		v.sent += c.InMsgs
		v.received += c.OutMsgs
		v.bytes += c.InBytes + c.OutBytes
		out[k] = v
	}
	return out, nil
}

// cpuByComponent sums a CPU profile's samples by their "component" label;
// samples with nats-server's own labels (it sets account, stream,
// consumer and type on its streams' goroutines, replacing inherited ones)
// are the server's; unlabelled samples are the runtime's.
func cpuByComponent(prof []byte) (map[string]time.Duration, error) {
	p, err := profile.Parse(bytes.NewReader(prof))
	if err != nil {
		return nil, fmt.Errorf("read the CPU profile: %w", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("the CPU profile has no cpu/nanoseconds samples")
	}
	out := map[string]time.Duration{}
	for _, s := range p.Sample {
		c := compRuntime
		if l := s.Label["component"]; len(l) > 0 {
			c = l[0]
		} else if len(s.Label["account"]) > 0 || len(s.Label["stream"]) > 0 || len(s.Label["type"]) > 0 {
			// nats-server replaces the labels of its streams' and
			// consumers' goroutines with its own (account, stream, …).
			c = compServer
		}
		out[c] += time.Duration(s.Value[idx])
	}
	return out, nil
}

// componentProfile profiles this process's processor time while a
// measured rollout runs, to split it by component; the profile itself is
// also written to keep, if set (--cpuprofile).
type componentProfile struct {
	buf  bytes.Buffer
	keep io.Writer
	on   bool
}

func (p *componentProfile) start() error {
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return fmt.Errorf("start the CPU profile: %w", err)
	}
	p.on = true
	return nil
}

// stop ends the profile and returns the time per component.
func (p *componentProfile) stop() (map[string]time.Duration, error) {
	if !p.on {
		return nil, nil
	}
	pprof.StopCPUProfile()
	p.on = false
	if p.keep != nil {
		if _, err := p.keep.Write(p.buf.Bytes()); err != nil {
			return nil, fmt.Errorf("write the CPU profile: %w", err)
		}
	}
	return cpuByComponent(p.buf.Bytes())
}

// components puts the per-component figures together: messages from the
// connection counters before and after, processor time from the profile
// (and the coordinator's process, when it has one of its own).
func components(before, after connCounts, cpu map[string]time.Duration, coordinatorCPU *time.Duration, nodes int) map[string]Component {
	per := func(x int64) float64 { return round2(float64(x) / float64(max(nodes, 1))) }
	out := map[string]Component{}
	names := map[string]bool{}
	for k := range after {
		names[k] = true
	}
	for k := range cpu {
		names[k] = true
	}
	if coordinatorCPU != nil {
		names[compCoordinator] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a, b := after[k], before[k]
		c := Component{
			MsgsSentPerNode:     per(a.sent - b.sent),
			MsgsReceivedPerNode: per(a.received - b.received),
			BytesPerNode:        per(a.bytes - b.bytes),
		}
		d, ok := cpu[k]
		if k == compCoordinator && coordinatorCPU != nil {
			d, ok = d+*coordinatorCPU, true
		}
		if ok {
			c.CPUUSPerNode = new(round2(float64(d.Nanoseconds()) / 1e3 / float64(max(nodes, 1))))
		}
		out[k] = c
	}
	return out
}
