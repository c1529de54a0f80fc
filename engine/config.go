package engine

import "github.com/km0/edgeproc/defaults"

// DefaultMaxCouriers is Config.MaxCouriers's default, the contract's.
const DefaultMaxCouriers = defaults.MaxCouriers
