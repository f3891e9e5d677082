package config

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Authors recorded by a [FileStore] for versions it did not get through Apply.
const (
	// authorFile marks a version read from the file (at start-up or by Run).
	authorFile = "file"
	// authorDefaults marks the built-in defaults of a store without a file.
	authorDefaults = "defaults"
)

// defaultHistoryLimit is how many versions a [FileStore] keeps on disk.
const defaultHistoryLimit = 100

// historyDirFor is the version-log directory of a configuration file:
// beside it, named after it ("sluice.yaml" → "sluice.yaml.history").
func historyDirFor(path string) string { return path + ".history" }

var _ Store = (*FileStore)(nil)

// historyEntry is one version on disk: v00000042.json in the history
// directory, written atomically, holding the version's metadata and its
// full validated document.
type historyEntry struct {
	Version    int64           `json:"version"`
	Author     string          `json:"author"`
	CreatedAt  time.Time       `json:"created_at"`
	Summary    string          `json:"summary"`
	RollbackOf int64           `json:"rollback_of,omitempty"`
	Document   json.RawMessage `json:"document"`
}

func historyName(version int64) string { return fmt.Sprintf("v%08d.json", version) }

// loadHistory reads every version file of the history directory, oldest
// first. A file that does not parse is logged and skipped: the history is a
// convenience for rollback, never a reason not to start.
func (s *FileStore) loadHistory() []Revision {
	if s.historyDir == "" {
		return nil
	}
	entries, err := os.ReadDir(s.historyDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.logger.Warn("read configuration history; starting without it", "dir", s.historyDir, "error", err)
		}
		return nil
	}
	var out []Revision
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, "v") || !strings.HasSuffix(name, ".json") {
			continue
		}
		if _, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, "v"), ".json"), 10, 64); err != nil {
			continue
		}
		rev, err := readHistoryEntry(filepath.Join(s.historyDir, name))
		if err != nil {
			s.logger.Warn("configuration history entry is unreadable; skipping it", "file", filepath.Join(s.historyDir, name), "error", err)
			continue
		}
		out = append(out, rev)
	}
	slices.SortFunc(out, func(a, b Revision) int { return cmp.Compare(a.Version, b.Version) })
	if over := len(out) - s.historyLimit; over > 0 {
		out = out[over:] // the limit was lowered: older files stay on disk, unused
	}
	return out
}

func readHistoryEntry(path string) (Revision, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Revision{}, err
	}
	var e historyEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return Revision{}, err
	}
	if e.Version < 1 {
		return Revision{}, fmt.Errorf("version %d: want >= 1", e.Version)
	}
	doc, err := Parse(e.Document, FormatJSON)
	if err != nil {
		return Revision{}, err
	}
	return Revision{VersionInfo: VersionInfo{Version: e.Version, Author: e.Author, CreatedAt: e.CreatedAt,
		Summary: e.Summary, RollbackOf: e.RollbackOf}, Document: doc}, nil
}

// recordLocked appends snap to the version log, writes it to the history
// directory and prunes the log to its limit. The caller holds mu (or is the
// constructor). A failed write is logged: the version is in force either way,
// only its rollback would not survive a restart.
func (s *FileStore) recordLocked(prev *Document, snap Snapshot, author string, rollbackOf int64) {
	summary := "initial version"
	if prev != nil {
		summary = Summarize(prev, snap.Document)
	}
	if rollbackOf != 0 {
		summary = fmt.Sprintf("rollback to version %d: %s", rollbackOf, summary)
	}
	rev := Revision{
		VersionInfo: VersionInfo{Version: snap.Version, Author: author, CreatedAt: snap.LoadedAt, Summary: summary, RollbackOf: rollbackOf},
		Document:    snap.Document,
	}
	s.history = append(s.history, rev)
	if err := s.persistLocked(rev); err != nil {
		s.logger.Error("write configuration history; this version cannot be rolled back to after a restart",
			"dir", s.historyDir, "version", rev.Version, "error", err)
	}
	if over := len(s.history) - s.historyLimit; over > 0 {
		for _, old := range s.history[:over] {
			if s.historyDir != "" {
				if err := os.Remove(filepath.Join(s.historyDir, historyName(old.Version))); err != nil && !errors.Is(err, fs.ErrNotExist) {
					s.logger.Warn("prune configuration history", "dir", s.historyDir, "version", old.Version, "error", err)
				}
			}
		}
		s.history = slices.Delete(s.history, 0, over)
	}
}

// persistLocked writes rev to the history directory when it exists. The
// directory is created by the first write through the store ([FileStore.Apply]
// or Rollback, see ensureHistoryLocked), so a decider that only reads its file
// leaves nothing beside it.
func (s *FileStore) persistLocked(rev Revision) error {
	if s.historyDir == "" {
		return nil
	}
	if _, err := os.Stat(s.historyDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	doc, err := Marshal(rev.Document, FormatJSON)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(historyEntry{Version: rev.Version, Author: rev.Author, CreatedAt: rev.CreatedAt,
		Summary: rev.Summary, RollbackOf: rev.RollbackOf, Document: doc}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.historyDir, historyName(rev.Version)), append(data, '\n'), 0o644)
}

// ensureHistoryLocked creates the history directory on the first write and
// stores the versions seen so far in it.
func (s *FileStore) ensureHistoryLocked() error {
	if s.historyDir == "" {
		return nil
	}
	if _, err := os.Stat(s.historyDir); err == nil {
		return nil
	}
	if err := os.MkdirAll(s.historyDir, 0o755); err != nil {
		return err
	}
	for _, rev := range s.history {
		if err := s.persistLocked(rev); err != nil {
			return err
		}
	}
	return nil
}

// Versions lists the versions the store keeps, newest first: the last 100,
// across restarts (see [FileStore]).
func (s *FileStore) Versions(_ context.Context, limit int) ([]VersionInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VersionInfo, 0, len(s.history))
	for _, r := range slices.Backward(s.history) {
		if limit > 0 && len(out) == limit {
			break
		}
		out = append(out, r.VersionInfo)
	}
	return out, nil
}

// Version returns a version the store keeps.
func (s *FileStore) Version(_ context.Context, version int64) (Revision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.history {
		if r.Version == version {
			return r, nil
		}
	}
	return Revision{}, fmt.Errorf("version %d: %w", version, ErrVersionNotFound)
}

// Rollback writes the document of version to the file as the version after
// basedOn, with the same rules as Apply.
func (s *FileStore) Rollback(ctx context.Context, version, basedOn int64) (Snapshot, error) {
	rev, err := s.Version(ctx, version)
	if err != nil {
		return Snapshot{}, err
	}
	return s.apply(ctx, rev.Document, basedOn, version)
}
