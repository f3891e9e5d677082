package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// pingEvery is how long the listener waits for a notification before it
// pings, so a silently dead connection is noticed.
const pingEvery = 15 * time.Second

// Run listens for new versions on a dedicated connection until ctx is done,
// then returns nil. On each notification (and after every reconnection, to
// catch up on what it missed) it loads the version in force and publishes
// it. A lost connection is retried with exponential back-off between
// ReconnectMin and ReconnectMax; a store opened from its snapshot file
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
		case <-time.After(backoff):
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
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if err := s.initialise(ctx); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.cfg.Channel}.Sanitize()); err != nil {
		return false, err
	}
	if err := s.reload(ctx, conn); err != nil {
		return false, err
	}
	s.listening.Store(true)
	s.logger.Info("configuration listener connected", slog.String("channel", s.cfg.Channel),
		slog.Int64("config_version", s.Current().Version))
	for {
		wctx, cancel := context.WithTimeout(ctx, pingEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, nil
		case errors.Is(err, context.DeadlineExceeded):
			if err := conn.Ping(ctx); err != nil {
				return true, err
			}
			continue
		case err != nil:
			return true, err
		}
		if v, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil && v <= s.Current().Version && s.Current().Source == SourcePostgres {
			continue // our own write, already published
		}
		if err := s.reload(ctx, conn); err != nil {
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
