package bench

import (
	"bytes"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 … 1: unsorted
	}
	tests := []struct {
		name  string
		given []float64
		p     float64
		want  float64
	}{
		{name: "no values: 0", given: nil, p: 50, want: 0},
		{name: "one value is every percentile", given: []float64{7.5}, p: 99, want: 7.5},
		{name: "p50 of 1…100 is 50 (nearest rank)", given: hundred, p: 50, want: 50},
		{name: "p99 of 1…100 is 99, not the maximum", given: hundred, p: 99, want: 99},
		{name: "p100 is the maximum", given: hundred, p: 100, want: 100},
		{name: "p99 of 10 values is the largest", given: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, p: 99, want: 10},
		{name: "p50 of an even count is the lower middle", given: []float64{4, 1, 3, 2}, p: 50, want: 2},
		{name: "one slow node shows in p99, not in p50", given: append(slices.Repeat([]float64{2}, 99), 500), p: 99, want: 2},
		{name: "two slow nodes in 100 show in p99", given: append(slices.Repeat([]float64{2}, 98), 500, 600), p: 99, want: 500},
		{name: "rounded to 2 decimals", given: []float64{1.23456}, p: 50, want: 1.23},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.given)
			if got := percentile(tt.given, tt.p); got != tt.want {
				t.Errorf("percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
			if !slices.Equal(tt.given, before) {
				t.Errorf("percentile reordered its input: %v", tt.given)
			}
		})
	}
}

func TestParseLoadAvg(t *testing.T) {
	tests := []struct {
		name    string
		given   string
		want    float64
		wantErr bool
	}{
		{name: "the 1-minute figure", given: "0.52 0.58 0.59 1/389 12345\n", want: 0.52},
		{name: "a loaded machine", given: "12.07 3.50 1.00 9/1024 777", want: 12.07},
		{name: "empty", given: "", wantErr: true},
		{name: "too few fields", given: "0.52", wantErr: true},
		{name: "not a number", given: "load 0.5 0.5 1/2 3", wantErr: true},
		{name: "negative", given: "-1.0 0.5 0.5 1/2 3", wantErr: true},
		{name: "NaN", given: "NaN 0.5 0.5 1/2 3", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLoadAvg(tt.given)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseLoadAvg(%q) = %v, %v; want error %v", tt.given, got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseLoadAvg(%q) = %v, want %v", tt.given, got, tt.want)
			}
		})
	}
}

func TestPerSecondPer1k(t *testing.T) {
	tests := []struct {
		name   string
		writes uint64
		d      time.Duration
		nodes  int
		want   float64
	}{
		// The default lease, 3 minutes: a beat a minute per node.
		{name: "1,000 nodes beating once a minute", writes: 1000, d: time.Minute, nodes: 1000, want: 16.67},
		{name: "per 1,000: 100,000 nodes", writes: 100_000, d: time.Minute, nodes: 100_000, want: 16.67},
		{name: "no beats in the window", writes: 0, d: 2 * time.Second, nodes: 1000, want: 0},
		{name: "no duration: 0, not +Inf", writes: 5, d: 0, nodes: 1000, want: 0},
		{name: "no nodes: 0", writes: 5, d: time.Second, nodes: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := perSecondPer1k(tt.writes, tt.d, tt.nodes); got != tt.want {
				t.Errorf("perSecondPer1k(%d, %s, %d) = %v, want %v", tt.writes, tt.d, tt.nodes, got, tt.want)
			}
		})
	}
}

func TestParseProcStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis: fields count from the last ')'.
	line := "4242 (sluice (bench) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, err := parseProcStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want { // (250 + 75) ticks of 10 ms
		t.Fatalf("cpu = %s, want %s", got, want)
	}
	for _, bad := range []string{"4242 sluice S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 -5 75 0"} {
		if _, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("parseProcStatCPU(%q) = nil error, want one", bad)
		}
	}
}

func TestCPUByComponent_SplitsByLabel(t *testing.T) {
	// A profile of two labelled goroutines burning processor time: each
	// shows up under its own component; nothing else is invented.
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skip("a CPU profile is already running:", err)
	}
	// Each spins until the process has had 600ms of processor time (and at
	// least 300ms have passed): on a loaded machine 300ms of wall time can
	// be a few tens of milliseconds of processor time.
	var wg sync.WaitGroup
	start := processCPU(t)
	spin := func(c string, d time.Duration) {
		wg.Add(1)
		as(c, func() {
			go func() {
				defer wg.Done()
				end, giveUp := time.Now().Add(d), time.Now().Add(20*time.Second)
				for n := 0; time.Now().Before(giveUp); n++ {
					if n%1000 == 0 && !time.Now().Before(end) && processCPU(t)-start >= 2*d {
						return
					}
				}
			}()
		})
	}
	spin(compAgents, 300*time.Millisecond)
	spin(compConfigurator, 300*time.Millisecond)
	wg.Wait()
	pprof.StopCPUProfile()
	got, err := cpuByComponent(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{compAgents, compConfigurator} {
		if got[c] < 50*time.Millisecond {
			t.Errorf("%s: %v of processor time, want most of 300ms (all: %v)", c, got[c], got)
		}
	}
	if got[compServer] != 0 || got[compCoordinator] != 0 {
		t.Errorf("time counted for components that did not run: %v", got)
	}
}

func TestComponentOfConn(t *testing.T) {
	for name, want := range map[string]string{"agents-3": "agents", "coordinator-bench": "coordinator", "configurator": "configurator", "bench-driver": "bench", "": ""} {
		if got := componentOfConn(name); got != want {
			t.Errorf("componentOfConn(%q) = %q, want %q", name, got, want)
		}
	}
}

// processCPU is the processor time this process has used (user + system).
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
