package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/state/config"
)

// Defaults of [Config].
const (
	DefaultChannel        = "sluice_config"
	DefaultConnectTimeout = 5 * time.Second
	DefaultReconnectMin   = 100 * time.Millisecond
	DefaultReconnectMax   = 2 * time.Second
	// DefaultPingInterval is how long the listener waits for a notification
	// before it checks that its connection still answers.
	DefaultPingInterval = 5 * time.Second
	// DefaultQueryTimeout bounds every statement the store runs on its own
	// behalf (listener ping, LISTEN, reloads, reads of the version log).
	DefaultQueryTimeout = 5 * time.Second
	// DefaultWriteTimeout bounds one admin write's transaction.
	DefaultWriteTimeout = 10 * time.Second
	// SourcePostgres is the Snapshot.Source of a version read from the database.
	SourcePostgres = "postgres"
	// AuthorSeed records the version stored when the log was empty.
	AuthorSeed = "seed"
)

// Config holds the settings of a [Store]. DSN is required.
type Config struct {
	// DSN is a libpq connection string or postgres:// URL.
	DSN string
	// SnapshotPath, when set, is a file rewritten after each load with the
	// version in force, and served when the database is unreachable at
	// start-up.
	SnapshotPath string
	// Seed is stored as version 1 when the version log is empty; nil means
	// the empty document (the default buckets).
	Seed *config.Document
	// Channel is the NOTIFY channel; empty means DefaultChannel.
	Channel string
	// ConnectTimeout bounds each connection attempt; zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the listener's exponential
	// back-off between reconnection attempts; each wait is jittered down by
	// up to half so replicas do not reconnect in lockstep.
	ReconnectMin, ReconnectMax time.Duration
	// PingInterval is how long the listener waits for a notification before
	// it pings; zero means DefaultPingInterval. A hung backend is therefore
	// noticed within PingInterval + QueryTimeout.
	PingInterval time.Duration
	// QueryTimeout bounds each statement the store runs on its own behalf;
	// zero means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// WriteTimeout bounds one write (Apply, Rollback) from BEGIN to COMMIT,
	// whatever deadline the caller has; zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Validate reports settings that cannot work, naming the setting and the fix.
func (c Config) Validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("postgres store: dsn is empty; pass -postgres-dsn or set DATABASE_URL"))
	} else if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		errs = append(errs, fmt.Errorf("postgres store: dsn does not parse (%w); use postgres://user@host:5432/db", err))
	}
	if c.ConnectTimeout < 0 || c.ReconnectMin < 0 || c.ReconnectMax < 0 || c.PingInterval < 0 || c.QueryTimeout < 0 || c.WriteTimeout < 0 {
		errs = append(errs, errors.New("postgres store: timeouts must not be negative; use 0 for the defaults"))
	}
	if c.Seed != nil {
		if err := c.Seed.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("postgres store: seed document: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	if c.Channel == "" {
		c.Channel = DefaultChannel
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	c.ReconnectMax = max(c.ReconnectMax, c.ReconnectMin)
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = DefaultQueryTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
}

// Store is the Postgres [config.Store]. Current is lock-free; writes go
// through the database and are published locally as soon as they commit;
// Run listens for other replicas' writes.
type Store struct {
	logger  *slog.Logger
	cfg     Config
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig

	current atomic.Pointer[config.Snapshot]
	ready   atomic.Bool // migrations ran and the head was read from the database

	mu     sync.Mutex // orders publishing
	subs   config.Subscribers
	initMu sync.Mutex // serialises initialise
	now    func() time.Time

	// Listener state, exported through ListenerStats for metrics.
	listening  atomic.Bool
	reconnects atomic.Uint64
	lastReload atomic.Int64 // unix nanos of the last successful load from the database
	// lastContact is when the listener last heard from its connection (a
	// notification, a ping, a reload), unix nanos.
	lastContact atomic.Int64
}

// ListenerStats describes the reload listener: whether it is connected, how often it had to
// reconnect, when it last loaded a version from the database and when its connection last
// answered. Connected is true only while the connection has answered within PingInterval +
// QueryTimeout, so a hung backend (one that keeps its socket open but never replies) reads as
// disconnected, not as a replica silently serving an old version.
type ListenerStats struct {
	Connected   bool
	Reconnects  uint64
	LastReload  time.Time
	LastContact time.Time
}

// ListenerStats returns the listener's current state.
func (s *Store) ListenerStats() ListenerStats {
	st := ListenerStats{Reconnects: s.reconnects.Load()}
	if n := s.lastReload.Load(); n > 0 {
		st.LastReload = time.Unix(0, n)
	}
	if n := s.lastContact.Load(); n > 0 {
		st.LastContact = time.Unix(0, n)
	}
	st.Connected = s.listening.Load() && s.now().Sub(st.LastContact) <= s.cfg.PingInterval+s.cfg.QueryTimeout
	return st
}

var _ config.Store = (*Store)(nil)

// Open connects, applies the embedded migrations, stores cfg.Seed as
// version 1 if the log is empty, and loads the version in force. When the
// database cannot be reached and cfg.SnapshotPath holds a last-known
// snapshot, the store serves that (writes fail with [config.ErrUnavailable]
// until Run reconnects); without one it returns an error. Open starts no
// goroutines; call Close when done.
func Open(ctx context.Context, logger *slog.Logger, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, err
	}
	pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pcfg.MaxConns = max(pcfg.MaxConns, 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	s := &Store{logger: logger, cfg: cfg, pool: pool, connCfg: pcfg.ConnConfig.Copy(),
		now: time.Now}
	err = s.initialise(ctx)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, config.ErrUnavailable) || cfg.SnapshotPath == "" {
		pool.Close()
		if errors.Is(err, config.ErrUnavailable) {
			return nil, fmt.Errorf("postgres store: %w; no last-known snapshot to serve (set a snapshot path to survive this)", err)
		}
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	snap, serr := readSnapshotFile(cfg.SnapshotPath)
	if serr != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: %w; and the last-known snapshot is unusable: %w", err, serr)
	}
	s.current.Store(&snap)
	logger.Warn("postgres unreachable at start-up; serving the last-known snapshot until it returns",
		slog.String("snapshot_path", cfg.SnapshotPath), slog.Int64("config_version", snap.Version), slog.Any("error", err))
	return s, nil
}

