package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuLimitPeriod is the scheduler period of a CPULimit's quota. Short, so
// a limited process waits at most a few milliseconds once it has spent
// its share (a 100 ms period would stall it up to 75 ms at a quarter of a
// core, longer than any of edgeproc's batches linger).
const cpuLimitPeriod = 10 * time.Millisecond

// CPULimit is a cgroup of its own that lets one process use at most a
// given share of the machine's CPU time, as if it ran on a machine of
// that size: a benchmark's way of giving each of several processes on
// one machine its own budget.
type CPULimit struct {
	dir  string // the cgroup's directory
	root string // where the process goes back to before dir is removed
	pid  int
	v2   bool
}

// LimitCPU puts process pid in a cgroup of its own whose quota is cores
// CPUs (0.5: half of one core), with cgroup v1's cpu controller or cgroup
// v2's cpu.max, whichever the machine mounts at /sys/fs/cgroup. The
// process leaves the cgroup and the cgroup is removed when tb ends. It
// needs root; tb fails when the machine does not let it.
func LimitCPU(tb testing.TB, pid int, cores float64) *CPULimit {
	tb.Helper()
	l, err := limitCPU(pid, cores)
	if err != nil {
		tb.Fatalf("limit the CPU of process %d to %g cores: %v", pid, cores, err)
	}
	tb.Cleanup(l.remove)
	return l
}

func limitCPU(pid int, cores float64) (*CPULimit, error) {
	if cores <= 0 {
		return nil, errors.New("a limit must be above 0 cores")
	}
	period := cpuLimitPeriod.Microseconds()
	quota := int64(cores * float64(period))
	name := fmt.Sprintf("edgeproc-test-%d-%d", os.Getpid(), pid)
	l := &CPULimit{pid: pid}
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cgroup.procs"): // v1
		l.root = "/sys/fs/cgroup/cpu"
		l.dir = filepath.Join(l.root, name)
		if err := os.Mkdir(l.dir, 0o755); err != nil {
			return nil, err
		}
		if err := writeFiles(l.dir, "cpu.cfs_period_us", strconv.FormatInt(period, 10), "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			l.remove()
			return nil, err
		}
	case fileExists("/sys/fs/cgroup/cgroup.controllers"): // v2
		l.root, l.v2 = "/sys/fs/cgroup", true
		// The cpu controller must be on for the root's children.
		if err := writeFiles(l.root, "cgroup.subtree_control", "+cpu"); err != nil {
			return nil, fmt.Errorf("enable the cpu controller: %w", err)
		}
		l.dir = filepath.Join(l.root, name)
		if err := os.Mkdir(l.dir, 0o755); err != nil {
			return nil, err
		}
		if err := writeFiles(l.dir, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
			l.remove()
			return nil, err
		}
	default:
		return nil, errors.New("no cgroup cpu controller mounted at /sys/fs/cgroup")
	}
	if err := writeFiles(l.dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		l.remove()
		return nil, err
	}
	return l, nil
}

// Throttled is how long the process has been held back by its quota so
// far: more than a little means it wanted more than its share.
func (l *CPULimit) Throttled() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	key, unit := "throttled_time", time.Nanosecond // v1: ns
	if l.v2 {
		key, unit = "throttled_usec", time.Microsecond
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", key, err)
			}
			return time.Duration(n) * unit, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s/cpu.stat", key, l.dir)
}

// remove moves the process back to the root cgroup, if it is still
// there, and removes the cgroup.
func (l *CPULimit) remove() {
	if processAlive(l.pid) {
		_ = writeFiles(l.root, "cgroup.procs", strconv.Itoa(l.pid))
	}
	_ = os.Remove(l.dir)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFiles writes each value to its file in dir, as name, value pairs.
func writeFiles(dir string, nameValues ...string) error {
	for i := 0; i+1 < len(nameValues); i += 2 {
		path := filepath.Join(dir, nameValues[i])
		if err := os.WriteFile(path, []byte(nameValues[i+1]), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
