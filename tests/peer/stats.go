package peer

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
)

// Round is one replay of the trace through one system × policy.
type Round struct {
	System, Policy string
	Results        []Result
	// CPU is the router processes' CPU time (user + system) during the replay.
	CPU time.Duration
	// Extra is CPU time of processes the router needs but that are not counted in CPU (the
	// Kafka broker for sluice), for the notes.
	Extra time.Duration
	// EngineTTFT and EngineTTFTCount are the sum and count of the engines' own
	// time_to_first_token_seconds histograms over the replay (arrival at the engine to its
	// first token); zero when the engines export none.
	EngineTTFT      time.Duration
	EngineTTFTCount int
}

// Summary is one round's numbers.
type Summary struct {
	Requests, Errors int
	// HitRate is cached ÷ prompt tokens over the successful requests, as the engines reported.
	HitRate                float64
	TTFT50, TTFT90, TTFT99 time.Duration
	E2E50, E2E99           time.Duration
	// ReqPerSec is successful requests ÷ the time from the first send to the last end.
	ReqPerSec float64
	// CPUPerReq is the router's CPU time per request, in milliseconds.
	CPUPerReq float64
	// TTFTMean is the clients' mean TTFT over the successful requests; EngineTTFTMean the
	// engines' own mean (0 without their histograms). The difference is what the router and
	// the hops around it add on average: routing quality shows in EngineTTFTMean, transport
	// in the rest.
	TTFTMean, EngineTTFTMean time.Duration
	// FirstErr is one failure, to show.
	FirstErr string
}

// Summarize computes a round's summary.
func Summarize(r Round) Summary {
	var s Summary
	var ttft, e2e []time.Duration
	var prompt, cached int
	var first, last time.Duration = math.MaxInt64, 0
	for _, x := range r.Results {
		s.Requests++
		if x.Err != nil {
			s.Errors++
			if s.FirstErr == "" {
				s.FirstErr = x.Err.Error()
			}
			continue
		}
		prompt += x.PromptTokens
		cached += x.CachedTokens
		ttft = append(ttft, x.TTFT)
		e2e = append(e2e, x.E2E)
		first = min(first, x.Sent)
		last = max(last, x.Sent+x.E2E)
	}
	if prompt > 0 {
		s.HitRate = float64(cached) / float64(prompt)
	}
	if len(ttft) > 0 {
		var sum time.Duration
		for _, d := range ttft {
			sum += d
		}
		s.TTFTMean = sum / time.Duration(len(ttft))
	}
	if r.EngineTTFTCount > 0 {
		s.EngineTTFTMean = r.EngineTTFT / time.Duration(r.EngineTTFTCount)
	}
	s.TTFT50, s.TTFT90, s.TTFT99 = Quantile(ttft, 0.5), Quantile(ttft, 0.9), Quantile(ttft, 0.99)
	s.E2E50, s.E2E99 = Quantile(e2e, 0.5), Quantile(e2e, 0.99)
	if ok := len(e2e); ok > 0 && last > first {
		s.ReqPerSec = float64(ok) / (last - first).Seconds()
	}
	if s.Requests > 0 {
		s.CPUPerReq = float64(r.CPU) / float64(time.Millisecond) / float64(s.Requests)
	}
	return s
}

// Quantile is the q-quantile of ds (nearest rank); 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// spread is the median of vs and their min and max.
type spread struct{ med, lo, hi float64 }

func spreadOf(vs []float64) spread {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return spread{}
	}
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med, s[0], s[n-1]}
}

// cell formats a median with its range over rounds (just the median for one round).
func (s spread) cell(prec int, n int) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	if n < 2 {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// configKey is one system × policy.
type configKey struct{ sys, pol string }

// byConfig groups the rounds' summaries by system × policy, in the order each first appears.
func byConfig(rounds []Round) ([]configKey, map[configKey][]Summary) {
	var order []configKey
	by := map[configKey][]Summary{}
	for _, r := range rounds {
		k := configKey{r.System, r.Policy}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], Summarize(r))
	}
	return order, by
}

