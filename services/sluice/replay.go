package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/flagenv"

	"github.com/sluicehq/sluice/components/ingest"
)

// runReplay replays a topic from an offset or a timestamp into a fresh index (or load table) and
// prints what it built: records, bad records by kind, engines, blocks and the index digest.
func runReplay(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		brokers, topic, stream, format, from string
		offset                               int64
	)
	fs.StringVar(&brokers, "kafka-brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&topic, "topic", "", "topic to replay (default: the stream's default topic)")
	fs.StringVar(&stream, "stream", ingest.StreamKV, "what the topic carries: kv (KV-cache events) or load (load reports)")
	fs.StringVar(&format, "format", "", "KV payload format of records without a sluice-format header (default sluice.kv.v1+proto)")
	fs.Int64Var(&offset, "from-offset", 0, "offset to start at in every partition (0 or negative: earliest retained)")
	fs.StringVar(&from, "from-time", "", "start every partition at its first record at or after this RFC 3339 time (overrides -from-offset)")
	lf := logFlags{level: "warn", format: "text"}
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	logger, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	cfg := ingest.ReplayConfig{Stream: stream, Format: format, FromOffset: offset, Topic: topic, Brokers: flagenv.List(brokers)}
	switch stream {
	case ingest.StreamKV:
		if cfg.Topic == "" {
			cfg.Topic = ingest.DefaultKVTopic
		}
	case ingest.StreamLoad:
		if cfg.Topic == "" {
			cfg.Topic = ingest.DefaultLoadTopic
		}
	default:
		return fmt.Errorf("-stream %q: use kv or load", stream)
	}
	if from != "" {
		if cfg.FromTime, err = time.Parse(time.RFC3339Nano, from); err != nil {
			return fmt.Errorf("-from-time %q: use RFC 3339, e.g. 2026-11-30T12:00:00Z: %w", from, err)
		}
	}
	if len(cfg.Brokers) == 0 {
		return errors.New("-kafka-brokers: empty; give host:port")
	}
	sum, err := ingest.Replay(ctx, logger.With(slog.String("component", "replay")), cfg)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, sum.String())
	return err
}
