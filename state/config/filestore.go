package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// defaultPollInterval is how often [FileStore.Run] checks the file when
// FileStoreConfig.PollInterval is zero.
const defaultPollInterval = 2 * time.Second

// sourceDefaults is the Snapshot.Source of a store without a file.
const sourceDefaults = "defaults"

// Snapshot is one immutable, validated version of the configuration.
type Snapshot struct {
	// Version starts at 1 and grows by one with each reload or Apply.
	Version int64
	// Document is valid and shared by every reader: never modify it; use
	// Document.Clone to derive a new one.
	Document *Document
	// Source is the file path, or "defaults" for a store without a file.
	Source string
	// LoadedAt is when this version was loaded or applied.
	LoadedAt time.Time
}

// FileStoreConfig holds the optional settings of a [FileStore].
type FileStoreConfig struct {
	// PollInterval is how often Run checks the file; zero means two
	// seconds.
	PollInterval time.Duration
	// Serviceable, when set, refuses a valid document its consumer cannot
	// serve (the decider: a policy it has no data for). A reloaded file it
	// refuses is treated like an invalid one — logged, the previous version
	// kept — so Current is always a version the consumer serves; Apply returns
	// its error. It is not called at start-up (the consumer checks the first
	// version itself).
	Serviceable func(*Document) error
	// historyLimit is how many versions are kept (older ones are pruned);
	// zero means defaultHistoryLimit. Tests lower it.
	historyLimit int
}

// validate reports settings that cannot work.
func (c FileStoreConfig) validate() error {
	if c.PollInterval < 0 {
		return fmt.Errorf("file store: poll_interval %v must not be negative; use 0 for the default %v", c.PollInterval, defaultPollInterval)
	}
	return nil
}

// FileStore serves a configuration file as versioned snapshots. Readers call
// Current (lock-free) or Subscribe; Run watches the file; Apply replaces it.
// A store created with an empty path serves the empty document (all
// defaults) and is read-only.
//
// The version log is kept on disk in the history directory beside the file
// ("sluice.yaml.history"), one JSON file per version, so that versions keep
// their numbers and rollback works across restarts. The directory is created
// by the first Apply or Rollback.
type FileStore struct {
	logger *slog.Logger
	path   string
	format Format
	poll   time.Duration

	current atomic.Pointer[Snapshot]

	mu       sync.Mutex // serialises reloads, Apply and publishing
	subs     Subscribers
	stat     fileStat // of the file as last read
	readAt   time.Time
	hash     [sha256.Size]byte // of the content behind current
	badHash  [sha256.Size]byte // last invalid content already logged
	haveBad  bool
	missing  bool // the file is gone and that was logged
	now      func() time.Time
	tempHook func(name string) // test hook: called with the temp file before rename
	history  []Revision        // the last historyLimit versions, oldest first
	// historyDir holds the version log on disk; "" for a store without a file.
	historyDir   string
	historyLimit int
	serviceable  func(*Document) error
}

type fileStat struct {
	size    int64
	modTime time.Time
}

func statOf(info fs.FileInfo) fileStat { return fileStat{size: info.Size(), modTime: info.ModTime()} }

// NewFileStore reads and validates path once. An unreadable, invalid or
// empty file is an error listing every problem (a [*ValidationError] inside).
// The format follows the extension ([FormatForPath]). The version log is read
// from the history directory: when the file still holds the newest logged
// document, that version is current again; otherwise the file becomes the
// next version.
func NewFileStore(logger *slog.Logger, path string, cfg FileStoreConfig) (*FileStore, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &FileStore{
		logger: logger,
		path:   path,
		format: FormatForPath(path),
		poll:   cfg.PollInterval,
		now:    time.Now,

		historyLimit: cfg.historyLimit,
		serviceable:  cfg.Serviceable,
	}
	if s.poll == 0 {
		s.poll = defaultPollInterval
	}
	if s.historyLimit == 0 {
		s.historyLimit = defaultHistoryLimit
	}
	if path == "" {
		s.startLocked(nil, Snapshot{Version: 1, Document: &Document{}, Source: sourceDefaults, LoadedAt: s.now()}, authorDefaults)
		return s, nil
	}
	s.historyDir = historyDirFor(path)
	data, st, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("load configuration %q: %w", path, err)
	}
	doc, err := parseFile(data, s.format)
	if err != nil {
		return nil, fmt.Errorf("load configuration %q: %w", path, err)
	}
	s.stat, s.readAt, s.hash = st, s.now(), sha256.Sum256(data)
	s.history = s.loadHistory()
	snap := Snapshot{Version: 1, Document: doc, Source: path, LoadedAt: s.readAt}
	var prev *Document
	if n := len(s.history); n > 0 {
		last := s.history[n-1]
		if sameDocument(doc, last.Document) {
			snap.Version = last.Version
			s.current.Store(&snap)
			return s, nil
		}
		snap.Version, prev = last.Version+1, last.Document
	}
	s.startLocked(prev, snap, authorFile)
	return s, nil
}

