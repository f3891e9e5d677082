package engine

import "fmt"

// Role is what part of a request an engine serves: the whole of it, or one side of a
// prefill/decode (PD) disaggregated pair.
type Role int

// The roles, matching SGLang's disaggregation modes.
const (
	// RolePlain prefills and decodes.
	RolePlain Role = iota
	// RolePrefill computes the prompt's KV cache and answers after the first token.
	RolePrefill
	// RoleDecode receives the KV cache from a prefill engine (no prefill cost) and decodes.
	RoleDecode
)

// String returns the role's flag spelling: plain, prefill or decode.
func (r Role) String() string {
	switch r {
	case RolePlain:
		return "plain"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses plain, prefill or decode.
func ParseRole(s string) (Role, error) {
	switch s {
	case "plain", "":
		return RolePlain, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return 0, fmt.Errorf("role %q: use plain, prefill or decode", s)
}
