//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gateway

import "net"

// connPeeker cannot peek without blocking here, so an idle connection is never reused.
type connPeeker struct{}

func newConnPeeker(net.Conn) *connPeeker { return &connPeeker{} }

func (*connPeeker) connAlive() bool { return false }
