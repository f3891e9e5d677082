package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/state/config"
)

// bucketView is one bucket of the configuration in force with its live counters.
type bucketView struct {
	Spec     config.BucketSpec `json:"spec"`
	Kind     string            `json:"kind"` // plain or pd
	Order    int               `json:"order"`
	Counters bucketCounters    `json:"counters"`
}

func (c *Console) serveBuckets(w http.ResponseWriter, r *http.Request) {
	snap := c.deps.Store.Current()
	out := struct {
		Version   int64            `json:"version"`
		Author    string           `json:"author,omitempty"`
		CreatedAt string           `json:"created_at,omitempty"`
		LoadedAt  string           `json:"loaded_at"`
		Source    string           `json:"source"`
		Buckets   []bucketView     `json:"buckets"`
		Errors    map[string]int64 `json:"errors"`
		Decisions int64            `json:"decisions"`
		Lost      uint64           `json:"lost"`
	}{Version: snap.Version, LoadedAt: snap.LoadedAt.UTC().Format(time.RFC3339), Source: snap.Source, Buckets: []bucketView{}}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if vs, err := c.deps.Store.Versions(ctx, 1); err == nil && len(vs) > 0 && vs[0].Version == snap.Version {
		out.Author, out.CreatedAt = vs[0].Author, vs[0].CreatedAt.UTC().Format(time.RFC3339)
	}
	c.stats.mu.Lock()
	for i, b := range bucketOrder(snap.Document) {
		v := bucketView{Spec: b, Kind: "plain", Order: i, Counters: bucketCounters{Rejections: map[string]int64{}}}
		if b.Groups.PD != nil {
			v.Kind = "pd"
		}
		if bc := c.stats.buckets[b.ID]; bc != nil {
			v.Counters.Decisions, v.Counters.Fallbacks = bc.Decisions, bc.Fallbacks
			for k, n := range bc.Rejections {
				v.Counters.Rejections[k] = n
			}
		}
		out.Buckets = append(out.Buckets, v)
	}
	out.Errors = make(map[string]int64, len(c.stats.errors))
	for k, n := range c.stats.errors {
		out.Errors[k] = n
	}
	out.Decisions, out.Lost = c.stats.total, c.stats.lost
	c.stats.mu.Unlock()
	writeJSON(w, out)
}

func (c *Console) serveCache(w http.ResponseWriter) {
	now := time.Now().Unix() / BinSeconds * BinSeconds
	out := struct {
		BinSeconds int            `json:"bin_seconds"`
		Bins       []cacheBin     `json:"bins"`
		Engines    []engineCache  `json:"engines"`
		Index      map[string]any `json:"kv_index,omitempty"`
	}{BinSeconds: BinSeconds, Engines: []engineCache{}}
	c.stats.mu.Lock()
	// The last Bins bins ending now, oldest first, empty ones included so the chart's x axis is time.
	for i := Bins - 1; i >= 0; i-- {
		start := now - int64(i)*BinSeconds
		b := c.stats.bins[(start/BinSeconds)%Bins]
		if b.Start != start {
			b = cacheBin{Start: start}
		}
		out.Bins = append(out.Bins, b)
	}
	for _, e := range c.stats.engines {
		out.Engines = append(out.Engines, *e)
	}
	c.stats.mu.Unlock()
	slices.SortFunc(out.Engines, func(a, b engineCache) int {
		if a.Decisions != b.Decisions {
			return int(b.Decisions - a.Decisions)
		}
		return strings.Compare(a.Engine, b.Engine)
	})
	if c.deps.IndexStats != nil {
		if st, ok := c.deps.IndexStats(); ok {
			out.Index = map[string]any{"blocks": st.Nodes, "max_blocks": st.MaxNodes, "holders": st.Holders, "pairs": st.Pairs,
				"lookups": st.Lookups, "lookup_hits": st.LookupHits, "evictions": st.Evictions, "bytes": st.Bytes}
		}
	}
	writeJSON(w, out)
}

// decisionFilter keeps the records the page asked for: each set field must match.
type decisionFilter struct {
	model, bucket, engine, reason string
}

func filterOf(r *http.Request) decisionFilter {
	q := r.URL.Query()
	return decisionFilter{model: q.Get("model"), bucket: q.Get("bucket"), engine: q.Get("engine"), reason: q.Get("reason")}
}