// Table writes the markdown table: one row per system × policy in the order they first
// appear in rounds, each cell the median over that row's rounds with the min–max range.
func Table(w io.Writer, rounds []Round) error {
	order, by := byConfig(rounds)
	var b strings.Builder
	b.WriteString("| system | policy | rounds | requests | errors | prefix hit rate % | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | e2e p50 ms | e2e p99 ms | req/s | router CPU ms/req | TTFT mean ms | engine TTFT mean ms | client − engine mean ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range order {
		ss := by[k]
		col := func(f func(Summary) float64) spread {
			vs := make([]float64, len(ss))
			for i, s := range ss {
				vs[i] = f(s)
			}
			return spreadOf(vs)
		}
		ms := func(f func(Summary) time.Duration) spread {
			return col(func(s Summary) float64 { return float64(f(s)) / float64(time.Millisecond) })
		}
		n := len(ss)
		engine, transport := "–", "–"
		if !slices.ContainsFunc(ss, func(s Summary) bool { return s.EngineTTFTMean == 0 }) {
			engine = ms(func(s Summary) time.Duration { return s.EngineTTFTMean }).cell(1, n)
			transport = ms(func(s Summary) time.Duration { return s.TTFTMean - s.EngineTTFTMean }).cell(1, n)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k.sys, k.pol, n,
			col(func(s Summary) float64 { return float64(s.Requests) }).cell(0, 1),
			col(func(s Summary) float64 { return float64(s.Errors) }).cell(0, n),
			col(func(s Summary) float64 { return 100 * s.HitRate }).cell(1, n),
			ms(func(s Summary) time.Duration { return s.TTFT50 }).cell(0, n),
			ms(func(s Summary) time.Duration { return s.TTFT90 }).cell(0, n),
			ms(func(s Summary) time.Duration { return s.TTFT99 }).cell(0, n),
			ms(func(s Summary) time.Duration { return s.E2E50 }).cell(0, n),
			ms(func(s Summary) time.Duration { return s.E2E99 }).cell(0, n),
			col(func(s Summary) float64 { return s.ReqPerSec }).cell(2, n),
			col(func(s Summary) float64 { return s.CPUPerReq }).cell(2, n),
			ms(func(s Summary) time.Duration { return s.TTFTMean }).cell(1, n), engine, transport)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ProcCPU returns the CPU time (utime + stime, and the children's it waited for) of pid and
// every live descendant of it, read from /proc. Processes that are gone count nothing.
func ProcCPU(pids ...int) (time.Duration, error) {
	children := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var total time.Duration
	seen := map[int]bool{}
	queue := slices.Clone(pids)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if st, err := readStat(pid); err == nil {
			total += st.cpu
		}
		queue = append(queue, children[pid]...)
	}
	return total, nil
}

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux ABI Go runs on.
const clkTck = 100

type procStat struct {
	ppid int
	cpu  time.Duration
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// parseStat reads ppid and utime+stime+cutime+cstime from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
// fields are counted from its last ')'.
func parseStat(line string) (procStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("stat %.60q: no command name", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("stat %.60q: %d fields after the name, want at least 15", line, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("stat ppid %q: %w", f[1], err)
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("stat time %q: %w", s, err)
		}
		ticks += v
	}
	return procStat{ppid: ppid, cpu: time.Duration(ticks) * time.Second / clkTck}, nil
}

// IdealHitRate is the prefix hit rate of an infinite cache shared by every engine: the share of
// prompt tokens in blocks whose id an earlier request of reqs already had. Requests without
// block ids (Azure) share nothing.
func IdealHitRate(reqs []trace.Request) float64 {
	seen := map[int64]bool{}
	var hit, total int
	for _, r := range reqs {
		for i, id := range r.BlockIDs {
			n := min(trace.BlockTokens, r.InputTokens-i*trace.BlockTokens)
			if seen[id] {
				hit += n
			}
			seen[id] = true
		}
		total += r.InputTokens
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// PairedTable writes, for every system × policy but the reference (the first of refSystem's in
// rounds), how it compared with the reference within each round: the k-th replay of every
// configuration is round k, run minutes apart from the others' k-th under the same machine
// load, so a ratio or difference taken inside a round cancels what the round shared. Hit rates
// move by chance from round to round as much as between systems (timing decides which blocks
// are still cached), so their difference is given as a mean with its 95 % confidence interval
// (Student's t over the rounds), the figure that says whether two systems' hit rates differ at
// all. Nothing is written without the reference or with fewer than two rounds.
func PairedTable(w io.Writer, rounds []Round, refSystem string) error {
	order, by := byConfig(rounds)
	ri := slices.IndexFunc(order, func(k configKey) bool { return k.sys == refSystem })
	if ri < 0 {
		return nil
	}
	ref := by[order[ri]]
	var b strings.Builder
	fmt.Fprintf(&b, "Within each round, against %s %s: median (min–max) over the rounds; the hit-rate difference in points as mean ± 95 %% confidence half-width, then median (min–max).\n\n", order[ri].sys, order[ri].pol)
	b.WriteString("| system | policy | rounds | TTFT p90 ÷ ref | TTFT p50 ÷ ref | hit − ref, points: mean ± 95 % CI | hit − ref, median (min–max) | rounds with hit ≥ ref |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	wrote := false
	for _, k := range order {
		if k == order[ri] {
			continue
		}
		ss := by[k]
		n := min(len(ss), len(ref))
		if n < 2 {
			continue
		}
		p90, p50, dhit := make([]float64, n), make([]float64, n), make([]float64, n)
		atLeast := 0
		for i := range n {
			p90[i] = float64(ss[i].TTFT90) / float64(max(ref[i].TTFT90, 1))
			p50[i] = float64(ss[i].TTFT50) / float64(max(ref[i].TTFT50, 1))
			dhit[i] = 100 * (ss[i].HitRate - ref[i].HitRate)
			if dhit[i] >= 0 {
				atLeast++
			}
		}
		mean, half := meanCI95(dhit)
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %+.2f ± %.2f | %s | %d of %d |\n", k.sys, k.pol, n,
			spreadOf(p90).cell(2, n), spreadOf(p50).cell(2, n), mean, half, signedCell(spreadOf(dhit), 2), atLeast, n)
		wrote = true
	}
	if !wrote {
		return nil
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// signedCell is spread.cell with signs, for differences.
func signedCell(s spread, prec int) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	sg := func(v float64) string {
		if v >= 0 {
			return "+" + f(v)
		}
		return f(v)
	}
	return fmt.Sprintf("%s (%s … %s)", sg(s.med), sg(s.lo), sg(s.hi))
}

// meanCI95 is the mean of vs and the half-width of its 95 % confidence interval by Student's
// t with len(vs)−1 degrees of freedom (len(vs) ≥ 2).
func meanCI95(vs []float64) (mean, half float64) {
	n := float64(len(vs))
	for _, v := range vs {
		mean += v
	}
	mean /= n
	var ss float64
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	return mean, tQuantile975(len(vs)-1) * math.Sqrt(ss/(n-1)/n)
}

// tQuantile975 is the 0.975 quantile of Student's t with df degrees of freedom: a table up to
// 30 (a benchmark runs a handful of rounds), then the normal's 1.96 plus the first term of its
// expansion in 1/df (within 0.2 % beyond 30). A table, not a statistics dependency, for one
// number per row.
func tQuantile975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.Inf(1)
	}
	if df <= len(table) {
		return table[df-1]
	}
	return 1.96 + 2.4/float64(df)
}
