package simengine

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// LastRequest is what GET /admin/last-request returns: the PD fields and size of the most
// recent generation request this engine accepted, so end-to-end tests can check that a prefill
// and a decode engine saw the same bootstrap room.
type LastRequest struct {
	EngineID string `json:"engine_id"`
	Role     string `json:"role"`
	// Requests counts the generation requests accepted so far; 0 means the rest is empty.
	Requests      int64     `json:"requests"`
	Path          string    `json:"path,omitempty"`
	BootstrapHost string    `json:"bootstrap_host,omitempty"`
	BootstrapPort *int      `json:"bootstrap_port,omitempty"`
	BootstrapRoom *uint64   `json:"bootstrap_room,omitempty"`
	PromptTokens  int       `json:"prompt_tokens"`
	At            time.Time `json:"at,omitzero"`
}

func (s *Server) recordRequest(path string, b bootstrap, hasBoot bool, tokens int) {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	n := s.last.Requests + 1
	s.last = LastRequest{Requests: n, Path: path, PromptTokens: tokens, At: time.Now()}
	if hasBoot {
		port, room := b.Port, b.Room
		s.last.BootstrapHost, s.last.BootstrapPort, s.last.BootstrapRoom = b.Host, &port, &room
	}
}

func (s *Server) lastRequest(w http.ResponseWriter, _ *http.Request) {
	s.lastMu.Lock()
	last := s.last
	s.lastMu.Unlock()
	last.EngineID, last.Role = s.cfg.ID, s.role.String()
	writeJSON(w, last)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.failed.Load() {
		http.Error(w, "unhealthy", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (s *Server) setFailed(failed bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.failed.Store(failed)
		writeJSON(w, map[string]any{"engine_id": s.cfg.ID, "healthy": !failed})
	}
}

func (s *Server) resetCache(w http.ResponseWriter, _ *http.Request) {
	for _, e := range s.engines {
		e.Reset()
	}
	writeJSON(w, map[string]any{"engine_id": s.cfg.ID, "cleared": true})
}

func (s *Server) info(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"engine_id": s.cfg.ID, "model": s.cfg.Model, "role": s.role.String(),
		"bootstrap_port": s.BootstrapPort(), "block_size": s.cfg.BlockSize, "dp_size": len(s.engines), "healthy": !s.failed.Load()})
}

// tokenize serves POST /tokenize: {"prompt": "..."} (or "text") or {"messages": [...]} →
// {"tokens": [...], "count": N, "max_model_len": capacity}.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	tokens, err := req.tokens()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if tokens == nil {
		tokens = []uint32{}
	}
	writeJSON(w, map[string]any{"tokens": tokens, "count": len(tokens), "max_model_len": s.cfg.CacheBlocks * s.cfg.BlockSize})
}

// models serves GET /v1/models: the base model, then each LoRA adapter with the base as its
// parent, as vLLM lists them.
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	maxLen := s.cfg.CacheBlocks * s.cfg.BlockSize
	data := []any{map[string]any{
		"id": s.cfg.Model, "object": "model", "created": s.started.Unix(), "owned_by": "sluice-simengine",
		"root": s.cfg.Model, "parent": nil, "max_model_len": maxLen,
	}}
	for _, a := range s.adapters {
		data = append(data, map[string]any{"id": a, "object": "model", "created": s.started.Unix(),
			"owned_by": "sluice-simengine", "root": a, "parent": s.cfg.Model, "max_model_len": maxLen})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
