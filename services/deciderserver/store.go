package deciderserver

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/pgstore"
)

// openStore builds the configuration store the Config selects: Postgres with a PostgresDSN
// (ConfigPath, if set, seeds an empty version log), else the file store on ConfigPath.
// serviceable refuses file reloads the decider cannot serve.
func openStore(logger *slog.Logger, cfg Config, serviceable func(*config.Document) error) (config.Store, error) {
	if cfg.PostgresDSN == "" {
		store, err := config.NewFileStore(logger, cfg.ConfigPath, config.FileStoreConfig{PollInterval: cfg.ConfigPoll, Serviceable: serviceable})
		if err != nil {
			return nil, fmt.Errorf("load -config %q: %w", cfg.ConfigPath, err)
		}
		return store, nil
	}
	var seed *config.Document
	if cfg.ConfigPath != "" {
		fs, err := config.NewFileStore(logger, cfg.ConfigPath, config.FileStoreConfig{PollInterval: cfg.ConfigPoll})
		if err != nil {
			return nil, fmt.Errorf("load -config %q (the seed of an empty Postgres store): %w", cfg.ConfigPath, err)
		}
		seed = fs.Current().Document
	}
	// Open connects and migrates before the server listens; bound it like a connection.
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.PostgresConnectTimeout)
	defer cancel()
	store, err := pgstore.Open(ctx, logger, pgstore.Config{DSN: cfg.PostgresDSN, SnapshotPath: cfg.snapshotPath(),
		Seed: seed, ConnectTimeout: cfg.PostgresConnectTimeout, PingInterval: cfg.PostgresPingInterval,
		QueryTimeout: cfg.PostgresQueryTimeout, WriteTimeout: cfg.PostgresWriteTimeout, ReconnectMax: cfg.PostgresReconnectMax})
	if err != nil {
		return nil, fmt.Errorf("-postgres-dsn: %w", err)
	}
	return store, nil
}
