//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gateway

import "net"

// connAlive cannot peek without blocking here, so an idle connection is never reused.
func connAlive(net.Conn) bool { return false }
