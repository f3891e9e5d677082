package enginelink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// enginesPath is the decider's REST route of AdminService.ListEngines.
const enginesPath = "/v1/admin/engines"

// Label keys a fleet engine may carry to configure the link; see fleetSpec.
const (
	// LabelEngineKind names the engine kind ("vllm" or "sglang") of a registered engine.
	LabelEngineKind = "engine"
	// LabelLoadsURL is an SGLang /v1/loads URL to scrape instead of metrics.
	LabelLoadsURL = "loads_url"
)

// runFleet reads the decider's engine registry every FleetPoll and follows what it lists.
// A failed read keeps the engines of the last good one.
func (l *Link) runFleet(ctx context.Context) {
	t := time.NewTicker(l.cfg.FleetPoll)
	defer t.Stop()
	var errs, invalid throttle
	for {
		specs, problems, err := l.fetchFleet(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.m.fleetPolls.WithLabelValues("error").Inc()
			if ok, held := errs.allow(time.Now()); ok {
				l.logger.Warn("cannot read the decider's engine registry; keeping the engines followed so far",
					slog.String("url", l.cfg.FleetAdminURL+enginesPath), slog.Any("error", err), slog.Int("failures_held_back", held))
			}
		default:
			l.m.fleetPolls.WithLabelValues("ok").Inc()
			l.m.fleetLast.SetToCurrentTime()
			if problems != nil {
				if ok, _ := invalid.allow(time.Now()); ok {
					l.logger.Warn("registered engines skipped", slog.Any("error", problems))
				}
			}
			l.reconcile(ctx, l.static, specs)
			l.m.engines.WithLabelValues("fleet").Set(float64(len(specs)))
			l.ready.Store(true)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fetchFleet reads GET /v1/admin/engines (grpc-gateway JSON, camelCase or proto names) and maps
// the engines to specs; problems lists the engines that could not be followed.
func (l *Link) fetchFleet(ctx context.Context) (specs []EngineSpec, problems error, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(l.cfg.FleetAdminURL, "/")+enginesPath, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if l.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+l.cfg.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			hint = " (set -admin-token to a viewer or admin token of the decider)"
		}
		return nil, nil, fmt.Errorf("GET %s: %s%s: %.200s", req.URL, resp.Status, hint, body)
	}
	var list sluicev1.ListEnginesResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &list); err != nil {
		return nil, nil, fmt.Errorf("GET %s: decode: %w", req.URL, err)
	}
	raw := make([]EngineSpec, 0, len(list.GetEngines()))
	for _, e := range list.GetEngines() {
		raw = append(raw, fleetSpec(e))
	}
	specs, problems = normalizeSpecs(raw, "fleet")
	var usable []EngineSpec
	for _, s := range specs {
		if s.viaBind() && l.cfg.KVBind == "" {
			problems = joinErr(problems, fmt.Errorf("fleet engine %q: kv_events_endpoint %q needs this link's -kv-bind; following its load only", s.ID, s.KVEventsEndpoint))
			s.KVEventsEndpoint = ""
		}
		usable = append(usable, s)
	}
	return usable, problems, nil
}

// fleetSpec maps a registered engine: its first model; kind from the "engine" label (default
// vllm); metrics_url, or url + "/metrics" when empty; an SGLang /v1/loads URL from the
// "loads_url" label.
func fleetSpec(e *sluicev1.Engine) EngineSpec {
	s := EngineSpec{
		ID:               e.GetId(),
		Engine:           e.GetLabels()[LabelEngineKind],
		KVEventsEndpoint: e.GetKvEventsEndpoint(),
		KVReplayEndpoint: e.GetKvReplayEndpoint(),
		MetricsURL:       e.GetMetricsUrl(),
		LoadsURL:         e.GetLabels()[LabelLoadsURL],
		DPSize:           int(e.GetDpSize()),
	}
	if len(e.GetModels()) > 0 {
		s.Model = e.GetModels()[0]
	}
	if s.MetricsURL == "" && e.GetUrl() != "" {
		s.MetricsURL = strings.TrimRight(e.GetUrl(), "/") + "/metrics"
	}
	return s
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return fmt.Errorf("%w; %w", a, b)
}
