package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// attemptResult is how one forwarding attempt ended.
type attemptResult struct {
	outcome sluicev1.ReleaseOutcome
	// failed names the engines that failed (outcome ENGINE_FAILURE, or a retryable failure).
	failed []string
	// retry is set when an engine failed before anything reached the client; the caller may
	// decide again without it. The client has then been sent nothing.
	retry bool
	err   error
}

func success() attemptResult {
	return attemptResult{outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS}
}

func cancelled(err error) attemptResult {
	return attemptResult{outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_CANCELLED, err: err}
}

func engineFailure(err error, retry bool, engineIDs ...string) attemptResult {
	return attemptResult{outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE, failed: engineIDs, retry: retry, err: err}
}

// forward sends the request to the decision's engine(s) and relays the answer. When last is
// false an engine failing before the first byte is reported as retryable and nothing is
// written; when last is true the failure is answered (502, or the engine's own 5xx).
func (s *Server) forward(r *http.Request, sw *statusWriter, rm *routeMetrics, f *facts, raw []byte, dec *sluicev1.DecideResponse, last bool) attemptResult {
	route := rm.route
	ctx, cancel := s.upstreamContext(r.Context())
	defer cancel()
	hdr := upstreamHeader(r.Header, sw.Header().Get("X-Request-Id"))
	switch {
	case dec.GetPick().GetPlain() != nil:
		e := dec.GetPick().GetPlain()
		t0 := time.Now()
		resp, err := s.send(ctx, e.GetUrl(), route, raw, hdr)
		if res, done := s.checkEngine(r, sw, e.GetEngineId(), resp, err, last); done {
			return res
		}
		res := s.relay(r, sw, f.stream, e.GetEngineId(), resp)
		rm.up().Observe(time.Since(t0).Seconds())
		return res
	case dec.GetPick().GetPd() != nil:
		return s.forwardPD(ctx, cancel, r, sw, rm, f, raw, hdr, dec.GetPick().GetPd(), last)
	}
	err := fmt.Errorf("decision %v has no pick", dec.GetPick())
	writeAPIError(sw, apiError{status: http.StatusInternalServerError, typ: typeServer, code: "empty_pick", message: err.Error()})
	return attemptResult{outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS, err: err}
}

// forwardPD sends the body plus the bootstrap fields to prefill and decode concurrently, waits
// for both answers' headers, then relays decode's while prefill's body is drained. A prefill
// 4xx is relayed as is; a prefill 5xx or transport failure fails the request.
func (s *Server) forwardPD(ctx context.Context, cancel context.CancelFunc, r *http.Request, sw *statusWriter, rm *routeMetrics, f *facts,
	raw []byte, hdr http.Header, pd *sluicev1.PrefillDecodePick, last bool) attemptResult {
	route := rm.route
	pre, de := pd.GetPrefill(), pd.GetDecode()
	bs, err := newBootstrap(pre.GetUrl(), pre.GetBootstrapPort(), f.batch)
	var body []byte
	if err == nil {
		body, err = bs.inject(raw, f.batch)
	}
	if err != nil {
		err = fmt.Errorf("prefill engine %s: bootstrap record: %w", pre.GetEngineId(), err)
		writeAPIError(sw, apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "invalid_body", message: err.Error()})
		return attemptResult{outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS, err: err}
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	t0 := time.Now()
	preCh := make(chan answer, 1)
	go func() {
		resp, err := s.send(ctx, pre.GetUrl(), route, body, hdr.Clone())
		preCh <- answer{resp, err}
	}()
	decResp, decErr := s.send(ctx, de.GetUrl(), route, body, hdr)
	p := <-preCh
	closeBody := func(resp *http.Response) {
		if resp != nil {
			resp.Body.Close()
		}
	}

	if p.err != nil || p.resp.StatusCode >= 500 {
		closeBody(decResp)
		if r.Context().Err() != nil {
			closeBody(p.resp)
			return cancelled(r.Context().Err())
		}
		err := p.err
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(p.resp.Body, 512))
			p.resp.Body.Close()
			err = fmt.Errorf("HTTP %d: %s", p.resp.StatusCode, bytes.TrimSpace(msg))
		}
		err = fmt.Errorf("prefill engine %s: %w", pre.GetEngineId(), err)
		if last {
			writeAPIError(sw, apiError{status: http.StatusBadGateway, typ: typeUpstream, code: "prefill_failed", message: err.Error()})
		}
		return engineFailure(err, !last, pre.GetEngineId())
	}
	if p.resp.StatusCode >= 400 {
		closeBody(decResp)
		res := s.relay(r, sw, false, pre.GetEngineId(), p.resp)
		return res
	}
	if res, done := s.checkEngine(r, sw, de.GetEngineId(), decResp, decErr, last); done {
		p.resp.Body.Close()
		return res
	}

	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, p.resp.Body)
		p.resp.Body.Close()
		drained <- err
	}()
	res := s.relay(r, sw, f.stream, de.GetEngineId(), decResp)
	rm.up().Observe(time.Since(t0).Seconds())
	// Prefill has done its part once decode answered; give its body a moment to end, then
	// cut it.
	t := time.NewTimer(time.Second)
	select {
	case err = <-drained:
	case <-t.C:
		cancel()
		err = <-drained
	}
	t.Stop()
	if err != nil && res.err == nil && r.Context().Err() == nil {
		s.logger.Debug("prefill response body ended with an error", slog.String("engine_id", pre.GetEngineId()), slog.Any("error", err))
	}
	return res
}

