package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is the user+system CPU time used so far by process pid, from
// /proc; 0 when it cannot be read (not Linux, process gone).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may contain spaces: fields are counted
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * time.Second / clockTicks
}

// cpuMeter measures the CPU share of a few processes over an interval.
type cpuMeter struct {
	pids  []int
	start []time.Duration
	at    time.Time
}

func startCPU(pids ...int) *cpuMeter {
	m := &cpuMeter{pids: pids, at: time.Now()}
	for _, p := range pids {
		m.start = append(m.start, cpuTime(p))
	}
	return m
}

// seconds is each process's CPU time since start; 0 for pid 0.
func (m *cpuMeter) seconds() []time.Duration {
	out := make([]time.Duration, len(m.pids))
	for i, p := range m.pids {
		if p != 0 {
			out[i] = cpuTime(p) - m.start[i]
		}
	}
	return out
}

// percent is each process's CPU time since start as a percentage of one
// core (200 % = both cores of this machine); -1 for pid 0 (not measured).
func (m *cpuMeter) percent() []float64 {
	wall := time.Since(m.at)
	out := make([]float64, len(m.pids))
	for i, p := range m.pids {
		if p == 0 || wall <= 0 {
			out[i] = -1
			continue
		}
		out[i] = 100 * float64(cpuTime(p)-m.start[i]) / float64(wall)
	}
	return out
}

// peakRSS is the peak resident set size of process pid (VmHWM in
// /proc/PID/status), bytes; 0 when it cannot be read.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
