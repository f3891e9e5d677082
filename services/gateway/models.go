package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// model is one entry of OpenAI's model list, and the answer of GET /v1/models/{model}.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels serves GET /v1/models in OpenAI's list shape: the models of the engines the
// decider currently considers healthy, sorted, each once.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.metrics.requests.WithLabelValues(routeModels, statusLabel(sw.code())).Inc() }()
	ids, err := s.healthyModels(r.Context())
	if err != nil {
		writeAPIError(sw, decideError(err, s.cfg.RetryAfter))
		return
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, 0, len(ids))}
	now := time.Now().Unix()
	for _, id := range ids {
		out.Data = append(out.Data, model{ID: id, Object: "model", Created: now, OwnedBy: "sluice"})
	}
	writeJSON(sw, out)
}

// retrieveModel serves GET /v1/models/{model} (the id may contain slashes, as in
// "Qwen/Qwen3-8B"): the model object when a healthy engine serves it, else 404
// model_not_found, as OpenAI answers.
func (s *Server) retrieveModel(w http.ResponseWriter, r *http.Request, params map[string]string) {
	id := params["model"]
	if id == "" {
		// The pattern's ** also matches /v1/models itself.
		s.listModels(w, r, params)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.metrics.requests.WithLabelValues(routeModels+"/{model}", statusLabel(sw.code())).Inc() }()
	ids, err := s.healthyModels(r.Context())
	if err != nil {
		writeAPIError(sw, decideError(err, s.cfg.RetryAfter))
		return
	}
	if _, found := slices.BinarySearch(ids, id); !found {
		known := "none"
		if len(ids) > 0 {
			known = strings.Join(ids, ", ")
		}
		writeAPIError(sw, apiError{status: http.StatusNotFound, typ: typeInvalidRequest, param: "model", code: codeModelNotFound,
			message: fmt.Sprintf("The model %q does not exist: no healthy engine serves it (models served: %s)", id, known)})
		return
	}
	writeJSON(sw, model{ID: id, Object: "model", Created: time.Now().Unix(), OwnedBy: "sluice"})
}

// healthyModels lists the models of the engines the decider considers healthy, sorted, each
// once.
func (s *Server) healthyModels(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DecideTimeout)
	defer cancel()
	resp, err := s.admin.ListEngines(s.deciderCtx(ctx), &sluicev1.ListEnginesRequest{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range resp.GetEngines() {
		if e.GetHealthy() {
			ids = append(ids, e.GetModels()...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
