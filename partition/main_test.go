package partition

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// The package's tests take about five minutes, the chaos schedule's
// besides; well past that, one is stuck.
func TestMain(m *testing.M) { testenv.Main(m, 10*time.Minute+testenv.ChaosDuration()) }
