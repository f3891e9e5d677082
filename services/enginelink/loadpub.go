package enginelink

import (
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
	t := time.NewTicker(l.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		loads, err := l.scrape(ctx, spec)
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
			for _, rank := range slices.Sorted(maps.Keys(loads)) {
				msg, err := l.loadMessage(spec, rank, ranks, epoch, seqs.next(epoch, rank), now, loads[rank])
				if err != nil {
					logger.Error("encode load report", slog.Any("error", err))
					continue
				}
				if l.prod.enqueue(msg) {
					reports.Inc()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrape fetches and parses the engine's loads: SGLang /v1/loads when configured, else /metrics.
func (l *Link) scrape(ctx context.Context, spec EngineSpec) (map[int]*rankLoad, error) {
	url, parse := spec.MetricsURL, parseMetrics
	if spec.LoadsURL != "" {
		url, parse = spec.LoadsURL, parseSGLangLoads
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.scrapeTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4, application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	loads, err := parse(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
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
	return kafka.Message{Topic: l.loadTopic(spec.Model), Key: []byte(spec.ID), Value: v, Time: now,
		Headers: []kafka.Header{
			{Key: HeaderEpoch, Value: strconv.AppendUint(nil, epoch, 10)},
			{Key: HeaderSeq, Value: strconv.AppendUint(nil, seq, 10)},
			{Key: HeaderDPRank, Value: strconv.AppendInt(nil, int64(rank), 10)},
			{Key: HeaderModel, Value: []byte(spec.Model)},
		}}, nil
}
