// Package ingest consumes the engines' Kafka streams (load reports and KV-cache
// events) into the decider's in-memory tables.
//
// Each stream is its own component with its own lifecycle, health and
// metrics: LoadIngester feeds a loadtable.Table from sluice.engine-load.v1 and
// KVIngester feeds the prefix index from sluice.kv-events.v1. Every decider
// replica reads every partition itself (one partition reader per partition,
// no consumer group), so replicas never coordinate. Each component applies
// records under one writer lock and tracks, per partition, the next offset to
// read; a record at an offset already applied is never applied again, which
// makes reconnects and restarts exactly-once with respect to the tables.
//
// A Snapshotter periodically writes both tables and the offsets they cover to
// one file, and restores the newest valid file on start; Replay rebuilds
// fresh tables from a topic for the `sluice replay` command.
//
// KV-event records are decoded by components/kvwire (record headers, sluice
// protobuf and the engines' msgpack) and load reports by loadrecord.go here:
// state packages never see wire formats.
package ingest
