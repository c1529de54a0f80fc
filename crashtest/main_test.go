package crashtest

import (
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// Well past the package's usual run time (the chaos schedule's included),
// a test is stuck: say where.
func TestMain(m *testing.M) { testenv.Main(m, 12*time.Minute+testenv.ChaosDuration()) }
