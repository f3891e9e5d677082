package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// listModels serves GET /v1/models in OpenAI's list shape: the models of the engines the
// decider currently considers healthy, sorted, each once.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.metrics.requests.WithLabelValues(routeModels, statusLabel(sw.code())).Inc() }()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecideTimeout)
	defer cancel()
	resp, err := s.admin.ListEngines(s.deciderCtx(ctx), &sluicev1.ListEnginesRequest{})
	if err != nil {
		writeAPIError(sw, decideError(err, s.cfg.RetryAfter))
		return
	}
	var ids []string
	for _, e := range resp.GetEngines() {
		if e.GetHealthy() {
			ids = append(ids, e.GetModels()...)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, 0, len(ids))}
	now := time.Now().Unix()
	for _, id := range ids {
		out.Data = append(out.Data, model{ID: id, Object: "model", Created: now, OwnedBy: "sluice"})
	}
	sw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(sw).Encode(out)
}
