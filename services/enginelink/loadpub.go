package enginelink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// maxScrapeBytes bounds one metrics or loads answer.
const maxScrapeBytes = 16 << 20

// loadSeqs numbers an engine's load reports: from 1 per (rank, epoch).
type loadSeqs struct {
	epoch uint64
	seq   map[int]uint64
}

func (s *loadSeqs) next(epoch uint64, rank int) uint64 {
	if epoch != s.epoch || s.seq == nil {
		s.epoch, s.seq = epoch, map[int]uint64{}
	}
	s.seq[rank]++
	return s.seq[rank]
}

// scrapeLoop scrapes the engine's load every ScrapeInterval and produces one LoadReport per DP
// rank, in the engine's current epoch. A failed scrape publishes nothing and is counted; the
// decider's freshness window then expires the engine's load.
func (l *Link) scrapeLoop(ctx context.Context, spec EngineSpec, epochs *engineEpoch) {
	logger := l.logger.With(slog.String("engine_id", spec.ID))
	ok, failed := l.m.scrapes.WithLabelValues(spec.ID, "ok"), l.m.scrapes.WithLabelValues(spec.ID, "error")
	last, reports := l.m.scrapeLast.WithLabelValues(spec.ID), l.m.loadReports.WithLabelValues(spec.ID)
	var seqs loadSeqs
	var errs throttle
	sc := newScraper(spec)
	t := time.NewTicker(l.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		loads, err := l.scrape(ctx, sc)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failed.Inc()
			if allow, held := errs.allow(time.Now()); allow {
				logger.Warn("load scrape failed; no load report published (the decider expires stale load)",
					slog.Any("error", err), slog.Int("failures_held_back", held))
			}
		default:
			ok.Inc()
			now := time.Now()
			last.Set(float64(now.UnixNano()) / 1e9)
			epoch, _ := epochs.current()
			ranks := int32(spec.ranks())
			for rank := range loads {
				ranks = max(ranks, int32(rank)+1)
			}
			msgs := make([]kafka.Message, 0, len(loads))
			for _, rank := range slices.Sorted(maps.Keys(loads)) {
				msg, err := l.loadMessage(spec, rank, ranks, epoch, seqs.next(epoch, rank), now, loads[rank])
				if err != nil {
					logger.Error("encode load report", slog.Any("error", err))
					continue
				}
				msgs = append(msgs, msg)
			}
			// One call for the scrape's ranks: they share a produce request (enqueueLoads).
			if n := l.prod.enqueueLoads(msgs); n > 0 {
				reports.Add(float64(n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scraper is one engine's scrape state, kept across scrapes by its scrapeLoop: the request
// (URL parsed and headers set once) and the body buffer are reused, so a scrape costs the GET
// and the parse (BENCHMARKS.md, "Scrape cost").
type scraper struct {
	url   string
	parse func([]byte) (map[int]*rankLoad, error)
	req   *http.Request // the template; each scrape sends a copy with its context
	err   error         // the template's error (a bad URL), returned by every scrape
	body  bytes.Buffer
}

// maxKeptBody bounds the body buffer a scraper keeps between scrapes.
const maxKeptBody = 1 << 20

func newScraper(spec EngineSpec) *scraper {
	s := &scraper{url: spec.MetricsURL, parse: parseMetrics}
	if spec.LoadsURL != "" {
		s.url, s.parse = spec.LoadsURL, parseSGLangLoads
	}
	s.req, s.err = http.NewRequest(http.MethodGet, s.url, nil)
	if s.err == nil {
		s.req.Header.Set("Accept", "text/plain;version=0.0.4, application/json")
	}
	return s
}

// scrape fetches and parses the engine's loads: SGLang /v1/loads when configured, else /metrics.
func (l *Link) scrape(ctx context.Context, s *scraper) (map[int]*rankLoad, error) {
	if s.err != nil {
		return nil, s.err
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.scrapeTimeout())
	defer cancel()
	resp, err := l.client.Do(s.req.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	// The whole body is read, to its end: a JSON decoder stops at the document's last brace, and
	// a chunked answer (SGLang's /v1/loads of a few ranks) closed before its last chunk costs the
	// keep-alive connection, a new TCP connection per scrape.
	s.body.Reset()
	if s.body.Cap() > maxKeptBody {
		s.body = bytes.Buffer{}
	}
	if _, err := s.body.ReadFrom(io.LimitReader(resp.Body, maxScrapeBytes)); err != nil {
		return nil, fmt.Errorf("GET %s: %w", s.url, err)
	}
	loads, err := s.parse(s.body.Bytes())
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", s.url, err)
	}
	return loads, nil
}

// loadMessage builds the load-topic record of one rank.
func (l *Link) loadMessage(spec EngineSpec, rank int, ranks int32, epoch, seq uint64, now time.Time, ld *rankLoad) (kafka.Message, error) {
	captured := now
	if !ld.CapturedAt.IsZero() && ld.CapturedAt.Before(now) {
		captured = ld.CapturedAt
	}
	r := &sluicev1.LoadReport{
		EngineId: spec.ID, DpRank: int32(rank), DpSize: ranks, Epoch: epoch, Seq: seq,
		CapturedAt:      timestamppb.New(captured),
		RunningRequests: ld.Running, WaitingRequests: ld.Waiting,
		KvUsedTokens: ld.KVUsed, KvCapacityTokens: ld.KVCapacity,
	}
	if n := ld.Native; n != nil {
		r.Native = &sluicev1.NativeLoad{
			WaitingUncachedTokens: n.WaitingUncachedTokens, TotalTokens: n.TotalTokens,
			MaxRunningRequests: n.MaxRunningRequests, PrefillUncachedTokensTotal: n.PrefillUncachedTokensTotal,
			PrefillBusyMicrosTotal: n.PrefillBusyMicrosTotal,
		}
	}
	v, err := proto.Marshal(r)
	if err != nil {
		return kafka.Message{}, err
	}
	// The key and the header values share one allocation; each is capped, so nothing appended to
	// one can overwrite the next.
	buf := make([]byte, 0, 3*20+len(spec.ID)+len(spec.Model))
	buf = strconv.AppendUint(buf, epoch, 10)
	e := len(buf)
	buf = strconv.AppendUint(buf, seq, 10)
	s := len(buf)
	buf = strconv.AppendInt(buf, int64(rank), 10)
	d := len(buf)
	buf = append(buf, spec.ID...)
	k := len(buf)
	buf = append(buf, spec.Model...)
	return kafka.Message{Topic: l.loadTopic(spec.Model), Key: buf[d:k:k], Value: v, Time: now,
		Headers: []kafka.Header{
			{Key: HeaderEpoch, Value: buf[:e:e]},
			{Key: HeaderSeq, Value: buf[e:s:s]},
			{Key: HeaderDPRank, Value: buf[s:d:d]},
			{Key: HeaderModel, Value: buf[k:len(buf):len(buf)]},
		}}, nil
}
