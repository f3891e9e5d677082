package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot defaults.
const (
	defaultSnapshotInterval = 30 * time.Second
	defaultSnapshotKeep     = 2
)

// SnapshotConfig configures periodic snapshots of the ingested tables.
type SnapshotConfig struct {
	// Dir holds the snapshot files; required. It is created if missing.
	Dir string
	// Interval is the time between two snapshots; one more is written on
	// shutdown. Zero selects 30s.
	Interval time.Duration
	// Keep is how many snapshot files are kept, newest first; a corrupt
	// newest file falls back to the next. Zero selects 2.
	Keep int
}

// Validate reports every invalid field with the fix, or nil.
func (c SnapshotConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("ingest: SnapshotConfig.Dir: empty; set a directory for snapshot files"))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("ingest: SnapshotConfig.Interval %v: must be >= 0 (0 selects %v)", c.Interval, defaultSnapshotInterval))
	}
	if c.Keep < 0 {
		errs = append(errs, fmt.Errorf("ingest: SnapshotConfig.Keep %d: must be >= 0 (0 selects %d)", c.Keep, defaultSnapshotKeep))
	}
	return errors.Join(errs...)
}

// Snapshot files in SnapshotConfig.Dir are named
// <snapshotPrefix><creation time, Unix nanoseconds, 20 digits><snapshotSuffix>,
// so that their names sort by age; snapfile.go has their layout.
const (
	snapshotPrefix = "ingest-"
	snapshotSuffix = ".snap"
)

type snapshotMeta struct {
	Created time.Time   `json:"created"`
	Load    *streamMeta `json:"load,omitempty"`
	KV      *streamMeta `json:"kv,omitempty"`
}

type streamMeta struct {
	Topic   string          `json:"topic"`
	Offsets map[int]int64   `json:"offsets"`
	Holders []holderPersist `json:"holders,omitempty"`
}

type holderPersist struct {
	Engine string `json:"engine"`
	Rank   int32  `json:"rank"`
	holderState
}

// Snapshotter writes the load table, the KV index and the offsets they
// cover to one file periodically and on shutdown, and restores the newest
// valid file on start.
type Snapshotter struct {
	logger    *slog.Logger
	cfg       SnapshotConfig
	load      *LoadIngester
	kv        *KVIngester
	readIndex IndexReader
	now       func() time.Time
	// create opens the temporary file a snapshot is written to (a seam for
	// tests; os.CreateTemp in dir otherwise).
	create func(dir string) (snapFile, error)

	// wmu serialises Write and Restore; it guards the fields below.
	wmu sync.Mutex
	// last is what the newest snapshot written or restored covers; nil
	// before the first. A Write that would cover the same is skipped.
	last *writtenSnapshot
	// spare is the KV index copy of the previous Write, reused by the next
	// (see captureKV).
	spare KVIndex

	written  prometheus.Counter
	skipped  prometheus.Counter
	failed   prometheus.Counter
	corrupt  prometheus.Counter
	lastOK   prometheus.Gauge
	duration prometheus.Observer
	pause    *prometheus.HistogramVec
}

// writtenSnapshot is the newest snapshot file and the change counts of the
// streams' state it holds.
type writtenSnapshot struct {
	path               string
	loadCount, kvCount uint64
}

// snapFile is the file a snapshot is written to.
type snapFile interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

func createTemp(dir string) (snapFile, error) { return os.CreateTemp(dir, ".ingest-*.tmp") }

