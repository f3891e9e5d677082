package ingest

import (
	"log/slog"
	"sync"
	"time"
)

// badLog logs bad records at most once per kind per interval, with the number
// seen since the previous line, so a flood of bad input costs one log line
// per kind per interval.
type badLog struct {
	logger   *slog.Logger
	stream   string
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	kinds map[string]*badKind
}

type badKind struct {
	last       time.Time // when the last line was logged; zero if never
	suppressed int64     // records of this kind since then, not yet logged
}

func newBadLog(logger *slog.Logger, stream string, interval time.Duration) *badLog {
	return &badLog{logger: logger, stream: stream, interval: interval, now: time.Now, kinds: map[string]*badKind{}}
}

// record notes one bad record of kind and logs a line if the kind has not
// been logged within the interval.
func (b *badLog) record(kind string, partition int, offset int64, err error) {
	b.mu.Lock()
	k := b.kinds[kind]
	if k == nil {
		k = &badKind{}
		b.kinds[kind] = k
	}
	k.suppressed++
	now := b.now()
	if !k.last.IsZero() && now.Sub(k.last) < b.interval {
		b.mu.Unlock()
		return
	}
	n := k.suppressed
	k.suppressed, k.last = 0, now
	b.mu.Unlock()
	b.logger.Warn("skipped bad records", "stream", b.stream, "kind", kind, "count", n,
		"partition", partition, "offset", offset, "error", err)
}
