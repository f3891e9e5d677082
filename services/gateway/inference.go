package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	"github.com/sluicehq/sluice/components/limits"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// inference serves one OpenAI/SGLang route: read and check the body, prepare the routing facts
// once, then decide-and-forward (retried once on another engine when one fails before the
// first byte).
func (s *Server) inference(route string) runtime.HandlerFunc {
	rm := s.metrics.forRoute(route)
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			rm.requests(sw.code()).Inc()
			if !sw.firstByte.IsZero() {
				rm.ttfb().Observe(sw.firstByte.Sub(start).Seconds())
			}
		}()
		requestID := r.Header.Get("X-Request-Id")
		if requestID == "" {
			requestID = newRequestID()
		}
		sw.Header().Set("X-Request-Id", requestID)

		raw, err := readBody(r, http.MaxBytesReader(sw, r.Body, s.sizes.MaxBodyBytes), s.sizes.MaxBodyBytes)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeAPIError(sw, apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: "request_too_large",
					message: limits.TooLarge("request body (at least)", s.sizes.MaxBodyBytes+1, s.sizes.MaxBodyBytes)})
				return
			}
			writeAPIError(sw, apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "unreadable_body",
				message: "could not read the request body: " + err.Error()})
			return
		}
		f, err := parseFacts(route, raw, s.cfg.DefaultModel)
		if err == nil {
			err = validateOpenAI(route, raw, f)
		}
		if err == nil {
			var req *sluicev1.DecideRequest
			if req, err = s.decideRequest(r.Context(), f, r.Header, requestID); err == nil {
				s.wantExplain(r.Context(), req)
				s.dispatch(r, sw, rm, f, s.withPromptIDs(raw, f, req), req)
				return
			}
		}
		var re *requestError
		if errors.As(err, &re) && re.code == "too_many_tokens" {
			writeAPIError(sw, apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, param: re.param, code: re.code, message: re.msg})
			return
		}
		if errors.As(err, &re) {
			writeAPIError(sw, apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, param: re.param, code: re.code, message: re.msg})
			return
		}
		writeAPIError(sw, apiError{status: http.StatusInternalServerError, typ: typeServer, code: "internal_error", message: err.Error()})
	}
}

// readBody reads the whole body: into one buffer of the declared Content-Length when there is
// one within max (net/http ends the body there), else growing as io.ReadAll does.
func readBody(r *http.Request, body io.Reader, max int64) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= max {
		raw := make([]byte, n)
		if _, err := io.ReadFull(body, raw); err != nil {
			return nil, err
		}
		return raw, nil
	}
	return io.ReadAll(body)
}

// decideRequest turns a request's facts and headers into a DecideRequest.
func (s *Server) decideRequest(ctx context.Context, f *facts, h http.Header, requestID string) (*sluicev1.DecideRequest, error) {
	t := f.known
	if t == nil {
		counted := s.countTokens(ctx, f)
		t = &counted
	}
	if len(t.ids) > s.sizes.MaxTokenIDs {
		return nil, &requestError{code: "too_many_tokens", msg: fmt.Sprintf("the prompt is %d tokens; at most %d (-max-token-ids) fit a decision — shorten it",
			len(t.ids), s.sizes.MaxTokenIDs)}
	}
	peak, err := expectedPeak(t.count, f.maxOut, s.cfg.DefaultMaxTokens, f.batch)
	if err != nil {
		return nil, err
	}
	return &sluicev1.DecideRequest{
		Model:              f.model,
		InputTokens:        t.count,
		ExpectedPeakTokens: peak,
		TokenIds:           t.ids,
		SessionKey:         h.Get(s.sessionHeader),
		RoutingKey:         h.Get(s.routingHeader),
		RequestId:          requestID,
		LoraName:           f.lora,
		CacheSalt:          f.cacheSalt,
		TtftSloMs:          ttftSLO(h),
	}, nil
}

// withPromptIDs is the body to forward: raw, or, when the engine's /tokenize counted a
// completion's text prompt and -forward-token-ids is on, raw with that prompt replaced by its
// token ids. The engine then serves the ids it would have made of the text (vLLM and SGLang take
// a list of ids as a completion prompt, and their /tokenize adds the special tokens their
// completions add) without tokenizing the prompt again: the gateway already paid that round
// trip, and a long prompt's tokenization is milliseconds of the engine's CPU before its first
// token (docs/architecture.md, "Data flow", step 5).
func (s *Server) withPromptIDs(raw []byte, f *facts, req *sluicev1.DecideRequest) []byte {
	ids := req.GetTokenIds()
	if !s.forwardIDs || f.idsEnd == 0 || len(ids) == 0 || int64(len(ids)) != req.GetInputTokens() {
		return raw
	}
	out := make([]byte, 0, len(raw)-(f.idsEnd-f.idsAt)+len(ids)*6+2)
	out = append(out, raw[:f.idsAt]...)
	out = append(out, '[')
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(id), 10)
	}
	out = append(out, ']')
	return append(out, raw[f.idsEnd:]...)
}

