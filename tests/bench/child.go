package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// CoordinatorSpec is what a coordinator process is started with.
type CoordinatorSpec struct {
	URL         string
	Instance    string
	LeaderLease time.Duration
	NodeLease   time.Duration
	// HeapProfile, if set, is where the coordinator writes its heap
	// profile (in use, after a collection) when it stops, its state of the
	// whole fleet still loaded.
	HeapProfile string
}

// Process is a coordinator running in a process of its own.
type Process interface {
	// Stop ends it as SIGTERM does (its term ends and it releases the
	// lease), waits for it and reports its peak heap in MiB. Safe twice.
	Stop() (heapMB float64, err error)
	// Pause stops the process (SIGSTOP) for d and resumes it (SIGCONT),
	// as a long GC pause or a descheduled VM looks to the rest of the
	// system. It returns once the process is resumed.
	Pause(ctx context.Context, d time.Duration) error
	// CPU is the processor time the process has used so far (user and
	// system); ok is false where it is not a process of its own (it is then
	// counted in the bench process's) or cannot be read.
	CPU() (used time.Duration, ok bool)
}

// StartChild starts cmd, a process that runs RunCoordinator: it reads the
// heap figure from its standard output.
func StartChild(cmd *exec.Cmd) (Process, error) {
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the coordinator process: %w", err)
	}
	return &child{cmd: cmd, out: out}, nil
}

type child struct {
	cmd  *exec.Cmd
	out  io.Reader
	once sync.Once
	heap float64
	err  error
	live float64 // the peak live heap, MB (HEAP's peak_heap_live_mb), once stopped
}

func (c *child) Stop() (float64, error) {
	c.once.Do(func() {
		// A stopped process takes SIGTERM only once continued.
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		c.heap = -1
		sc := bufio.NewScanner(c.out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "HEAP "); ok {
				var h struct {
					PeakMB float64 `json:"peak_heap_inuse_mb"`
					LiveMB float64 `json:"peak_heap_live_mb"`
				}
				if err := json.Unmarshal([]byte(v), &h); err == nil {
					c.heap, c.live = h.PeakMB, h.LiveMB
				}
			}
		}
		if err := c.cmd.Wait(); err != nil {
			c.err = fmt.Errorf("coordinator process: %w", err)
		} else if c.heap < 0 {
			c.err = errors.New("coordinator process reported no heap figure")
		}
	})
	return c.heap, c.err
}

func (c *child) Pause(ctx context.Context, d time.Duration) error {
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause the coordinator process: %w", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume the coordinator process: %w", err)
	}
	return ctx.Err()
}

func (c *child) CPU() (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	d, err := parseProcStatCPU(string(b))
	return d, err == nil
}

// RunCoordinator is the child process's work: it runs the coordinator until
// ctx ends, sampling the heap every 50 ms, and prints the peaks to out as
// HEAP {"peak_heap_inuse_mb": …, "peak_heap_live_mb": …}: the spans in use,
// garbage included, and the heap the last collection found live
// (runtime/metrics /gc/heap/live:bytes).
func RunCoordinator(ctx context.Context, s CoordinatorSpec, log zerolog.Logger, out io.Writer) error {
	nc, err := nats.Connect(s.URL, nats.Name(compCoordinator+"-"+s.Instance))
	if err != nil {
		return err
	}
	defer nc.Close()
	settings := contract.DefaultSettings()
	if s.LeaderLease > 0 {
		settings.LeaderLease = s.LeaderLease
	}
	if s.NodeLease > 0 {
		settings.NodeLease = s.NodeLease
	}
	c, err := coordinator.New(coordinator.Config{Conn: nc, Settings: settings, Log: log, Instance: s.Instance})
	if err != nil {
		return err
	}
	var peak, livePeak uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			if metrics.Read(live); live[0].Value.Kind() == metrics.KindUint64 {
				livePeak = max(livePeak, live[0].Value.Uint64())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	// The profile is taken as the term ends (ctx cancelled), before Run
	// returns and lets the fleet's state go.
	heapErr := make(chan error, 1)
	if s.HeapProfile != "" {
		go func() {
			<-ctx.Done()
			heapErr <- writeHeapProfile(s.HeapProfile)
		}()
	} else {
		heapErr <- nil
	}
	err = c.Run(ctx)
	<-done
	if herr := <-heapErr; herr != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", herr)
	}
	fmt.Fprintf(out, "HEAP {\"peak_heap_inuse_mb\": %.1f, \"peak_heap_live_mb\": %.1f}\n", float64(peak)/(1<<20), float64(livePeak)/(1<<20))
	return err
}

// writeHeapProfile writes the heap in use, as of a collection made now.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}