// Close releases the connection pool.
func (s *Store) Close() { s.pool.Close() }

// initialise migrates, seeds and loads the head once; later calls return nil.
func (s *Store) initialise(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.ready.Load() {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		applied, err := migrate(ctx, tx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			s.logger.Info("applied configuration schema migrations", slog.Any("migrations", applied))
		}
		return s.seed(ctx, tx)
	})
	if err != nil {
		return s.classify(ctx, fmt.Errorf("migrate: %w", err))
	}
	snap, err := s.loadHead(ctx, s.pool)
	if err != nil {
		return err
	}
	s.ready.Store(true)
	s.publish(snap)
	return nil
}

// seed stores cfg.Seed as version 1 when there is no head. It runs inside
// the migration transaction, under its advisory lock.
func (s *Store) seed(ctx context.Context, tx pgx.Tx) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM config_head)`).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	doc := s.cfg.Seed
	if doc == nil {
		doc = &config.Document{}
	}
	return s.write(ctx, tx, doc, 0, 1, AuthorSeed, "initial version", 0)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadHead reads the version in force.
func (s *Store) loadHead(ctx context.Context, q querier) (config.Snapshot, error) {
	var (
		version int64
		raw     []byte
	)
	err := q.QueryRow(ctx, `SELECT v.version, v.document FROM config_head h JOIN config_versions v ON v.version = h.version`).Scan(&version, &raw)
	if err != nil {
		return config.Snapshot{}, s.classify(ctx, fmt.Errorf("load the current version: %w", err))
	}
	doc, err := config.Parse(raw, config.FormatJSON)
	if err != nil {
		return config.Snapshot{}, fmt.Errorf("version %d in the database does not validate: %w", version, err)
	}
	return config.Snapshot{Version: version, Document: doc, Source: SourcePostgres, LoadedAt: s.now()}, nil
}

// Current returns the snapshot in force. It never blocks.
func (s *Store) Current() config.Snapshot { return *s.current.Load() }

// Subscribe returns a channel receiving each newer snapshot (it holds one; a
// slow reader sees only the latest) and an idempotent unsubscribe func that
// closes it.
func (s *Store) Subscribe() (<-chan config.Snapshot, func()) { return s.subs.Subscribe() }

// publish installs snap if it is newer than the current one, tells the
// subscribers and rewrites the snapshot file. It reports whether it did.
func (s *Store) publish(snap config.Snapshot) bool {
	s.mu.Lock()
	if cur := s.current.Load(); cur != nil && cur.Source == SourcePostgres && cur.Version >= snap.Version {
		s.mu.Unlock()
		return false
	}
	s.current.Store(&snap)
	s.subs.Publish(snap)
	s.mu.Unlock()
	if s.cfg.SnapshotPath != "" {
		if err := writeSnapshotFile(s.cfg.SnapshotPath, snap); err != nil {
			s.logger.Warn("write last-known configuration snapshot", slog.String("snapshot_path", s.cfg.SnapshotPath), slog.Any("error", err))
		}
	}
	return true
}

// Apply validates doc and stores it as the version after basedOn in one
// transaction that also NOTIFYs the other replicas.
func (s *Store) Apply(ctx context.Context, doc *config.Document, basedOn int64) (config.Snapshot, error) {
	return s.commit(ctx, doc, basedOn, 0)
}

// Rollback stores version's document as the version after basedOn.
func (s *Store) Rollback(ctx context.Context, version, basedOn int64) (config.Snapshot, error) {
	rev, err := s.Version(ctx, version)
	if err != nil {
		return config.Snapshot{}, err
	}
	return s.commit(ctx, rev.Document, basedOn, version)
}

func (s *Store) commit(ctx context.Context, doc *config.Document, basedOn, rollbackOf int64) (config.Snapshot, error) {
	if doc == nil {
		return config.Snapshot{}, errors.New("apply configuration: nil document")
	}
	if rollbackOf == 0 && doc.IsEmpty() {
		return config.Snapshot{}, config.EmptyDocumentError("")
	}
	if err := doc.Validate(); err != nil {
		return config.Snapshot{}, err
	}
	// Store and publish what the database will hand back to the other
	// replicas: the JSON form, parsed again, sharing nothing with the caller.
	raw, err := json.Marshal(doc)
	if err != nil {
		return config.Snapshot{}, fmt.Errorf("apply configuration: %w", err)
	}
	if bytes.Contains(raw, []byte(`\u0000`)) {
		return config.Snapshot{}, nulProblems(doc)
	}
	stored, err := config.Parse(raw, config.FormatJSON)
	if err != nil {
		return config.Snapshot{}, fmt.Errorf("apply configuration: JSON form does not parse back: %w", err)
	}
	// The server-side deadline: a write never waits on a hung database for
	// longer than WriteTimeout, whatever deadline the caller brought.
	wctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if err := s.initialise(wctx); err != nil {
		return config.Snapshot{}, s.writeTimedOut(ctx, wctx, err, false)
	}
	author := config.AuthorFrom(ctx)
	var next int64
	committing := false
	err = s.inTx(wctx, &committing, func(ctx context.Context, tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT version FROM config_head FOR UPDATE`).Scan(&cur); err != nil {
			return err
		}
		if cur != basedOn {
			return &config.ConflictError{Current: cur}
		}
		prev, err := s.documentAt(ctx, tx, cur)
		if err != nil {
			return err
		}
		summary := config.Summarize(prev, stored)
		if rollbackOf != 0 {
			summary = fmt.Sprintf("rollback to version %d: %s", rollbackOf, summary)
		}
		next = cur + 1
		return s.write(ctx, tx, stored, cur, next, author, summary, rollbackOf)
	})
	if err != nil {
		var ce *config.ConflictError
		if errors.As(err, &ce) {
			return config.Snapshot{}, ce
		}
		return config.Snapshot{}, s.writeTimedOut(ctx, wctx, s.classify(ctx, fmt.Errorf("apply configuration: %w", err)), committing)
	}
	snap := config.Snapshot{Version: next, Document: stored, Source: SourcePostgres, LoadedAt: s.now()}
	s.publish(snap)
	s.logger.Info("configuration applied", slog.Int64("config_version", next), slog.String("author", author))
	return snap, nil
}