// checkEngine looks at an engine's answer before anything is relayed. It reports done when the
// attempt ended there: the client left, the engine could not be reached, or it answered 5xx
// (retryable unless last; on the last attempt the 5xx is relayed as is and a transport failure
// becomes a 502).
func (s *Server) checkEngine(r *http.Request, sw *statusWriter, engineID string, resp *http.Response, err error, last bool) (attemptResult, bool) {
	if err != nil {
		if r.Context().Err() != nil {
			return cancelled(r.Context().Err()), true
		}
		err = fmt.Errorf("engine %s: %w", engineID, err)
		if last {
			writeAPIError(sw, apiError{status: http.StatusBadGateway, typ: typeUpstream, code: "engine_unreachable", message: err.Error()})
		}
		return engineFailure(err, !last, engineID), true
	}
	if resp.StatusCode >= 500 && !last {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return engineFailure(fmt.Errorf("engine %s: HTTP %d: %s", engineID, resp.StatusCode, bytes.TrimSpace(msg)), true, engineID), true
	}
	return attemptResult{}, false
}

// bufPool holds relay buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies an engine's answer to the client: status, end-to-end headers, and the body read
// by read, with a flush after every chunk when streaming, so no more than one read's worth is
// ever held. The outcome tells a client that left (CANCELLED) from an engine that broke off
// (ENGINE_FAILURE); a relayed 5xx is an ENGINE_FAILURE too.
func (s *Server) relay(r *http.Request, sw *statusWriter, stream bool, engineID string, resp *http.Response) attemptResult {
	defer resp.Body.Close()
	// The answer's header is this request's own (the engine transport parsed it for this
	// exchange) and net/http copies the handler's header when it is written, so its values are
	// handed over, not copied; capped at their length, so a later Header.Add appends to a new
	// array rather than into the answer's.
	h := sw.Header()
	for k, vs := range resp.Header {
		if isHopByHop(k) {
			continue
		}
		h[k] = vs[:len(vs):len(vs)]
	}
	stream = stream || isEventStream(resp.Header.Get("Content-Type"))
	if stream {
		h.Del("Content-Length")
	}
	sw.WriteHeader(resp.StatusCode)
	if stream {
		sw.Flush()
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := sw.Write(buf[:n]); werr != nil {
				return cancelled(werr)
			}
			if stream {
				sw.Flush()
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if r.Context().Err() != nil {
				return cancelled(r.Context().Err())
			}
			return engineFailure(fmt.Errorf("engine %s: response broke off: %w", engineID, rerr), false, engineID)
		}
	}
	if resp.StatusCode >= 500 {
		return engineFailure(fmt.Errorf("engine %s: HTTP %d", engineID, resp.StatusCode), false, engineID)
	}
	return success()
}

// send POSTs body to {base}{route}.
func (s *Server) send(ctx context.Context, base, route string, body []byte, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+route, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	return engineDoer{s.engines, s.engineRT}.Do(req)
}

func (s *Server) upstreamContext(parent context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.UpstreamTimeout > 0 {
		return context.WithTimeout(parent, s.cfg.UpstreamTimeout)
	}
	return context.WithCancel(parent)
}

// upstreamHeader is the client's header minus hop-by-hop fields, with the request id.
func upstreamHeader(in http.Header, requestID string) http.Header {
	out := make(http.Header, len(in)+2)
	for k, vs := range in {
		if isHopByHop(k) || k == "Content-Length" || k == "Host" {
			continue
		}
		out[k] = vs
	}
	for _, f := range in.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			out.Del(strings.TrimSpace(name))
		}
	}
	if out.Get("Content-Type") == "" {
		out.Set("Content-Type", "application/json")
	}
	out.Set("X-Request-Id", requestID)
	return out
}

func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

func isEventStream(contentType string) bool {
	// The media type can only be text/event-stream when the value contains it (any case); the
	// common application/json answer is told apart without parsing.
	if len(contentType) < len("text/event-stream") || !containsFold(contentType, "event-stream") {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// containsFold reports whether s contains the lowercase ASCII word sub in any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
