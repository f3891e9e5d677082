// Package console is the decider's web console, served at /ui/: the fleet, the buckets in
// force with live counters, a live tail of decisions, prefix-cache reuse and the configuration
// history. The page is plain HTML, CSS and JavaScript embedded in the binary (assets/), with
// no build step and nothing fetched from elsewhere at run time (docs/console.md says why); it
// reads the console's own JSON endpoints under /ui/api/ and the decider's REST API (/v1/...)
// for what that already serves (versions, rollback, dry-run Decide), so those keep their own
// permission rules.
//
// The decider records every Decide call into a Tail (tail.go) at the cost of one atomic add and
// one store; the console's readers (the stream, the statistics) poll it off the Decide path.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/components/enginehealth"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// Deps are the decider's tables the console reads. Registry, Load, Leases, Store and Tail are
// required; the others may be nil (no health tracker, no KV ingestion).
type Deps struct {
	Registry *registry.Registry
	Load     *loadtable.Table
	Leases   *inflight.Tracker
	Store    config.Store
	Tail     *Tail
	// Health is an engine's probe and breaker state.
	Health func(id string) enginehealth.State
	// Uncertain reports an engine whose KV residency is uncertain.
	Uncertain func(id string) bool
	// Prefix returns the prefix index cache-aware policies read (nil without KV ingestion).
	Prefix func() policy.PrefixSource
	// IndexStats returns the prefix index's counters; false without KV ingestion.
	IndexStats func() (kvindex.Stats, bool)
	// EngineBlocks returns the blocks the prefix index holds per engine, indexed by slot
	// (kvindex.Index.EngineBlocks); nil without KV ingestion.
	EngineBlocks func(dst []int) []int
	// Authorize checks a request for the viewer permission (admin reads, same rules as the
	// admin API); an *AccessError says why not.
	Authorize func(r *http.Request) error
	// ExplainJSON renders an explanation exactly as Decide's REST answer carries it.
	ExplainJSON func(*decider.Explain) (json.RawMessage, error)
}

// AccessError is a refused request: the HTTP status (401, 403), the machine-readable reason
// and the message, as the admin API gives them.
type AccessError struct {
	Status          int
	Reason, Message string
}

func (e *AccessError) Error() string { return e.Message }

// Console serves the pages and their data. Run folds the tail into the statistics; Close ends
// open streams (the HTTP server's shutdown calls it, as it does not end streaming requests).
type Console struct {
	logger *slog.Logger
	deps   Deps
	fleet  *fleetSources
	stats  *stats
	static http.Handler

	closeOnce sync.Once
	closed    chan struct{}
}

// New builds the console; it starts nothing.
func New(logger *slog.Logger, deps Deps) (*Console, error) {
	if deps.Registry == nil || deps.Load == nil || deps.Leases == nil || deps.Store == nil || deps.Tail == nil || deps.Authorize == nil {
		return nil, errors.New("console: Registry, Load, Leases, Store, Tail and Authorize are required")
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	c := &Console{logger: logger, deps: deps, closed: make(chan struct{}),
		fleet:  &fleetSources{reg: deps.Registry, load: deps.Load, leases: deps.Leases, health: deps.Health, uncertain: deps.Uncertain, blocks: deps.EngineBlocks},
		static: http.StripPrefix(Prefix, http.FileServerFS(sub))}
	slot := func(id string) (uint32, bool) {
		w, ok := deps.Registry.Snapshot().Get(id)
		if !ok {
			return 0, false
		}
		return uint32(w.Slot), true
	}
	c.stats = newStats(deps.Tail, func() *config.Document { return deps.Store.Current().Document }, deps.Prefix, slot)
	return c, nil
}

// Run folds new decisions into the statistics every 100 ms until ctx ends.
func (c *Console) Run(ctx context.Context) error { return c.stats.run(ctx, 100*time.Millisecond) }

// Close ends every open decision stream; it is safe to call more than once.
func (c *Console) Close() { c.closeOnce.Do(func() { close(c.closed) }) }

// ServeHTTP serves /ui/ (the page and its assets, open: they hold no data) and /ui/api/...
// (the data, for viewer or admin tokens when the decider has any).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, isAPI := strings.CutPrefix(r.URL.Path, Prefix+"api/")
	if !isAPI {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "the console's pages are read with GET")
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		c.static.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "the console's data is read with GET; writes go through the admin API (/v1/admin/...)")
		return
	}
	if err := c.deps.Authorize(r); err != nil {
		var ae *AccessError
		if errors.As(err, &ae) {
			writeError(w, ae.Status, ae.Reason, ae.Message)
			return
		}
		writeError(w, http.StatusInternalServerError, "INTERNAL", err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case rest == "fleet":
		c.serveFleet(w, r)
	case rest == "buckets":
		c.serveBuckets(w, r)
	case rest == "cache":
		c.serveCache(w)
	case rest == "decisions":
		c.serveDecisions(w, r)
	case rest == "decisions/stream":
		c.serveStream(w, r)
	case strings.HasPrefix(rest, "decisions/"):
		c.serveDecision(w, strings.TrimPrefix(rest, "decisions/"))
	default:
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no console endpoint "+r.URL.Path+"; see docs/console.md")
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return // the client went away
	}
}

func writeError(w http.ResponseWriter, status int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "reason": reason, "message": message})
}

// intParam reads a non-negative integer query parameter, def when absent.
func intParam(r *http.Request, name string, def, maxV int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errors.New("query parameter " + name + " " + strconv.Quote(s) + ": want a non-negative integer")
	}
	return min(n, maxV), nil
}

func (c *Console) serveFleet(w http.ResponseWriter, r *http.Request) {
	q := fleetQuery{id: r.URL.Query().Get("id"), q: r.URL.Query().Get("q"), role: r.URL.Query().Get("role"), health: r.URL.Query().Get("health"), sort: r.URL.Query().Get("sort")}
	var err error
	if q.offset, err = intParam(r, "offset", 0, 1<<30); err == nil {
		q.limit, err = intParam(r, "limit", 100, 1000)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_QUERY", err.Error())
		return
	}
	switch q.health {
	case "", "healthy", "unhealthy", "drained", "uncertain":
	default:
		writeError(w, http.StatusBadRequest, "INVALID_QUERY", "query parameter health "+strconv.Quote(q.health)+": want healthy, unhealthy, drained or uncertain")
		return
	}
	if s := strings.TrimPrefix(q.sort, "-"); s != "" {
		if _, ok := fleetColumns[s]; !ok {
			writeError(w, http.StatusBadRequest, "INVALID_QUERY", "query parameter sort "+strconv.Quote(q.sort)+": want one of id, role, health, running, waiting, kv, inflight, age, blocks (- prefix: descending)")
			return
		}
	}
	p := c.fleet.page(q)
	out := struct {
		fleetPage
		Index *kvindex.Stats `json:"kv_index,omitempty"`
	}{fleetPage: p}
	if c.deps.IndexStats != nil {
		if st, ok := c.deps.IndexStats(); ok {
			out.Index = &st
		}
	}
	writeJSON(w, out)
}