// inTx runs fn in a transaction and commits it, setting *committing just
// before COMMIT is sent: an error after that point may or may not have
// applied the write.
func (s *Store) inTx(ctx context.Context, committing *bool, fn func(context.Context, pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
		return err
	}
	*committing = true
	return tx.Commit(ctx)
}

// writeTimedOut rewrites err when the write's own deadline (wctx) expired
// while the caller's ctx did not, saying whether the write can have applied.
func (s *Store) writeTimedOut(ctx, wctx context.Context, err error, committing bool) error {
	if err == nil || ctx.Err() != nil || !errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return err
	}
	outcome := "nothing was written"
	if committing {
		outcome = "the commit was sent but not confirmed, so the write may have applied: list the versions before retrying"
	}
	return &config.UnavailableError{Detail: fmt.Sprintf("the configuration database did not answer within the %s write deadline; %s",
		s.cfg.WriteTimeout, outcome)}
}

// documentAt returns version's document, reusing the current snapshot when
// it is that version.
func (s *Store) documentAt(ctx context.Context, q querier, version int64) (*config.Document, error) {
	if cur := s.current.Load(); cur != nil && cur.Version == version && cur.Source == SourcePostgres {
		return cur.Document, nil
	}
	var raw []byte
	if err := q.QueryRow(ctx, `SELECT document FROM config_versions WHERE version = $1`, version).Scan(&raw); err != nil {
		return nil, err
	}
	return config.Parse(raw, config.FormatJSON)
}

