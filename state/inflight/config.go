package inflight

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultLeaseTTL       = 10 * time.Minute
	DefaultSweepInterval  = time.Second
	DefaultMaxLeases      = 1_000_000
	DefaultDispatchWindow = 64
)

// maxDispatchWindow bounds DispatchWindow: DispatchesSince scans the whole
// window, so it must stay small.
const maxDispatchWindow = 4096

// Config holds the tracker's optional settings. The zero Config selects the
// defaults.
type Config struct {
	// LeaseTTL is how long a lease lives unless released; a caller that dies
	// without releasing stops counting against its engines after this long.
	// Zero selects DefaultLeaseTTL.
	LeaseTTL time.Duration
	// SweepInterval is how often Run expires leases past their TTL. Zero
	// selects DefaultSweepInterval.
	SweepInterval time.Duration
	// MaxLeases bounds the live leases; Acquire beyond it fails with
	// ErrTooManyLeases. Zero selects DefaultMaxLeases.
	MaxLeases int
	// DispatchWindow is how many recent dispatch timestamps are kept per
	// engine for DispatchesSince, which therefore never counts more than
	// this. Zero selects DefaultDispatchWindow.
	DispatchWindow int
}

// Validate reports every invalid field with the fix, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.LeaseTTL < 0 {
		errs = append(errs, fmt.Errorf("inflight: LeaseTTL %v: must be >= 0 (0 selects the default %v)", c.LeaseTTL, DefaultLeaseTTL))
	}
	if c.SweepInterval < 0 {
		errs = append(errs, fmt.Errorf("inflight: SweepInterval %v: must be >= 0 (0 selects the default %v)", c.SweepInterval, DefaultSweepInterval))
	}
	if c.MaxLeases < 0 {
		errs = append(errs, fmt.Errorf("inflight: MaxLeases %d: must be >= 0 (0 selects the default %d)", c.MaxLeases, DefaultMaxLeases))
	}
	if c.DispatchWindow < 0 || c.DispatchWindow > maxDispatchWindow {
		errs = append(errs, fmt.Errorf("inflight: DispatchWindow %d: must be between 0 (the default %d) and %d",
			c.DispatchWindow, DefaultDispatchWindow, maxDispatchWindow))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.MaxLeases == 0 {
		c.MaxLeases = DefaultMaxLeases
	}
	if c.DispatchWindow == 0 {
		c.DispatchWindow = DefaultDispatchWindow
	}
	return c
}
