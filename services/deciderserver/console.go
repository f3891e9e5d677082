package deciderserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/services/deciderserver/console"
	"github.com/sluicehq/sluice/state/kvindex"
)

// webConsole is the console at /ui/ (package console) and the tail Decide records into; nil
// when -console=false.
type webConsole struct {
	ui   *console.Console
	tail *console.Tail
}

// newConsole builds the console over the server's tables, mounts it on mux and ends its
// streams when httpServer shuts down. It returns nil when the console is off.
func newConsole(s *Server, mux *http.ServeMux, httpServer *http.Server, svc *deciderService) (*webConsole, error) {
	if !s.cfg.Console {
		return nil, nil
	}
	tail := console.NewTail()
	deps := console.Deps{Registry: s.reg, Load: s.load, Leases: s.leases, Store: s.store, Tail: tail,
		Health: s.engineHealth.State, Authorize: s.authorizeConsole, ExplainJSON: explainJSON}
	if in := s.ingestion; in != nil {
		deps.Uncertain = in.kv.Uncertain
		deps.Prefix = func() policy.PrefixSource { return in.shared.PrefixSource() }
		deps.IndexStats = func() (kvindex.Stats, bool) { return in.shared.Index.Stats(), true }
		deps.EngineBlocks = func(dst []int) []int { return in.shared.Index.EngineBlocks(dst) }
	}
	ui, err := console.New(s.logger, deps)
	if err != nil {
		return nil, err
	}
	mux.Handle(console.Prefix, ui)
	mux.Handle("/ui", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	httpServer.RegisterOnShutdown(ui.Close)
	svc.console = tail
	return &webConsole{ui: ui, tail: tail}, nil
}

// run starts the console's statistics loop in g; nil-safe.
func (c *webConsole) run(ctx context.Context, g *errgroup.Group) {
	if c == nil {
		return
	}
	g.Go(func() error { return c.ui.Run(ctx) })
}

// authorizeConsole applies the admin API's read rule (viewer or admin token when the decider
// has any) to a console data request.
func (s *Server) authorizeConsole(r *http.Request) error {
	_, err := s.auth.authorize(r.Context(), permRead, r.Header.Get("Authorization"))
	var ae *authError
	if errors.As(err, &ae) {
		st := http.StatusForbidden
		if ae.code == codes.Unauthenticated {
			st = http.StatusUnauthorized
		}
		return &console.AccessError{Status: st, Reason: ae.reason, Message: "console: " + ae.message}
	}
	return err
}

// explainJSON renders an explanation as Decide's REST answer does.
func explainJSON(e *decider.Explain) (json.RawMessage, error) {
	return protojson.Marshal(explainToProto(e))
}

// recordDecision is the Decide hook: one Record into the console's tail (built here, copied into
// its slot: an atomic add and a copy, no allocation; nothing waits for a reader), and now and
// then a Sample with a copy of the prompt for the cache statistics. It reads no clock: start and
// took are the caller's (a clock read costs more than the rest of the hook on some VMs). tail
// nil (console off) records nothing.
func recordDecision(tail *console.Tail, req *policy.Request, dec *decider.Decision, err error, start time.Time, took time.Duration) {
	if tail == nil {
		return
	}
	r := console.Record{At: start, TookMicros: took.Microseconds(), Model: req.Model, RequestID: req.RequestID,
		InputTokens: req.InputTokens, DryRun: req.DryRun}
	if req.HasPeak {
		r.PeakTokens = req.ExpectedPeakTokens
	}
	if err != nil {
		var e *decider.Error
		if errors.As(err, &e) {
			r.Error, r.Message = e.Reason, e.Message
			for _, rj := range e.Rejections {
				r.Rejections = append(r.Rejections, console.Rejection{Bucket: rj.BucketID, Engine: rj.EngineID, Limit: rj.Limit})
			}
		} else {
			r.Error, r.Message = "CANCELED", err.Error()
		}
		r.Explain = explainOf(err)
		r.HasExplain = r.Explain != nil
		tail.Put(&r)
		return
	}
	r.Bucket, r.ConfigVersion, r.Explain, r.HasExplain = dec.BucketID, dec.ConfigVersion, dec.Explain, dec.Explain != nil
	first := dec.Plain
	if dec.PD {
		first = dec.Prefill
		if dec.Decode.Engine != nil {
			r.Decode, r.DecodeReason = dec.Decode.Engine.ID, dec.Decode.Reason
		}
	}
	if first.Engine != nil {
		r.Engine, r.Reason = first.Engine.ID, first.Reason
	}
	tail.Put(&r)
	if r.Engine != "" && tail.WantSample(start.UnixNano()+int64(took), len(req.TokenIDs)) {
		tail.Offer(console.Sample{At: start, Engine: r.Engine, Model: req.Model, LoRA: req.LoRAName, CacheSalt: req.CacheSalt,
			InputTokens: req.InputTokens, TokenIDs: append([]uint32(nil), req.TokenIDs...)})
	}
}