// countTokens runs the configured tokenizer; a batch is counted prompt by prompt without ids.
// When the tokenizer fails the request is counted by the estimate rather than refused: routing
// on an approximate count beats not serving.
func (s *Server) countTokens(ctx context.Context, f *facts) tokens {
	count := func(p prompt) tokens {
		t, err := s.tokenizer.tokenize(ctx, p)
		if err != nil {
			s.metrics.tokenizerFallbacks.Inc()
			s.logger.Debug("tokenizer failed; estimating", slog.String("model", p.model), slog.Any("error", err))
			t, _ = estimator{}.tokenize(ctx, p)
		}
		return t
	}
	if f.batch <= 1 || f.prompt.messages != nil {
		return count(f.prompt)
	}
	var total int64
	for _, text := range f.prompt.texts {
		total += count(prompt{model: f.model, texts: []string{text}, special: f.prompt.special}).count
	}
	return tokens{count: total}
}

// dispatch decides and forwards, retrying once on a new decision that excludes a failed engine
// when the failure happened before the client got anything. Every lease is released.
func (s *Server) dispatch(r *http.Request, sw *statusWriter, rm *routeMetrics, f *facts, raw []byte, req *sluicev1.DecideRequest) {
	var prior *attemptResult
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		// The decision must not be lost to a client that leaves mid-call: its lease is
		// released below like any other.
		dec, err := s.shards.Decide(context.WithoutCancel(r.Context()), req)
		if deciderclient.Overloaded(err) {
			// A replica shed the call at once; the connection balances over every address of
			// -decider-addr, so the one retry goes to the next replica.
			s.metrics.overloadRetries.Inc()
			dec, err = s.shards.Decide(context.WithoutCancel(r.Context()), req)
		}
		s.metrics.decide.Observe(time.Since(t0).Seconds())
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			e := decideError(err, s.cfg.RetryAfter)
			if prior != nil {
				e.message = fmt.Sprintf("%v; no other engine: %s", prior.err, e.message)
			}
			writeAPIError(sw, e)
			return
		}
		s.annotate(r, sw, req, dec)
		last := attempt > 1 || !s.cfg.RetryOnEngineFailure
		res := s.forward(r, sw, rm, f, raw, dec, last)
		if sw.status != 0 {
			// The answer is complete: let the client have its last bytes now rather than
			// after the Release round trip.
			sw.Flush()
		}
		s.release(req.GetModel(), dec.GetLeaseId(), req.GetRequestId(), res)
		if !res.retry || last {
			return
		}
		s.metrics.retries.Inc()
		s.logger.Debug("engine failed before the first byte; retrying on another", slog.String("request_id", req.GetRequestId()),
			slog.Any("engine_ids", res.failed), slog.Any("error", res.err))
		req.ExcludeEngineIds = append(req.ExcludeEngineIds, res.failed...)
		prior = &res
	}
}

// release closes a lease with the attempt's outcome, on its own short deadline so that a
// cancelled request still releases. The decider client bounds each call by -decide-timeout
// (Release is one call, never retried), so when -release-timeout is no shorter than that the
// client's deadline is the one in force and a second timer is not armed (a profile of the
// embedded gateway had the two at 1.4 % of its CPU); TestReleaseBoundedByBothTimeouts. An
// embedded decider's Release runs in process and waits on nothing, so it needs neither.
func (s *Server) release(model, leaseID, requestID string, res attemptResult) {
	if leaseID == "" {
		return
	}
	ctx := context.Background()
	if s.cfg.DecideTimeout <= 0 || s.cfg.ReleaseTimeout < s.cfg.DecideTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.ReleaseTimeout)
		defer cancel()
	}
	var failed []string
	if res.outcome == sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE {
		failed = res.failed
	}
	if _, err := s.shards.Release(ctx, model, leaseID, res.outcome, failed...); err != nil {
		s.logger.Warn("release failed; the lease will expire by TTL", slog.String("lease_id", leaseID),
			slog.String("request_id", requestID), slog.Any("error", err))
	}
}

// statusWriter records the status answered and when the first body byte was written; it
// passes flushes through.
type statusWriter struct {
	http.ResponseWriter
	status    int
	firstByte time.Time
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if len(b) > 0 && w.firstByte.IsZero() {
		w.firstByte = time.Now()
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends buffered bytes to the client.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return 499 // the client left before any answer
	}
	return w.status
}

func statusLabel(code int) string { return strconv.Itoa(code) }

// newRequestID returns 32 lowercase hex digits (128 random bits), always the same width.
func newRequestID() string {
	var b [32]byte
	hexDigits(b[:16], rand.Uint64())
	hexDigits(b[16:], rand.Uint64())
	return string(b[:])
}
