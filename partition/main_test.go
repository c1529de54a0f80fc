package partition

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// The package's tests take about two minutes; well past that, one is stuck.
func TestMain(m *testing.M) { testenv.Main(m, 8*time.Minute) }
