//go:build !amd64

package kvindex

// prefetchLines is a hint only (see prefetch_amd64.go); elsewhere it does
// nothing.
func prefetchLines(p *uint32, n int) {}
