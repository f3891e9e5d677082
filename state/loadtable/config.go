package loadtable

import (
	"errors"
	"fmt"
	"time"
)

// DefaultFreshness is how long a rank's report stays fresh after its capture
// when Config.Freshness is zero.
const DefaultFreshness = 5 * time.Second

// Config holds the load table's optional settings. The zero Config selects
// the defaults.
type Config struct {
	// Freshness is how long after its CapturedAt a rank's report counts as
	// current: fresh while now - CapturedAt <= Freshness. Zero selects
	// DefaultFreshness.
	Freshness time.Duration
	// ClockSkew is how far in the future (by the router's clock) a report's
	// CapturedAt may be and still be accepted; engines stamp reports with
	// their own clocks. Zero, the default, accepts no future timestamps.
	ClockSkew time.Duration
	// Now is the router clock freshness and clock skew are judged by; nil is time.Now. A
	// virtual-time replay passes a clock.Manual's Now.
	Now func() time.Time
}

// Validate reports every invalid field with the fix, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.Freshness < 0 {
		errs = append(errs, fmt.Errorf("loadtable: Freshness %v: must be >= 0 (0 selects the default %v)", c.Freshness, DefaultFreshness))
	}
	if c.ClockSkew < 0 {
		errs = append(errs, fmt.Errorf("loadtable: ClockSkew %v: must be >= 0 (0 accepts no report from the future)", c.ClockSkew))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Freshness == 0 {
		c.Freshness = DefaultFreshness
	}
	return c
}
