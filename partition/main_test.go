package partition

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// The package's tests take about ten minutes with -race on a loaded
// machine (five on a quiet one), the chaos schedule's besides; well past
// that, one is stuck.
func TestMain(m *testing.M) { testenv.Main(m, 15*time.Minute+testenv.ChaosDuration()) }
