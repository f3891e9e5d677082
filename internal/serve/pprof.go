package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// PprofFlag is the flag every long-running process binds to its profiling address.
const PprofFlag = "pprof-addr"

// PprofAddr resolves a -pprof-addr value: "" is off; an address without a host (":6060")
// binds loopback only (127.0.0.1:6060), so profiles are never exposed unless a host is named
// (0.0.0.0:6060 or a pod address). docs/operations.md describes the endpoint.
func PprofAddr(addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-%s %q: want host:port or :port (loopback), e.g. :6060: %w", PprofFlag, addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Pprof is a running profiling endpoint: net/http/pprof's handlers under /debug/pprof/ on
// their own listener, apart from every serving port.
type Pprof struct {
	lis net.Listener
	srv *http.Server
}

// StartPprof binds addr (resolved by PprofAddr; "" starts nothing and returns nil) and serves
// the profiles until Close.
func StartPprof(addr string, logger *slog.Logger) (*Pprof, error) {
	addr, err := PprofAddr(addr)
	if err != nil || addr == "" {
		return nil, err
	}
	lis, err := Listen(PprofFlag, addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No write timeout: a CPU profile or trace streams for its ?seconds=.
	p := &Pprof{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	if logger != nil {
		logger.Info("pprof serving", slog.String("addr", p.Addr()))
	}
	go func() {
		if err := p.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && logger != nil {
			logger.Warn("pprof endpoint stopped", slog.Any("error", err))
		}
	}()
	return p, nil
}

// Addr is the bound address.
func (p *Pprof) Addr() string { return p.lis.Addr().String() }

// Close stops the endpoint, cutting a profile being taken. A nil Pprof is a no-op.
func (p *Pprof) Close() error {
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return p.srv.Close()
	}
	return nil
}
