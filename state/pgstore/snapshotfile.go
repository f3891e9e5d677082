package pgstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/state/config"
)

// snapshotFile is the on-disk form of the last-known snapshot.
type snapshotFile struct {
	Version  int64           `json:"version"`
	SavedAt  time.Time       `json:"saved_at"`
	Document json.RawMessage `json:"document"`
}

// writeSnapshotFile replaces path atomically (temp file, fsync, rename).
func writeSnapshotFile(path string, snap config.Snapshot) error {
	doc, err := json.Marshal(snap.Document)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(snapshotFile{Version: snap.Version, SavedAt: snap.LoadedAt, Document: doc}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readSnapshotFile loads and validates a snapshot written by writeSnapshotFile.
func readSnapshotFile(path string) (config.Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Snapshot{}, err
	}
	var f snapshotFile
	if err := json.Unmarshal(data, &f); err != nil {
		return config.Snapshot{}, fmt.Errorf("%s: %w", path, err)
	}
	if f.Version < 1 {
		return config.Snapshot{}, fmt.Errorf("%s: version %d, want >= 1", path, f.Version)
	}
	doc, err := config.Parse(f.Document, config.FormatJSON)
	if err != nil {
		return config.Snapshot{}, fmt.Errorf("%s: %w", path, err)
	}
	return config.Snapshot{Version: f.Version, Document: doc, Source: "snapshot:" + path, LoadedAt: time.Now()}, nil
}
