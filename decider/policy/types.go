package policy

// Policy type names as they appear in configuration and metrics.
const (
	TypeRoundRobin   = "round_robin"
	TypeRandom       = "random"
	TypePowerOfTwo   = "power_of_two"
	TypeLoadBased    = "load_based"
	TypeCacheAware   = "cache_aware"
	TypeSessionAware = "session_aware"
	TypeSticky       = "sticky"
)
