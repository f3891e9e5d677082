package enginelink

import "time"

// SetKVDialTimeout shortens the bound of a KV SUB dial for a test; the returned func restores it.
func SetKVDialTimeout(d time.Duration) (restore func()) {
	old := kvDialTimeout
	kvDialTimeout = d
	return func() { kvDialTimeout = old }
}