// NewSnapshotter returns a snapshotter for the given ingesters (either may
// be nil, not both). readIndex rebuilds a KV index from its snapshot section;
// it is required when kv is not nil. It starts no goroutines.
func NewSnapshotter(logger *slog.Logger, cfg SnapshotConfig, load *LoadIngester, kv *KVIngester, readIndex IndexReader, reg prometheus.Registerer) (*Snapshotter, error) {
	if logger == nil || reg == nil || (load == nil && kv == nil) || (kv != nil && readIndex == nil) {
		return nil, errors.New("ingest: NewSnapshotter: nil logger or registerer, no ingester, or a KV ingester without readIndex")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = defaultSnapshotInterval
	}
	if cfg.Keep == 0 {
		cfg.Keep = defaultSnapshotKeep
	}
	s := &Snapshotter{logger: logger, cfg: cfg, load: load, kv: kv, readIndex: readIndex, now: time.Now, create: createTemp,
		written:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ingest_snapshots_written_total", Help: "Snapshot files written."}),
		skipped:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ingest_snapshots_skipped_total", Help: "Snapshots not written because no record was applied since the last one."}),
		failed:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ingest_snapshot_failures_total", Help: "Snapshot writes that failed."}),
		corrupt:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ingest_snapshots_corrupt_total", Help: "Snapshot files skipped on restore because they are corrupt or unusable."}),
		lastOK:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_ingest_snapshot_last_success_timestamp_seconds", Help: "Unix time the newest snapshot file was last known to cover the tables: written, or skipped as unchanged."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ingest_snapshot_write_seconds", Help: "Time to write one snapshot file.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		pause: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_ingest_snapshot_pause_seconds",
			Help: "Time a stream's record application was paused to copy its state for one snapshot.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}, []string{"stream"}),
	}
	for _, c := range []prometheus.Collector{s.written, s.skipped, s.failed, s.corrupt, s.lastOK, s.duration.(prometheus.Collector), s.pause} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: register snapshot metrics: %w", err)
		}
	}
	return s, nil
}

// Run writes a snapshot every Interval until ctx ends, then writes a last
// one and returns ctx's error (or the last write's error). As every Write,
// each is skipped when nothing changed since the last snapshot. A failed
// periodic write is logged and counted; the next tick tries again.
func (s *Snapshotter) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if _, err := s.Write(); err != nil {
				return fmt.Errorf("ingest: snapshot on shutdown: %w", err)
			}
			return ctx.Err()
		case <-t.C:
			if _, err := s.Write(); err != nil {
				s.logger.Error("snapshot failed; retrying at the next interval", "dir", s.cfg.Dir, "error", err)
			}
		}
	}
}

// Write writes the tables and the offsets they cover to a new snapshot
// file, atomically, and deletes all but the newest Keep files. It returns
// the file's path.
//
// Each stream is paused only while its state is copied to memory (the load
// table serialised to a buffer, the KV index cloned); the file is written
// from the copies while records keep applying. When no record was applied on
// either stream (and no engine removed) since the newest snapshot written or
// restored, nothing is written: Write counts the skip
// (sluice_ingest_snapshots_skipped_total) and returns that snapshot's path.
func (s *Snapshotter) Write() (path string, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	t0 := time.Now()
	if s.last != nil && s.counts() == [2]uint64{s.last.loadCount, s.last.kvCount} {
		s.skipped.Inc()
		s.lastOK.SetToCurrentTime()
		s.logger.Debug("snapshot skipped: nothing applied since the last one", "path", s.last.path)
		return s.last.path, nil
	}
	defer func() {
		if err != nil {
			s.failed.Inc()
			return
		}
		s.written.Inc()
		s.lastOK.SetToCurrentTime()
		s.duration.Observe(time.Since(t0).Seconds())
	}()
	c, err := s.capture()
	if err != nil {
		return "", err
	}
	if path, err = s.writeFile(c); err != nil {
		return "", err
	}
	s.last = &writtenSnapshot{path: path, loadCount: c.loadCount, kvCount: c.kvCount}
	s.logger.Debug("snapshot written", "path", path, "took", time.Since(t0), "paused_load", c.loadPause, "paused_kv", c.kvPause)
	return path, nil
}

// counts returns the change counts of the load and KV streams (0 for an
// absent one).
func (s *Snapshotter) counts() [2]uint64 {
	var c [2]uint64
	if s.load != nil {
		c[0] = s.load.s.changeCount()
	}
	if s.kv != nil {
		c[1] = s.kv.s.changeCount()
	}
	return c
}

// captured is a point-in-time copy of the streams' state, to be written
// without pausing them.
type captured struct {
	meta               snapshotMeta
	loadState          []byte
	writeKV            func(io.Writer) error
	loadCount, kvCount uint64
	loadPause, kvPause time.Duration
}

