package simengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// routeKind is the response dialect of a generation route.
type routeKind int

const (
	kindChat routeKind = iota
	kindCompletion
	kindGenerate
)

// generation serves one of the three generation routes: parse, check the PD fields for the
// role, run the request in the engine (cancelled with the client) and answer in the route's
// shape, streamed as SSE when asked.
func (s *Server) generation(kind routeKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.failed.Load() {
			writeError(w, http.StatusServiceUnavailable, "engine is marked unhealthy")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
				return
			}
			writeError(w, http.StatusBadRequest, "read body: "+err.Error())
			return
		}
		var req genRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
			return
		}
		tokens, err := req.tokens()
		if err == nil && len(tokens) == 0 {
			err = errors.New("the prompt has no tokens")
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		boot, hasBoot, err := req.bootstrap()
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if !hasBoot && s.role != engine.RolePlain {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("a %s engine needs bootstrap_host, bootstrap_port and bootstrap_room in the body", s.role))
			return
		}
		s.recordRequest(r.URL.Path, boot, hasBoot, len(tokens))
		if s.role == engine.RoleDecode && s.cfg.CheckBootstrap {
			if err := dialBootstrap(r.Context(), boot); err != nil {
				writeError(w, http.StatusBadGateway, err.Error())
				return
			}
		}
		lora, err := req.loraName(s.adapters)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		asked, err := req.dpRank(r.Header)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		rank, err := s.pick(asked)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		submitted := time.Now()
		run, err := s.engines[rank].Submit(r.Context(), engine.Request{TokenIDs: tokens, MaxTokens: req.maxTokens(), Stream: req.Stream, LoRAName: lora, CacheSalt: req.CacheSalt})
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		resp := &responder{kind: kind, model: s.cfg.Model, id: fmt.Sprintf("%s-%s-%d", kind.idPrefix(), s.cfg.ID, run.ID),
			created: time.Now().Unix(), includeUsage: req.StreamOptions.IncludeUsage}
		if req.Model != "" {
			resp.model = req.Model
		}
		done := func(res engine.Result) {
			if s.cfg.OnResult != nil {
				s.cfg.OnResult(Generation{EngineID: s.cfg.ID, Rank: rank, RequestID: r.Header.Get("X-Request-Id"), Submitted: submitted,
					Prompt: tokens, Result: res})
			}
		}
		if req.Stream {
			s.stream(w, r, run, resp, func() { s.ttft[rank].Observe(time.Since(submitted).Seconds()) }, done)
			return
		}
		res, err := run.Result()
		if err != nil {
			s.logger.Debug("request ended early", slog.Any("error", err))
			return
		}
		// The model's first-token instant: the answer waits for the whole run.
		s.ttft[rank].Observe((res.QueueTime + res.PrefillTime).Seconds())
		done(res)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp.final(res))
	}
}

// stream writes one SSE event per token, flushed at once, then the final event and [DONE].
// first is called when the first token is out, done with the result of a run that ended
// normally.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, run *engine.Run, resp *responder, first func(), done func(engine.Result)) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	n := 0
	for tok := range run.Tokens() {
		if n++; n == 1 {
			first()
		}
		if !send(resp.chunk(tok)) {
			break // the client is gone; its context cancels the run
		}
	}
	res, err := run.Result()
	if err != nil {
		s.logger.Debug("stream ended early", slog.Any("error", err))
		return
	}
	done(res)
	for _, ev := range resp.closing(res) {
		if !send(ev) {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// dialBootstrap simulates the decode side of the KV handoff: the prefill engine's bootstrap
// port must accept a connection.
func dialBootstrap(ctx context.Context, b bootstrap) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	host := strings.TrimSuffix(strings.TrimPrefix(b.Host, "["), "]")
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(b.Port)))
	if err != nil {
		return fmt.Errorf("KV bootstrap %s:%d unreachable: %w", b.Host, b.Port, err)
	}
	return c.Close()
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, code int, msg string) {
	typ := "invalid_request_error"
	switch {
	case code >= 500:
		typ = "server_error"
	case code == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}

func (k routeKind) idPrefix() string {
	switch k {
	case kindChat:
		return "chatcmpl"
	case kindCompletion:
		return "cmpl"
	}
	return "gen"
}
