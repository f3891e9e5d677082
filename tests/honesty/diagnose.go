package honesty

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/tests/peer"
)

// Diagnose writes, for one policy, where the live and simulated runs part, request by request:
// how late the live requests reached their engines, how often both sides chose the same
// engine, the decode and prefill timing of the live engines against the model, and two
// replays of the live routing through the engine model (engine.Sim, the simengine defaults):
// at the instants the live engines got each request (does the live engine run the model?) and
// at the trace's arrivals (what the transport's spreading changes).
func Diagnose(w io.Writer, policy string, live, sim Outcome) {
	fmt.Fprintf(w, "### %s: request by request\n\n", policy)
	var transit, sendLag, back, overhead []time.Duration
	same, both := 0, 0
	var decodeSlip []time.Duration
	for i, l := range live.Runs {
		if l.Engine == "" {
			continue
		}
		transit = append(transit, l.Submitted-l.Arrival)
		sendLag = append(sendLag, l.Sent-l.Arrival)
		if l.TTFT > 0 {
			// The client's TTFT counts from Sent: what is not the engine's own is the transport.
			back = append(back, l.TTFT-(l.Submitted-l.Sent)-l.EngineTTFT)
			overhead = append(overhead, l.TTFT-l.EngineTTFT)
		}
		if l.MaxTokens > 1 {
			model := time.Duration(l.MaxTokens-1) * engine.DefaultDecodeMsPerToken * time.Millisecond
			decodeSlip = append(decodeSlip, l.Decode-model)
		}
		if i < len(sim.Runs) && sim.Runs[i].Engine != "" {
			both++
			if sim.Runs[i].Engine == l.Engine {
				same++
			}
		}
	}
	fmt.Fprintf(w, "- client send lag (sent − scheduled): %s\n", dist(sendLag))
	fmt.Fprintf(w, "- reached the engine model − scheduled arrival (client, gateway, decider, forward): %s\n", dist(transit))
	fmt.Fprintf(w, "- engine's first token → client's first chunk: %s\n", dist(back))
	fmt.Fprintf(w, "- client TTFT − engine-side TTFT (the whole transport): %s\n", dist(overhead))
	fmt.Fprintf(w, "- same engine chosen live and simulated: %d of %d\n", same, both)
	fmt.Fprintf(w, "- live decode time − model (MaxTokens−1 × %g ms): %s\n", float64(engine.DefaultDecodeMsPerToken), dist(decodeSlip))

	atSubmit := replayLive(live.Runs, func(r Run) time.Duration { return r.Submitted })
	atArrival := replayLive(live.Runs, func(r Run) time.Duration { return r.Arrival })
	var dTTFT, dCached []time.Duration
	var liveEng, subEng, arrEng, simEng []time.Duration
	var liveHit, subHit, arrHit, simHit, blocks int
	for i, l := range live.Runs {
		if l.Engine == "" {
			continue
		}
		a, b := atSubmit[i], atArrival[i]
		dTTFT = append(dTTFT, a.EngineTTFT-l.EngineTTFT)
		dCached = append(dCached, time.Duration(a.Cached-l.Cached))
		liveEng, subEng, arrEng = append(liveEng, l.EngineTTFT), append(subEng, a.EngineTTFT), append(arrEng, b.EngineTTFT)
		liveHit += l.Cached / engine.DefaultBlockSize
		subHit += a.Cached / engine.DefaultBlockSize
		arrHit += b.Cached / engine.DefaultBlockSize
		blocks += l.Prompt / engine.DefaultBlockSize
	}
	var simBlocks int
	for _, s := range sim.Runs {
		if s.Engine != "" {
			simEng = append(simEng, s.EngineTTFT)
			simHit += s.Cached / engine.DefaultBlockSize
			simBlocks += s.Prompt / engine.DefaultBlockSize
		}
	}
	fmt.Fprintf(w, "- model replay of the live routing at the live engines' instants − live, per request: engine-side TTFT %s; cached tokens %s\n",
		dist(dTTFT), distN(dCached))
	fmt.Fprintf(w, "\n| engine-side TTFT | p50 ms | p90 ms | block hit rate |\n|---|---:|---:|---:|\n")
	row := func(name string, ds []time.Duration, hit, n int) {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.4f |\n", name, msq(ds, 0.5), msq(ds, 0.9), ratio(hit, n))
	}
	row("live engines", liveEng, liveHit, blocks)
	row("model, live routing, live instants", subEng, subHit, blocks)
	row("model, live routing, trace arrivals", arrEng, arrHit, blocks)
	row("sluice simulate (its own routing)", simEng, simHit, simBlocks)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| engine | live requests | simulated | live uncached tokens | simulated |\n|---|---:|---:|---:|---:|\n")
	type tally struct{ n, un, sn, sun int }
	per := map[string]*tally{}
	get := func(e string) *tally {
		if per[e] == nil {
			per[e] = &tally{}
		}
		return per[e]
	}
	for _, l := range live.Runs {
		if l.Engine != "" {
			t := get(l.Engine)
			t.n++
			t.un += l.Prompt - l.Cached
		}
	}
	for _, s := range sim.Runs {
		if s.Engine != "" {
			t := get(s.Engine)
			t.sn++
			t.sun += s.Prompt - s.Cached
		}
	}
	names := make([]string, 0, len(per))
	for e := range per {
		names = append(names, e)
	}
	sort.Strings(names)
	for _, e := range names {
		t := per[e]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", e, t.n, t.sn, t.un, t.sun)
	}
	fmt.Fprintln(w)
}