// startLocked makes snap, the store's first version, current and logs it as
// a change from prev (nil for none).
func (s *FileStore) startLocked(prev *Document, snap Snapshot, author string) {
	s.current.Store(&snap)
	s.recordLocked(prev, snap, author, 0)
}

// parseFile parses the file's content and refuses an empty one (no keys,
// comments only): a truncated or emptied file must not replace the
// configuration.
func parseFile(data []byte, format Format) (*Document, error) {
	doc, err := Parse(data, format)
	if err != nil {
		return nil, err
	}
	if doc.IsEmpty() {
		return nil, EmptyDocumentError("")
	}
	return doc, nil
}

// Current returns the snapshot in force. It never blocks.
func (s *FileStore) Current() Snapshot { return *s.current.Load() }

// Subscribe returns a channel that receives each new snapshot after a
// successful reload or Apply, and a func that unsubscribes and closes the
// channel (safe to call more than once). The channel holds one snapshot;
// a slow reader sees only the latest.
func (s *FileStore) Subscribe() (<-chan Snapshot, func()) { return s.subs.Subscribe() }

// Run polls the file every PollInterval until ctx is done, then returns nil.
// A changed file (size, modification time, then content hash) is re-parsed:
// a valid one that differs from the current document becomes the next
// version and is published (edits to comments or layout alone do not); an invalid one is
// logged at ERROR once per distinct content while the old version keeps
// serving. A removed file is logged once and the old version kept.
func (s *FileStore) Run(ctx context.Context) error {
	if s.path == "" {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.check()
		}
	}
}

// check looks at the file once, as Run does on each tick.
func (s *FileStore) check() {
	if s.path == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := os.Stat(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if !s.missing {
				s.missing = true
				s.logger.Warn("configuration file removed; keeping the loaded version", "path", s.path, "version", s.current.Load().Version)
			}
			return
		}
		s.logger.Warn("stat configuration file", "path", s.path, "error", err)
		return
	}
	if s.missing {
		s.missing = false
		s.logger.Info("configuration file is back", "path", s.path)
	}
	st := statOf(info)
	// A write within the file system's timestamp granularity of the last
	// read could leave size and mtime unchanged, so re-read while the last
	// read was close to the modification time.
	if st == s.stat && s.readAt.Sub(st.modTime) > time.Second {
		return
	}
	data, st, err := s.read()
	if err != nil {
		s.logger.Warn("read configuration file", "path", s.path, "error", err)
		return
	}
	s.stat, s.readAt = st, s.now()
	sum := sha256.Sum256(data)
	if sum == s.hash {
		return
	}
	doc, err := parseFile(data, s.format)
	if err == nil && s.serviceable != nil {
		if serr := s.serviceable(doc); serr != nil {
			err = fmt.Errorf("the consumer cannot serve it: %w", serr)
		}
	}
	if err != nil {
		if !s.haveBad || sum != s.badHash {
			s.haveBad, s.badHash = true, sum
			s.logger.Error("configuration file is invalid; keeping the loaded version",
				"path", s.path, "version", s.current.Load().Version, "error", err)
		}
		return
	}
	s.hash = sum
	if sameDocument(doc, s.current.Load().Document) {
		return // e.g. only comments or formatting changed
	}
	snap := s.publishLocked(doc, authorFile, 0)
	s.logger.Info("configuration reloaded", "path", s.path, "version", snap.Version)
}

