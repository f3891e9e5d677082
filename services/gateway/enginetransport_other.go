//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gateway

import "net"

// connPeeker cannot peek without blocking here, so an idle connection is never reused.
type connPeeker struct{}

func newConnPeeker(net.Conn) *connPeeker { return &connPeeker{} }

func (*connPeeker) connAlive() bool { return false }

// sendWait writes nothing: the caller writes the request. A pooled connection is never
// handed out here, so check is always false.
func (*connPeeker) sendWait(_ []byte, check bool) (sent int, alive bool, err error) {
	return 0, !check, nil
}