func (f decisionFilter) keep(r *Record) bool {
	switch {
	case f.model != "" && r.Model != f.model:
		return false
	case f.bucket != "" && r.Bucket != f.bucket:
		return false
	case f.engine != "" && r.Engine != f.engine && r.Decode != f.engine:
		return false
	case f.reason != "" && r.Reason != f.reason && r.DecodeReason != f.reason && r.Error != f.reason:
		return false
	}
	return true
}

// serveDecisions answers the most recent decisions (at most limit, default 200) that match
// the filter, newest last, and the sequence number to stream from.
func (c *Console) serveDecisions(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", 200, TailSize)
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_QUERY", err.Error())
		return
	}
	f := filterOf(r)
	head := c.deps.Tail.Head()
	recs, _, _ := c.deps.Tail.Since(head-min(head, TailSize), 0, nil)
	recs = slices.DeleteFunc(recs, func(r Record) bool { return !f.keep(&r) })
	if recs == nil {
		recs = []Record{} // an empty list, not null
	}
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	writeJSON(w, struct {
		Head      uint64   `json:"head"`
		Decisions []Record `json:"decisions"`
	}{head, recs})
}

// serveDecision answers one decision with its explanation while the tail holds it.
func (c *Console) serveDecision(w http.ResponseWriter, seqText string) {
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_QUERY", fmt.Sprintf("decision %q: want its sequence number", seqText))
		return
	}
	rec, ok := c.deps.Tail.Get(seq)
	if !ok {
		writeError(w, http.StatusNotFound, "DECISION_NOT_FOUND", fmt.Sprintf("decision %d is no longer in the tail (it keeps the last %d)", seq, TailSize))
		return
	}
	out := struct {
		Record
		Explain json.RawMessage `json:"explain,omitempty"`
	}{Record: rec}
	if rec.Explain != nil && c.deps.ExplainJSON != nil {
		if out.Explain, err = c.deps.ExplainJSON(rec.Explain); err != nil {
			writeError(w, http.StatusInternalServerError, "INTERNAL", err.Error())
			return
		}
	}
	writeJSON(w, out)
}

// Stream pacing: every streamTick the stream sends what arrived, at most streamBatch records
// (the rest are counted as skipped, so a browser is never sent more than it can draw).
const (
	streamTick  = 100 * time.Millisecond
	streamBatch = 250
)

// serveStream is the live tail as server-sent events: "decision" events carry one Record
// each, id its sequence number; a "skipped" event counts records the stream did not send (the
// tail overwrote them, or more arrived in a tick than streamBatch). It starts after the
// Last-Event-ID header or the after parameter, or at the head.
func (c *Console) serveStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "INTERNAL", "streaming is not supported on this connection")
		return
	}
	next := c.deps.Tail.Head()
	for _, s := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			next = n
			break
		}
	}
	f := filterOf(r)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "retry: 1000\nevent: hello\ndata: {\"head\":%d}\n\n", next)
	fl.Flush()
	t := time.NewTicker(streamTick)
	defer t.Stop()
	keepAlive := time.Now()
	var buf []Record
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.closed:
			return
		case <-t.C:
		}
		recs, n, lost := c.deps.Tail.Since(next, 0, buf[:0])
		buf, next = recs, n
		skipped := lost
		if len(recs) > streamBatch {
			skipped += uint64(len(recs) - streamBatch)
			recs = recs[len(recs)-streamBatch:]
		}
		sent := false
		for i := range recs {
			rec := &recs[i]
			if !f.keep(rec) {
				continue
			}
			b, err := json.Marshal(rec)
			if err != nil {
				continue
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: decision\ndata: %s\n\n", rec.Seq, b); err != nil {
				return
			}
			sent = true
		}
		if skipped > 0 {
			_, _ = fmt.Fprintf(w, "event: skipped\ndata: {\"skipped\":%d,\"next\":%d}\n\n", skipped, next)
			sent = true
		}
		if !sent && time.Since(keepAlive) > 15*time.Second {
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
			sent = true
		}
		if sent {
			keepAlive = time.Now()
			fl.Flush()
		}
	}
}
