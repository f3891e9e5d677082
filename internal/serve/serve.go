// Package serve is how sluice's processes (decider, gateway, simulated engine, enginelink) run
// their listeners and stop: bind with errors that name the flag, serve until the context ends
// or a listener fails, then drain within one deadline — readiness fails first, every listener
// stops accepting at once, servers drain in the order given, and whatever is still running at
// the deadline is cut.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// Listen binds addr on TCP; the error names the flag the address came from.
func Listen(flag, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-%s %s: %w", flag, addr, err)
	}
	return lis, nil
}

// Server is one server and the listeners it serves. Build it with HTTP, GRPC or Accept.
type Server struct {
	name string
	lis  []net.Listener
	// serve serves one listener until it is closed or the server stops; a clean stop is nil.
	serve func(net.Listener) error
	// drain stops the server gracefully, returning once in-flight work is done or ctx ended.
	drain func(ctx context.Context) error
	// stop cuts what drain left running.
	stop func()
}

// HTTP serves srv on lis; draining is srv.Shutdown, cutting is srv.Close.
func HTTP(srv *http.Server, lis net.Listener) Server {
	return Server{name: "http server", lis: []net.Listener{lis},
		serve: func(l net.Listener) error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		drain: srv.Shutdown,
		stop:  func() { _ = srv.Close() },
	}
}

// GRPC serves srv on every listener given; draining is GracefulStop, cutting is Stop.
func GRPC(srv *grpc.Server, lis ...net.Listener) Server {
	return Server{name: "grpc server", lis: lis,
		serve: func(l net.Listener) error {
			if err := srv.Serve(l); !errors.Is(err, grpc.ErrServerStopped) {
				return err
			}
			return nil
		},
		drain: func(ctx context.Context) error {
			done := make(chan struct{})
			go func() {
				srv.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		stop: srv.Stop,
	}
}

// Accept hands every connection accepted on lis to handle (in the accepting goroutine, so
// handle must not block); draining only stops accepting.
func Accept(name string, lis net.Listener, handle func(net.Conn)) Server {
	return Server{name: name, lis: []net.Listener{lis},
		serve: func(l net.Listener) error {
			for {
				c, err := l.Accept()
				if err != nil {
					return err
				}
				handle(c)
			}
		},
		drain: func(context.Context) error { return nil },
		stop:  func() {},
	}
}

// Options are the hooks and the deadline of Run.
type Options struct {
	// ShutdownTimeout bounds the whole drain.
	ShutdownTimeout time.Duration
	// OnServing runs once every listener is being served: readiness may turn on.
	OnServing func()
	// OnDrain runs first when the drain starts, before any listener closes: readiness fails
	// first, so probes see it while in-flight work finishes.
	OnDrain func()
	// Logger reports a drain cut at the deadline; nil logs nothing.
	Logger *slog.Logger
}

// Run serves every server until ctx ends or one of them fails, then drains: OnDrain, every
// listener closes (nothing new is accepted anywhere), the servers drain one after the other in
// the order given — list a server that others call into after them — within ShutdownTimeout,
// and the ones still running at the deadline are cut. It returns the first serve error, or
// else the first drain error other than the deadline.
func Run(ctx context.Context, opts Options, servers ...Server) error {
	failed := make(chan error, 1)
	var wg sync.WaitGroup
	var listeners []*stoppable
	for _, s := range servers {
		for _, l := range s.lis {
			sl := &stoppable{Listener: l}
			listeners = append(listeners, sl)
			wg.Go(func() {
				if err := s.serve(sl); err != nil && !sl.stopped() {
					select {
					case failed <- fmt.Errorf("%s: %w", s.name, err):
					default:
					}
				}
			})
		}
	}
	if opts.OnServing != nil {
		opts.OnServing()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-failed:
	}

	if opts.OnDrain != nil {
		opts.OnDrain()
	}
	for _, l := range listeners {
		l.stop()
	}
	dctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	var drainErr error
	for i, s := range servers {
		err := s.drain(dctx)
		if err == nil {
			continue
		}
		if dctx.Err() != nil {
			if opts.Logger != nil {
				opts.Logger.Warn("drain deadline reached; closing remaining connections", slog.Duration("shutdown_timeout", opts.ShutdownTimeout))
			}
			for _, rest := range servers[i:] {
				rest.stop()
			}
			break
		}
		if drainErr == nil {
			drainErr = fmt.Errorf("%s shutdown: %w", s.name, err)
		}
	}
	wg.Wait()
	if serveErr != nil {
		return serveErr
	}
	return drainErr
}

// stoppable is a listener Run closes itself when the drain starts, so every server stops
// accepting at once, whatever order they drain in; the accept error that follows is no failure.
type stoppable struct {
	net.Listener
	once      sync.Once
	isStopped atomic.Bool
}

func (l *stoppable) stop() {
	l.isStopped.Store(true)
	_ = l.Close()
}

func (l *stoppable) stopped() bool { return l.isStopped.Load() }

// Close closes the listener once; a server closing it again (Shutdown, GracefulStop) is no error.
func (l *stoppable) Close() error {
	var err error
	l.once.Do(func() { err = l.Listener.Close() })
	return err
}
