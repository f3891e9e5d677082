package config

import (
	"fmt"
	"strconv"
	"time"
)

// Duration is a time.Duration written as a Go duration string. Whole seconds
// marshal as "600s" rather than time.Duration's "10m0s", in YAML and JSON.
type Duration struct{ time.Duration }

// String formats whole seconds as "<n>s" and anything else as
// time.Duration does.
func (d Duration) String() string {
	if d.Duration%time.Second == 0 {
		return strconv.FormatInt(int64(d.Duration/time.Second), 10) + "s"
	}
	return d.Duration.String()
}

// MarshalText implements encoding.TextMarshaler (used by JSON and YAML).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts any string
// time.ParseDuration does.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("must be a Go duration string such as \"600s\": %w", err)
	}
	d.Duration = v
	return nil
}