// capture copies each stream's state with its offsets, pausing the stream
// only for the copy.
func (s *Snapshotter) capture() (*captured, error) {
	c := &captured{meta: snapshotMeta{Created: s.now().UTC()}}
	if s.load != nil {
		// The load table holds one report per engine: serialising it to
		// memory costs microseconds, so it needs no copy of its own.
		var buf bytes.Buffer
		offs, n, paused, err := s.load.s.capture(func() error { return s.load.writeState(&buf) })
		c.loadPause = paused
		s.pause.WithLabelValues(StreamLoad).Observe(c.loadPause.Seconds())
		if err != nil {
			return nil, fmt.Errorf("snapshot load table: %w", err)
		}
		c.meta.Load = &streamMeta{Topic: s.load.s.cfg.Topic, Offsets: offs}
		c.loadState, c.loadCount = buf.Bytes(), n
	}
	if s.kv != nil {
		holders, offs, n, paused, write, err := s.captureKV()
		c.kvPause = paused
		s.pause.WithLabelValues(StreamKV).Observe(c.kvPause.Seconds())
		if err != nil {
			return nil, fmt.Errorf("snapshot kv index: %w", err)
		}
		c.meta.KV = &streamMeta{Topic: s.kv.s.cfg.Topic, Offsets: offs, Holders: holders}
		c.writeKV, c.kvCount = write, n
	}
	return c, nil
}

// captureKV copies the KV ingester's epoch/seq state and its index with the
// stream paused, and returns them with the offsets and change count they
// cover, how long the stream was paused, and a function that writes the
// index copy.
//
// The copy, not the live index, is what gets written: records applied after
// the pause must not reach the file, because replaying them from the stored
// offsets after a restore is not idempotent (LRU eviction and prune cascades
// depend on order, an epoch reset clears what later records stored, and the
// holders' seqs would have them skipped as duplicates). An index that cannot
// copy itself (see copyIndex) is written with the stream paused.
func (s *Snapshotter) captureKV() ([]holderPersist, map[int]int64, uint64, time.Duration, func(io.Writer) error, error) {
	var (
		holders []holderPersist
		copied  KVIndex
		inPause *bytes.Buffer
	)
	spare := s.spare
	s.spare = nil // not reused again until this copy is written
	offs, n, paused, err := s.kv.s.capture(func() error {
		holders = s.kv.holderStates()
		live := s.kv.Index()
		if copied = copyIndex(live, spare); copied != nil {
			return nil
		}
		// An index that cannot copy itself is serialised to memory, paused.
		inPause = new(bytes.Buffer)
		return live.WriteSnapshot(inPause, s.kv.slots)
	})
	if err != nil {
		return nil, nil, 0, paused, nil, err
	}
	write := func(w io.Writer) error {
		if inPause != nil {
			_, err := w.Write(inPause.Bytes())
			return err
		}
		err := copied.WriteSnapshot(w, s.kv.slots)
		s.spare = copied
		return err
	}
	return holders, offs, n, paused, write, nil
}

