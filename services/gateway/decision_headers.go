package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Response headers that show a request's routing decision (Config.DecisionHeaders). For a
// prefill + decode pair each holds two comma-separated values, prefill's first.
const (
	headerEngine        = "X-Sluice-Engine"
	headerBucket        = "X-Sluice-Bucket"
	headerReason        = "X-Sluice-Reason"
	headerMatchedTokens = "X-Sluice-Matched-Tokens"
	headerConfigVersion = "X-Sluice-Config-Version"
	// headerDecodeURL is SGLang's router header naming the decode engine of a PD request: set
	// on the request sent to both engines (so prefill can log its peer) and on the response.
	headerDecodeURL = "X-Sgl-Decode-Url"
)

// wantExplain asks the decider to explain the decision when the gateway will show it (decision
// headers, or debug logging): matched prefix tokens are only in the explanation.
func (s *Server) wantExplain(ctx context.Context, req *sluicev1.DecideRequest) {
	if s.cfg.DecisionHeaders || s.logger.Enabled(ctx, slog.LevelDebug) {
		req.Explain = true
	}
}

// annotate records a successful decision before the request is forwarded: the PD decode URL
// header on the upstream request and the response (as SGLang's router does; a client-sent one
// is never passed on), the decision headers when configured, and a debug log line with the
// same fields.
func (s *Server) annotate(r *http.Request, sw *statusWriter, req *sluicev1.DecideRequest, dec *sluicev1.DecideResponse) {
	h := sw.Header()
	debug := s.logger.Enabled(r.Context(), slog.LevelDebug)
	if !s.cfg.DecisionHeaders && !debug {
		if pd := dec.GetPick().GetPd(); pd != nil {
			r.Header.Set(headerDecodeURL, pd.GetDecode().GetUrl())
			h.Set(headerDecodeURL, pd.GetDecode().GetUrl())
		} else if r.Header != nil {
			r.Header.Del(headerDecodeURL)
			h.Del(headerDecodeURL)
		}
		return
	}
	var engines, reasons, matched []string
	add := func(p *sluicev1.EnginePick) {
		engines = append(engines, p.GetEngineId())
		reasons = append(reasons, p.GetReason())
		matched = append(matched, strconv.FormatInt(matchedTokens(dec, p.GetEngineId()), 10))
	}
	if pd := dec.GetPick().GetPd(); pd != nil {
		add(pd.GetPrefill())
		add(pd.GetDecode())
		r.Header.Set(headerDecodeURL, pd.GetDecode().GetUrl())
		h.Set(headerDecodeURL, pd.GetDecode().GetUrl())
	} else {
		add(dec.GetPick().GetPlain())
		r.Header.Del(headerDecodeURL)
		h.Del(headerDecodeURL)
	}
	if s.cfg.DecisionHeaders {
		h.Set(headerEngine, strings.Join(engines, ", "))
		h.Set(headerBucket, dec.GetBucketId())
		h.Set(headerReason, strings.Join(reasons, ", "))
		h.Set(headerMatchedTokens, strings.Join(matched, ", "))
		h.Set(headerConfigVersion, strconv.FormatInt(dec.GetConfigVersion(), 10))
	}
	if debug {
		s.logger.LogAttrs(r.Context(), slog.LevelDebug, "decided", slog.String("request_id", req.GetRequestId()),
			slog.String("model", req.GetModel()), slog.Int64("input_tokens", req.GetInputTokens()),
			slog.String("engine_ids", strings.Join(engines, ",")), slog.String("bucket", dec.GetBucketId()),
			slog.String("reason", strings.Join(reasons, ",")), slog.String("matched_tokens", strings.Join(matched, ",")),
			slog.Int64("config_version", dec.GetConfigVersion()))
	}
}

// matchedTokens is the prefix length the decision's explanation credits the picked engine with
// in the bucket that served the request; 0 without an explanation or a cache-aware stage.
func matchedTokens(dec *sluicev1.DecideResponse, engineID string) int64 {
	for _, a := range dec.GetExplain().GetAttempts() {
		if a.GetBucketId() != dec.GetBucketId() || a.GetOutcome() != "picked" {
			continue
		}
		for _, st := range a.GetStages() {
			if st.GetPickedEngineId() != engineID {
				continue
			}
			for _, c := range st.GetCandidates() {
				if c.GetEngineId() == engineID {
					return c.GetMatchedTokens()
				}
			}
		}
	}
	return 0
}