// replayLive runs the live routing through one engine.Sim per engine, each request submitted
// at at(r), and returns each request's outcome (Engine "" for those not served live).
func replayLive(runs []Run, at func(Run) time.Duration) []Run {
	out := make([]Run, len(runs))
	byEngine := map[string][]int{}
	for i, r := range runs {
		if r.Engine != "" && r.Tokens != nil {
			byEngine[r.Engine] = append(byEngine[r.Engine], i)
		}
	}
	t0 := time.Unix(0, 0)
	for _, idx := range byEngine {
		slices.SortStableFunc(idx, func(a, b int) int { return int(at(runs[a]) - at(runs[b])) })
		sim, err := engine.NewSim(engine.Config{})
		if err != nil {
			panic(err) // the defaults are valid
		}
		subs := map[*engine.SimRun]int{}
		for _, i := range idx {
			now := t0.Add(at(runs[i]))
			sim.Step(now)
			sr, err := sim.Submit(now, engine.Request{TokenIDs: runs[i].Tokens, MaxTokens: runs[i].MaxTokens})
			if err != nil {
				continue
			}
			subs[sr] = i
		}
		sim.Step(t0.Add(24 * time.Hour))
		for sr, i := range subs {
			res := sr.Result()
			out[i] = Run{Engine: runs[i].Engine, Queue: res.QueueTime, Prefill: res.PrefillTime, EngineTTFT: res.QueueTime + res.PrefillTime,
				Prompt: res.PromptTokens, Cached: res.CachedTokens}
		}
	}
	return out
}

// msq is the q-quantile of ds in ms, nearest rank as the live figures (peer.Quantile) and
// simulate's percentiles take it.
func msq(ds []time.Duration, q float64) float64 {
	return float64(peer.Quantile(ds, q)) / float64(time.Millisecond)
}

// dist is p10 / p50 / p90 / p99 / max in ms.
func dist(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	return fmt.Sprintf("p10 %.1f, p50 %.1f, p90 %.1f, p99 %.1f, max %.1f ms (n %d)", msq(ds, 0.1), msq(ds, 0.5), msq(ds, 0.9), msq(ds, 0.99),
		msq(ds, 1), len(ds))
}

// distN is dist of plain numbers carried as Durations.
func distN(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	q := func(p float64) float64 { return msq(ds, p) * float64(time.Millisecond) }
	return fmt.Sprintf("p1 %.0f, p50 %.0f, p99 %.0f (n %d)", q(0.01), q(0.5), q(0.99), len(ds))
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