// writeFile writes c to a new snapshot file and returns its path.
func (s *Snapshotter) writeFile(c *captured) (path string, err error) {
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return "", fmt.Errorf("create snapshot dir: %w", err)
	}
	f, err := s.create(s.cfg.Dir)
	if err != nil {
		return "", fmt.Errorf("create snapshot file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	w := newSnapWriter(f)
	if c.meta.Load != nil {
		if err := w.section("load", func(w io.Writer) error { _, err := w.Write(c.loadState); return err }); err != nil {
			return "", fmt.Errorf("snapshot load table: %w", err)
		}
	}
	if c.meta.KV != nil {
		if err := w.section("kvindex", c.writeKV); err != nil {
			return "", fmt.Errorf("snapshot kv index: %w", err)
		}
	}
	if err := w.section("meta", func(w io.Writer) error { return json.NewEncoder(w).Encode(&c.meta) }); err != nil {
		return "", fmt.Errorf("snapshot meta: %w", err)
	}
	if err := w.finish(); err != nil {
		return "", fmt.Errorf("write snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("sync snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close snapshot: %w", err)
	}
	path = filepath.Join(s.cfg.Dir, fmt.Sprintf("%s%020d%s", snapshotPrefix, c.meta.Created.UnixNano(), snapshotSuffix))
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("rename snapshot: %w", err)
	}
	if d, err := os.Open(s.cfg.Dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	files, _ := s.files()
	for _, old := range files[min(len(files), s.cfg.Keep):] {
		if err := os.Remove(old); err != nil {
			s.logger.Warn("cannot remove old snapshot", "path", old, "error", err)
		}
	}
	return path, nil
}

// files lists the snapshot files, newest first.
func (s *Snapshotter) files() ([]string, error) {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && strings.HasPrefix(n, snapshotPrefix) && strings.HasSuffix(n, snapshotSuffix) {
			out = append(out, filepath.Join(s.cfg.Dir, n))
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out, nil
}

// RestoreInfo says what Restore restored.
type RestoreInfo struct {
	// Path is the snapshot restored, or "" when none was usable (the
	// ingesters then replay from the earliest retained offsets).
	Path string
	// Created is when it was written.
	Created time.Time
	// Skipped lists corrupt or unusable files, newest first.
	Skipped []string
}

// Restore loads the newest valid snapshot into the ingesters: the load
// table's contents, the KV index (replaced by the one readIndex builds; wire
// KVIngester.Index() after Restore), the KV epoch/seq state, and each
// stream's next offsets. Corrupt files are logged, counted and skipped. It
// must be called before the ingesters' Run. It fails only when the directory
// cannot be read; no usable snapshot is not an error.
func (s *Snapshotter) Restore() (RestoreInfo, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var info RestoreInfo
	files, err := s.files()
	if errors.Is(err, os.ErrNotExist) {
		return info, nil
	}
	if err != nil {
		return info, fmt.Errorf("ingest: list snapshots: %w", err)
	}
	for _, path := range files {
		created, err := s.restoreFile(path)
		if err != nil {
			s.corrupt.Inc()
			info.Skipped = append(info.Skipped, path)
			s.logger.Error("skipping unusable snapshot", "path", path, "error", err)
			continue
		}
		info.Path, info.Created = path, created
		c := s.counts()
		s.last = &writtenSnapshot{path: path, loadCount: c[0], kvCount: c[1]}
		s.logger.Info("restored snapshot", "path", path, "created", created)
		return info, nil
	}
	return info, nil
}

func (s *Snapshotter) restoreFile(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	if err := verifyChecksum(f); err != nil {
		return time.Time{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return time.Time{}, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	if err := readHeader(r); err != nil {
		return time.Time{}, err
	}
	var (
		loadState []byte
		index     KVIndex
		meta      snapshotMeta
		haveMeta  bool
	)
	for {
		name, sec, err := nextSection(r)
		if err != nil {
			return time.Time{}, err
		}
		if name == "" {
			break
		}
		switch name {
		case "load":
			loadState, err = io.ReadAll(sec)
		case "kvindex":
			if s.kv != nil {
				index, err = s.readIndex(sec)
			}
		case "meta":
			err = json.NewDecoder(sec).Decode(&meta)
			haveMeta = err == nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: section %q: %w", errCorruptSnapshot, name, err)
		}
		if _, err := io.Copy(io.Discard, sec); err != nil {
			return time.Time{}, fmt.Errorf("%w: section %q: %w", errCorruptSnapshot, name, err)
		}
	}
	if !haveMeta {
		return time.Time{}, fmt.Errorf("%w: no meta section", errCorruptSnapshot)
	}
	if s.load != nil {
		if meta.Load == nil || loadState == nil {
			return time.Time{}, errors.New("snapshot has no load table")
		}
		if meta.Load.Topic != s.load.s.cfg.Topic {
			return time.Time{}, fmt.Errorf("snapshot covers load topic %q, not %q", meta.Load.Topic, s.load.s.cfg.Topic)
		}
	}
	if s.kv != nil {
		if meta.KV == nil || index == nil {
			return time.Time{}, errors.New("snapshot has no KV index")
		}
		if meta.KV.Topic != s.kv.s.cfg.Topic {
			return time.Time{}, fmt.Errorf("snapshot covers KV topic %q, not %q", meta.KV.Topic, s.kv.s.cfg.Topic)
		}
	}
	// Everything parsed: apply.
	if s.load != nil {
		if err := s.load.readState(bytes.NewReader(loadState)); err != nil {
			return time.Time{}, err
		}
		s.load.s.setOffsets(meta.Load.Offsets)
	}
	if s.kv != nil {
		s.kv.restore(index, meta.KV.Holders)
		s.kv.s.setOffsets(meta.KV.Offsets)
	}
	return meta.Created, nil
}
