package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/state/config"
)

// classify marks err as [config.ErrUnavailable] when it comes from a
// database that cannot be reached or is shutting down, so that callers can
// tell "retry later" from a bug. The caller's own cancellation is kept.
func (s *Store) classify(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, config.ErrUnavailable) {
		return err
	}
	if ctx.Err() != nil {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 connection exceptions; 57P01-57P03 shutdowns and
		// start-ups; 53300 too many connections.
		if strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "53300" {
			return fmt.Errorf("%w: %w", config.ErrUnavailable, err)
		}
		return err
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", config.ErrUnavailable, err)
	}
	// Anything else that is not a database error: the connection broke
	// mid-statement if the server does not answer a ping now.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if perr := s.pool.Ping(pctx); perr != nil {
		return fmt.Errorf("%w: %w", config.ErrUnavailable, err)
	}
	return err
}