// Apply validates doc, writes it to the file atomically (a temp file
// in the same directory, fsync, rename, directory fsync) and publishes it as
// the next version. The file is written as JSON when its name ends in .json
// and as YAML otherwise. basedOn must be the current version, else a
// [*ConflictError]; an invalid document yields a [*ValidationError]; a store
// without a file returns [ErrReadOnly]; an empty document
// ([Document.IsEmpty]) is refused with [EmptyDocumentError]. The store keeps
// its own copy of doc.
func (s *FileStore) Apply(ctx context.Context, doc *Document, basedOn int64) (Snapshot, error) {
	return s.apply(ctx, doc, basedOn, 0)
}

func (s *FileStore) apply(ctx context.Context, doc *Document, basedOn, rollbackOf int64) (Snapshot, error) {
	if s.path == "" {
		return Snapshot{}, ErrReadOnly
	}
	if doc == nil {
		return Snapshot{}, fmt.Errorf("apply configuration: nil document")
	}
	if rollbackOf == 0 && doc.IsEmpty() {
		return Snapshot{}, EmptyDocumentError("")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.current.Load().Version; basedOn != cur {
		return Snapshot{}, &ConflictError{Current: cur}
	}
	if err := doc.Validate(); err != nil {
		return Snapshot{}, err
	}
	if s.serviceable != nil {
		if err := s.serviceable(doc); err != nil {
			return Snapshot{}, err
		}
	}
	data, err := Marshal(doc, s.format)
	if err != nil {
		return Snapshot{}, err
	}
	// Re-parse what is written so the snapshot is exactly what a reload of
	// the file would produce, and shares nothing with the caller.
	stored, err := Parse(data, s.format)
	if err != nil {
		return Snapshot{}, fmt.Errorf("apply configuration: written form does not parse back: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	if err := s.ensureHistoryLocked(); err != nil {
		s.logger.Error("create configuration history; versions will not survive a restart", "dir", s.historyDir, "error", err)
	}
	if err := s.writeAtomic(data); err != nil {
		return Snapshot{}, fmt.Errorf("apply configuration %q: %w", s.path, err)
	}
	if info, err := os.Stat(s.path); err == nil {
		s.stat = statOf(info)
	}
	s.readAt, s.hash, s.missing = s.now(), sha256.Sum256(data), false
	snap := s.publishLocked(stored, AuthorFrom(ctx), rollbackOf)
	s.logger.Info("configuration applied", "path", s.path, "version", snap.Version)
	return snap, nil
}

func (s *FileStore) publishLocked(doc *Document, author string, rollbackOf int64) Snapshot {
	prev := s.current.Load()
	snap := Snapshot{Version: prev.Version + 1, Document: doc, Source: s.path, LoadedAt: s.now()}
	s.current.Store(&snap)
	s.recordLocked(prev.Document, snap, author, rollbackOf)
	s.subs.Publish(snap)
	return snap
}

// sameDocument reports whether a and b encode identically.
func sameDocument(a, b *Document) bool {
	ja, errA := Marshal(a, FormatJSON)
	jb, errB := Marshal(b, FormatJSON)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// read returns the file's content and the stat it had when opened.
func (s *FileStore) read() ([]byte, fileStat, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fileStat{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fileStat{}, err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fileStat{}, err
	}
	return buf.Bytes(), statOf(info), nil
}

func (s *FileStore) writeAtomic(data []byte) error {
	mode := fs.FileMode(0o644)
	if info, err := os.Stat(s.path); err == nil {
		mode = info.Mode().Perm()
	}
	return writeFileAtomicHook(s.path, data, mode, s.tempHook)
}

// writeFileAtomic replaces path with data: a temp file in the same
// directory, fsync, rename, directory fsync.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	return writeFileAtomicHook(path, data, mode, nil)
}

func writeFileAtomicHook(path string, data []byte, mode fs.FileMode, hook func(string)) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if hook != nil {
		hook(tmp.Name())
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable.
	d, derr := os.Open(dir)
	if derr != nil {
		return nil
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}
