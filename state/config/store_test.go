package config_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/config/configtest"
)

func TestFileStoreContract(t *testing.T) {
	configtest.Run(t, func(t *testing.T) config.Store {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte("buckets:\n  - id: start\n    groups: {plain: {}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := config.NewFileStore(slog.New(slog.DiscardHandler), path, config.FileStoreConfig{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