// write appends version next to the log, moves the head, rewrites the
// current-document tables and queues the NOTIFY (sent on commit).
func (s *Store) write(ctx context.Context, tx pgx.Tx, doc *config.Document, basedOn, next int64, author, summary string, rollbackOf int64) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO config_versions (version, author, summary, based_on, rollback_of, document)
		VALUES ($1, $2, $3, $4, $5, $6)`, next, author, summary, nullable(basedOn), nullable(rollbackOf), raw)
	b.Queue(`INSERT INTO config_head (singleton, version, updated_at) VALUES (true, $1, now())
		ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`, next)
	if err := queueTables(b, doc); err != nil {
		return err
	}
	b.Queue(`SELECT pg_notify($1, $2)`, s.cfg.Channel, fmt.Sprint(next))
	return tx.SendBatch(ctx, b).Close()
}

func nullable(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

// nullableString maps "" to NULL.
func nullableString(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// Versions lists the log, newest first.
func (s *Store) Versions(ctx context.Context, limit int) ([]config.VersionInfo, error) {
	if limit <= 0 {
		limit = -1
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT version, author, created_at, summary, COALESCE(rollback_of, 0)
		FROM config_versions ORDER BY version DESC LIMIT NULLIF($1, -1)`, limit)
	if err != nil {
		return nil, s.classify(ctx, fmt.Errorf("list versions: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (config.VersionInfo, error) {
		var v config.VersionInfo
		err := r.Scan(&v.Version, &v.Author, &v.CreatedAt, &v.Summary, &v.RollbackOf)
		return v, err
	})
	if err != nil {
		return nil, s.classify(ctx, fmt.Errorf("list versions: %w", err))
	}
	return out, nil
}

// Version returns one logged version.
func (s *Store) Version(ctx context.Context, version int64) (config.Revision, error) {
	var (
		r   config.Revision
		raw []byte
	)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	err := s.pool.QueryRow(ctx, `SELECT version, author, created_at, summary, COALESCE(rollback_of, 0), document
		FROM config_versions WHERE version = $1`, version).Scan(&r.Version, &r.Author, &r.CreatedAt, &r.Summary, &r.RollbackOf, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return config.Revision{}, fmt.Errorf("version %d: %w", version, config.ErrVersionNotFound)
	}
	if err != nil {
		return config.Revision{}, s.classify(ctx, fmt.Errorf("read version %d: %w", version, err))
	}
	if r.Document, err = config.Parse(raw, config.FormatJSON); err != nil {
		return config.Revision{}, fmt.Errorf("version %d in the database does not validate: %w", version, err)
	}
	return r, nil
}
