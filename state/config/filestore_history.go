package config

import (
	"context"
	"fmt"
	"slices"
)

// Authors recorded by a [FileStore] for versions it did not get through Apply.
const (
	// AuthorFile marks a version read from the file (at start-up or by Run).
	AuthorFile = "file"
	// AuthorDefaults marks the built-in defaults of a store without a file.
	AuthorDefaults = "defaults"
)

var _ Store = (*FileStore)(nil)

// recordLocked appends snap to the in-memory version log. The caller holds mu
// (or is the constructor).
func (s *FileStore) recordLocked(prev *Document, snap Snapshot, author string, rollbackOf int64) {
	summary := "initial version"
	if prev != nil {
		summary = Summarize(prev, snap.Document)
	}
	if rollbackOf != 0 {
		summary = fmt.Sprintf("rollback to version %d: %s", rollbackOf, summary)
	}
	s.history = append(s.history, Revision{
		VersionInfo: VersionInfo{Version: snap.Version, Author: author, CreatedAt: snap.LoadedAt, Summary: summary, RollbackOf: rollbackOf},
		Document:    snap.Document,
	})
}

// Versions lists the versions seen since this store was created, newest
// first; a file store keeps no history across restarts.
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

// Version returns a version seen since this store was created.
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
