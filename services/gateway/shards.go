package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	"github.com/sluicehq/sluice/components/limits"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Model-sharded deciders (docs/decisions.md, "Model-sharded deciders"): the gateway reads the
// configuration's shards list from -decider-addr when it starts (before it serves the first
// request) and again every shardMapPoll, and sends each model of a shard that lists its
// deciders straight to those deciders (round robin over them), Release included. A model whose
// shard lists no deciders, or that no shard lists, goes to -decider-addr; a WRONG_SHARD answer
// naming deciders still routes a model (a shard the gateway has not read yet, or a configuration
// the gateway may not read), and a model that leaves a listed shard goes back to -decider-addr
// at the next read. With no shards in the configuration every call goes to -decider-addr, as
// before. A gateway that embeds a decider does not read the map: its own shard's models must
// stay in process, and it does not know which shard that is, so it learns the other shards
// from WRONG_SHARD alone.

// shardMapPoll is how often the shards list is read again; tests shorten it.
var shardMapPoll = 30 * time.Second

// shardRouter is the gateway's router over sharded deciders: deciderclient.Sharded, plus
// the reading of the shards list that routes models up front.
type shardRouter struct {
	*deciderclient.Sharded
	readMap bool // false with an embedded decider

	mu      sync.Mutex
	version int64               // of the shards list in force; 0 before the first read
	failing bool                // the last read failed
	routed  map[string][]string // model -> deciders routed from the shards list
}

// newShardRouter returns the router over home, dialing shard deciders with home's options
// and the message size limits of -decider-addr's connection. readMap is false when home is an
// embedded decider.
func newShardRouter(home *deciderclient.Client, copts []deciderclient.Option, sizes limits.Sizes, readMap bool) *shardRouter {
	opts := append(copts[:len(copts):len(copts)], deciderclient.WithDialOptions(
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(sizes.MaxMessageBytes), grpc.MaxCallRecvMsgSize(sizes.MaxMessageBytes))))
	return &shardRouter{Sharded: deciderclient.NewSharded(home, opts...), readMap: readMap, routed: map[string][]string{}}
}

// followShardMap reads the shards list once (bounded by -decide-timeout), then again every
// shardMapPoll in the background until ctx ends; the returned func stops that and waits.
func (s *Server) followShardMap(ctx context.Context) (stop func()) {
	if !s.shards.readMap {
		return func() {}
	}
	s.readShardMap(ctx)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(shardMapPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.readShardMap(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// readShardMap reads the configuration from -decider-addr (AdminService.GetConfig, with the
// gateway's decider token, as /v1/models reads the engines) and routes by its shards list. A
// failed read keeps the routes in force; it is logged at most once per change of outcome.
func (s *Server) readShardMap(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DecideTimeout)
	defer cancel()
	resp, err := s.admin.GetConfig(s.deciderCtx(ctx), &sluicev1.GetConfigRequest{})
	if err != nil {
		if s.shards.readFailed(true) {
			s.logger.Info("shard map not read from -decider-addr; models are routed by WRONG_SHARD answers until it is",
				slog.Any("error", err))
		}
		return
	}
	if s.shards.readFailed(false) {
		s.logger.Info("shard map read from -decider-addr again")
	}
	var doc struct {
		Shards []struct {
			ID       string   `json:"id"`
			Models   []string `json:"models"`
			Deciders []string `json:"deciders"`
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(resp.GetDocumentJson()), &doc); err != nil {
		s.logger.Warn("shard map: the decider's configuration is not JSON; keeping the routes in force", slog.Any("error", err))
		return
	}
	want := map[string][]string{}
	for _, sh := range doc.Shards {
		if len(sh.Deciders) == 0 {
			continue
		}
		for _, m := range sh.Models {
			want[m] = sh.Deciders
		}
	}
	s.shards.route(s.logger, resp.GetVersion(), want)
}

// readFailed records whether the last read failed and reports whether that changed.
func (r *shardRouter) readFailed(failed bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := r.failing != failed
	r.failing = failed
	return changed
}

// route makes the routes from the shards list equal to want (model -> deciders).
func (r *shardRouter) route(logger *slog.Logger, version int64, want map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version <= r.version {
		return
	}
	var changed []string
	for m, deciders := range want {
		if slices.Equal(r.routed[m], deciders) {
			continue
		}
		if err := r.SetModelDeciders(m, deciders); err != nil {
			logger.Warn("shard map: cannot route model to its shard's deciders; it follows WRONG_SHARD answers",
				slog.String("model", m), slog.String("deciders", strings.Join(deciders, ",")), slog.Any("error", err))
			continue
		}
		r.routed[m] = deciders
		changed = append(changed, m)
	}
	for m := range maps.Clone(r.routed) {
		if _, ok := want[m]; !ok {
			r.ForgetModel(m)
			delete(r.routed, m)
			changed = append(changed, m)
		}
	}
	r.version = version
	if len(changed) > 0 {
		slices.Sort(changed)
		logger.Info("shard map read: these models go to their shard's deciders (or, when none is listed, to -decider-addr)",
			slog.Int64("config_version", version), slog.Any("models", changed))
	}
}
