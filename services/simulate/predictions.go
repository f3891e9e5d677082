package simulate

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
)

// prediction is what the decider predicted for a request's chosen engine (ttft_aware's
// estimate and its parts, from the explain output) and what the engine really had ahead of it
// when the request was submitted; the outcome joins it from the request's record.
type prediction struct {
	ok                       bool
	reason                   string
	parts                    policy.TTFTParts
	matched, uncached        int64
	loadAge                  time.Duration
	dispatchesSince          int64
	trueWaitingUncached      int64 // the engine's own pending prefill at submission
	trueWaiting, trueRunning int64
}

// recordPrediction keeps the chosen candidate of dec's explanation.
func recordPrediction(p *prediction, dec *decider.Decision) {
	if dec.Explain == nil {
		return
	}
	for _, a := range dec.Explain.Attempts {
		for _, st := range a.Stages {
			if st.PickedEngineID == "" {
				continue
			}
			for _, c := range st.Candidates {
				if c.EngineID != st.PickedEngineID {
					continue
				}
				p.ok, p.reason = true, st.Reason
				p.parts, p.matched, p.uncached = c.TTFT, c.MatchedTokens, c.UncachedTokens
				p.loadAge, p.dispatchesSince = c.LoadAge, c.DispatchesSinceReport
				return
			}
		}
	}
}

// writePredictions writes dir/predictions-POLICY.csv: one row per decided request.
func (f *fleet) writePredictions(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-predictions %s: %w", dir, err)
	}
	path := filepath.Join(dir, "predictions-"+strings.NewReplacer(":", "_", "/", "_").Replace(name)+".csv")
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-predictions: %w", err)
	}
	w := bufio.NewWriter(file)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }
	fmt.Fprintln(w, "index,arrival_ms,engine,reason,est_ms,queue_ms,slot_wait_ms,own_ms,queue_tokens,queue_from,rate,rate_default,batch_full,"+
		"matched,uncached,load_age_ms,dispatches_since,true_waiting_uncached,true_waiting,true_running,actual_cached,actual_queue_ms,actual_ttft_ms")
	for i := range f.records {
		r, p := &f.records[i], &f.preds[i]
		if !p.ok || !r.done {
			continue
		}
		fmt.Fprintf(w, "%d,%s,%d,%s,%s,%s,%s,%s,%d,%q,%.1f,%t,%t,%d,%d,%s,%d,%d,%d,%d,%d,%s,%s\n", i, ms(r.arrival), r.engine, p.reason,
			ms(p.parts.Estimate), ms(p.parts.Queue), ms(p.parts.SlotWait), ms(p.parts.OwnPrefill), p.parts.QueueTokens, p.parts.QueueFrom,
			p.parts.Rate, p.parts.RateDefault, p.parts.BatchFull, p.matched, p.uncached, ms(p.loadAge), p.dispatchesSince,
			p.trueWaitingUncached, p.trueWaiting, p.trueRunning, r.cached, ms(r.queue), ms(r.ttft))
	}
	if err := w.Flush(); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}
