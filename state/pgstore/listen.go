package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run listens for new versions on a dedicated connection until ctx is done,
// then returns nil. On each notification (and after every reconnection, to
// catch up on what it missed) it loads the version in force and publishes
// it. A lost connection is retried with exponential back-off between
// ReconnectMin and ReconnectMax (jittered); every statement on the
// connection has a deadline (QueryTimeout), so a backend that hangs instead
// of failing is noticed within PingInterval + QueryTimeout and replaced; a
// store opened from its snapshot file
// finishes its start-up (migrations, seed) once the database answers.
func (s *Store) Run(ctx context.Context) error {
	backoff := s.cfg.ReconnectMin
	down := false
	for {
		connected, err := s.listen(ctx)
		s.listening.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = s.cfg.ReconnectMin
		}
		if !down || connected {
			s.logger.Warn("configuration listener lost its connection; reconnecting",
				slog.Duration("retry_in", backoff), slog.Any("error", err))
		}
		down = true
		s.reconnects.Add(1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, s.cfg.ReconnectMax)
	}
}

// listen runs one connection's life. connected reports whether it got as far
// as listening and catching up.
func (s *Store) listen(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return false, err
	}
	// bounded runs one statement of the listener under QueryTimeout.
	bounded := func(what string, f func(context.Context) error) error {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
		defer cancel()
		if err := f(qctx); err != nil {
			if ctx.Err() == nil && errors.Is(qctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s: no answer within %s (hung backend or network partition): %w", what, s.cfg.QueryTimeout, err)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		s.lastContact.Store(s.now().UnixNano())
		return nil
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if err := bounded("initialise", s.initialise); err != nil {
		return false, err
	}
	if err := bounded("listen", func(ctx context.Context) error {
		_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.cfg.Channel}.Sanitize())
		return err
	}); err != nil {
		return false, err
	}
	if err := bounded("reload", func(ctx context.Context) error { return s.reload(ctx, conn) }); err != nil {
		return false, err
	}
	s.listening.Store(true)
	s.logger.Info("configuration listener connected", slog.String("channel", s.cfg.Channel),
		slog.Int64("config_version", s.Current().Version))
	for {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.PingInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, nil
		case errors.Is(err, context.DeadlineExceeded):
			if err := bounded("ping", conn.Ping); err != nil {
				return true, err
			}
			continue
		case err != nil:
			return true, err
		}
		s.lastContact.Store(s.now().UnixNano())
		if v, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil && v <= s.Current().Version && s.Current().Source == SourcePostgres {
			continue // our own write, already published
		}
		if err := bounded("reload", func(ctx context.Context) error { return s.reload(ctx, conn) }); err != nil {
			return true, err
		}
	}
}

// reload loads the head and publishes it if newer.
func (s *Store) reload(ctx context.Context, conn *pgx.Conn) error {
	snap, err := s.loadHead(ctx, conn)
	if err != nil {
		return err
	}
	s.lastReload.Store(s.now().UnixNano())
	if s.publish(snap) {
		s.logger.Info("configuration reloaded", slog.Int64("config_version", snap.Version))
	}
	return nil
}

// jitter returns a wait in [d/2, d], so replicas that lost the database
// together do not reconnect in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1) //nolint:gosec // timing jitter, not security
}
