package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// percentile is the nearest-rank p-th percentile of xs (the smallest value
// at least p% of them are at or below), rounded to 2 decimals; 0 for no
// values. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return round2(s[i])
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// parseLoadAvg reads the 1-minute load average from the text of /proc/loadavg
// ("0.52 0.58 0.59 1/389 12345").
func parseLoadAvg(text string) (float64, error) {
	fields := strings.Fields(text)
	if len(fields) < 3 {
		return 0, fmt.Errorf("loadavg %q: want three load averages first", text)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("loadavg %q: the 1-minute load %q is not a load", text, fields[0])
	}
	return v, nil
}

// loadAvg is the machine's 1-minute load average, nil where /proc/loadavg
// cannot be read (not Linux): the BENCH line then leaves it out.
func loadAvg() *float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	v, err := parseLoadAvg(string(b))
	if err != nil {
		return nil
	}
	return &v
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go builds for.
const clockTicks = 100

// parseProcStatCPU reads a process's user + system time from the text of
// /proc/PID/stat. The command name (field 2) is in parentheses and may hold
// spaces, so fields are counted from the last ')': utime and stime are the
// 14th and 15th fields, the 12th and 13th after it.
func parseProcStatCPU(text string) (time.Duration, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat %q: no command name", text)
	}
	f := strings.Fields(text[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat %q: want at least 15 fields", text)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("proc stat %q: time %q is not a count of ticks", text, s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// selfCPU is the processor time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf is p's processor time so far, nil where it has none of its own.
func cpuOf(p Process) *time.Duration {
	d, ok := p.CPU()
	if !ok {
		return nil
	}
	return &d
}

// millis is d in milliseconds, rounded to 2 decimals.
func millis(d time.Duration) float64 { return round2(float64(d.Nanoseconds()) / 1e6) }

// peakRSSMB is this process's peak resident memory in MiB (VmHWM in
// /proc/self/status), nil where it cannot be read.
func peakRSSMB() *float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return nil
			}
			return new(round2(kb / 1024))
		}
	}
	return nil
}
