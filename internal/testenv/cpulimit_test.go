package testenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A busy loop limited to a tenth of a core is held back by its quota, and
// the cgroup is gone once the test ends.
func TestLimitCPU_HoldsABusyProcessBack(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var dir string
	t.Run("limited", func(t *testing.T) {
		l := LimitCPU(t, cmd.Process.Pid, 0.1)
		dir = l.dir
		WaitFor(t, 30*time.Second, "the loop throttled", func() bool {
			d, err := l.Throttled()
			if err != nil {
				t.Fatal(err)
			}
			return d > 0
		})
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there after the test (stat: %v)", dir, err)
	}
}
