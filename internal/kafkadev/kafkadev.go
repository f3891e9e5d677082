// Package kafkadev runs an in-process Kafka-protocol broker (franz-go's kfake)
// for dev mode and fast tests, so the decider starts with ingestion on a fresh
// machine without a real Kafka cluster.
//
// The broker keeps everything in memory and is lost on Close. It speaks the
// Kafka protocol on a loopback port, so the ingest consumers (segmentio/kafka-go)
// and any other Kafka client use it unchanged.
package kafkadev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Default topic names and partition count of the dev broker.
const (
	// LoadTopic is the default engine-load topic.
	LoadTopic = "sluice.engine-load.v1"
	// KVTopic is the default KV-event topic.
	KVTopic = "sluice.kv-events.v1"
	// Partitions is the partition count of every pre-created topic.
	Partitions = 4
)

// Broker is a running in-process broker. Close stops it.
type Broker struct {
	cluster *kfake.Cluster
}

// Start starts a single-node broker on a free loopback port with topics
// pre-created (Partitions partitions each); with no topics given it creates
// LoadTopic and KVTopic. Topics that clients ask for and that do not exist
// are auto-created with Partitions partitions. The broker runs until Close;
// ctx only bounds start-up.
func Start(ctx context.Context, logger *slog.Logger, topics ...string) (*Broker, error) {
	if logger == nil {
		return nil, errors.New("kafkadev: nil logger")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		topics = []string{LoadTopic, KVTopic}
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(0),
		kfake.SeedTopics(Partitions, topics...),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(Partitions),
		kfake.WithLogger(slogLogger{logger}),
	)
	if err != nil {
		return nil, fmt.Errorf("kafkadev: start in-process broker: %w", err)
	}
	logger.Info("in-process kafka broker started", "addrs", c.ListenAddrs(), "topics", topics)
	return &Broker{cluster: c}, nil
}

// Addr returns the broker's bootstrap addresses (host:port).
func (b *Broker) Addr() []string { return b.cluster.ListenAddrs() }

// Cluster returns the underlying kfake cluster, for tests that inject faults.
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Close stops the broker and drops its data. It is safe to call more than once.
func (b *Broker) Close() { b.cluster.Close() }

// slogLogger forwards kfake's warnings and errors to slog; its info and debug
// lines (one per request) are dropped.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		s.l.Error("kfake: "+fmt.Sprintf(format, args...), "component", "kafkadev")
	case kfake.LogLevelWarn:
		s.l.Debug("kfake: "+fmt.Sprintf(format, args...), "component", "kafkadev")
	}
}
