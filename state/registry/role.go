package registry

import (
	"fmt"
	"strconv"
)

// Role is how an engine serves requests: whole requests (plain), or one
// stage of prefill/decode disaggregation.
type Role uint8

// Roles. RoleUnspecified is the zero value and is never valid on an Engine.
const (
	RoleUnspecified Role = iota
	RolePlain
	RolePrefill
	RoleDecode
)

// numRoles is the number of Role values, used to size per-role arrays.
const numRoles = int(RoleDecode) + 1

// ParseRole parses the configuration spelling of a role: "plain", "prefill"
// or "decode" (exactly, lower case). Any other string, including "", is an
// error naming the accepted values.
func ParseRole(s string) (Role, error) {
	switch s {
	case "plain":
		return RolePlain, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return RoleUnspecified, fmt.Errorf("role %q: must be one of plain, prefill, decode", s)
}

// String returns the configuration spelling of r ("plain", "prefill",
// "decode"), "unspecified" for RoleUnspecified, and "Role(n)" otherwise.
func (r Role) String() string {
	switch r {
	case RoleUnspecified:
		return "unspecified"
	case RolePlain:
		return "plain"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// disaggregated reports whether r is a prefill/decode (PD) stage.
func (r Role) disaggregated() bool { return r == RolePrefill || r == RoleDecode }
