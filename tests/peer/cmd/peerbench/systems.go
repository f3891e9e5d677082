package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/tests/peer"
)

// system is one router (and what it needs) started in front of fresh engines.
type system struct {
	url string
	// counted are the router's processes, whose CPU is the router's; extra are pids reported
	// apart (the Kafka broker).
	counted []*proc
	extra   []int
	procs   []*proc
	engines []engine
	// metricsURLs are scraped after a run into its directory, to check what the router saw.
	metricsURLs map[string]string
	promptIDs   bool
	after       []func() // run once every process is stopped
}

type engine struct {
	id, url, kv, replay string
}

// stop stops every process, last started first.
func (sys *system) stop() {
	for i := len(sys.procs) - 1; i >= 0; i-- {
		sys.procs[i].stop()
	}
	for _, f := range sys.after {
		f()
	}
}

// runOne starts fresh engines and one router, replays the trace through it and stops them.
func runOne(ctx context.Context, f flags, c config, reqs []trace.Request, dir string) (peer.Round, error) {
	sys, err := startSystem(ctx, f, c, dir, f.speed/f.load)
	defer sys.stop()
	if err != nil {
		return peer.Round{}, err
	}
	routerURL, counted, extra, metricsURLs, engines, promptIDs := sys.url, sys.counted, sys.extra, sys.metricsURLs, sys.engines, sys.promptIDs
	pids := make([]int, len(counted))
	each0 := make([]time.Duration, len(counted))
	for i, p := range counted {
		pids[i] = p.pid()
		each0[i], _ = peer.ProcCPU(p.pid())
	}
	cpu0, err := peer.ProcCPU(pids...)
	if err != nil {
		return peer.Round{}, err
	}
	ex0, _ := peer.ProcCPU(extra...)
	fig0, ttftErr := scrapeEngines(ctx, engines)
	logf("  %s ready at %s; replaying %d requests", c.system, routerURL, len(reqs))
	t0 := time.Now()
	next := 0.1
	results := peer.Replay(ctx, peer.Options{URL: routerURL, Model: model, MaxTokensCap: f.maxTokens, Timeout: f.timeout, PromptIDs: promptIDs}, reqs, func(done int) {
		if frac := float64(done) / float64(len(reqs)); frac >= next {
			next += 0.25
			logf("  %d/%d done after %v", done, len(reqs), time.Since(t0).Round(time.Second))
		}
	})
	cpu1, err := peer.ProcCPU(pids...)
	if err != nil {
		return peer.Round{}, err
	}
	ex1, _ := peer.ProcCPU(extra...)
	fig1, err := scrapeEngines(ctx, engines)
	ttft1, n1 := fig1.ttft, fig1.count
	if ttftErr == nil && err == nil && n1 > fig0.count {
		ttft1, n1 = ttft1-fig0.ttft, n1-fig0.count
		logf("  %s", insertShares(engines, fig0.uncached, fig1.uncached))
	} else {
		ttft1, n1 = 0, 0
		why := errors.Join(ttftErr, err)
		if why == nil {
			why = errors.New("the engines' histograms counted no request")
		}
		logf("  no engine TTFT figures: %v", why)
	}
	var each []string
	for i, p := range counted {
		c, _ := peer.ProcCPU(p.pid())
		each = append(each, fmt.Sprintf("%s %.2f", p.name, float64(c-each0[i])/float64(time.Millisecond)/float64(len(reqs))))
	}
	if len(extra) > 0 {
		each = append(each, fmt.Sprintf("(kafka broker %.2f, not counted)", float64(ex1-ex0)/float64(time.Millisecond)/float64(len(reqs))))
	}
	logf("  CPU ms/req by process: %s", strings.Join(each, ", "))
	for _, e := range engines {
		metricsURLs["engine-"+e.id] = e.url + "/metrics"
	}
	for name, u := range metricsURLs {
		saveURL(u, filepath.Join(dir, name+".metrics.txt"))
	}
	for _, p := range counted {
		if !p.running() {
			return peer.Round{}, fmt.Errorf("%s exited during the replay (log %s)", p.name, p.log)
		}
	}
	return peer.Round{System: c.system, Policy: c.policy, Results: results, CPU: cpu1 - cpu0, Extra: ex1 - ex0,
		EngineTTFT: ttft1, EngineTTFTCount: n1}, nil
}

// engineFigures is what scrapeEngines reads from the engines' /metrics.
type engineFigures struct {
	// ttft and count sum the engines' own time-to-first-token histograms (SGLang's and vLLM's
	// <prefix>:time_to_first_token_seconds, which the simulated engines export under the same
	// names): total time and count so far, over every engine and series.
	ttft  time.Duration
	count int
	// uncached is each engine's sluice_simengine_prefill_uncached_tokens_total (summed over
	// its ranks), in engines' order: the tokens it prefilled and wrote into its cache.
	uncached []float64
}

// scrapeEngines reads every engine's /metrics once; an engine without a TTFT histogram is an
// error (the replay's engine-side figures would be wrong).
func scrapeEngines(ctx context.Context, engines []engine) (engineFigures, error) {
	var sum float64
	var count uint64
	fig := engineFigures{uncached: make([]float64, len(engines))}
	for i, e := range engines {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/metrics", nil)
		if err != nil {
			return fig, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fig, err
		}
		parser := expfmt.NewTextParser(promodel.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fig, fmt.Errorf("engine %s /metrics: %w", e.id, err)
		}
		found := false
		for name, f := range fams {
			switch {
			case name == "sluice_simengine_prefill_uncached_tokens_total":
				for _, m := range f.Metric {
					fig.uncached[i] += m.GetCounter().GetValue()
				}
			case strings.HasSuffix(name, ":time_to_first_token_seconds"):
				for _, m := range f.Metric {
					if h := m.GetHistogram(); h != nil {
						found = true
						sum += h.GetSampleSum()
						count += h.GetSampleCount()
					}
				}
			}
		}
		if !found {
			return fig, fmt.Errorf("engine %s exports no time_to_first_token_seconds histogram", e.id)
		}
	}
	fig.ttft, fig.count = time.Duration(sum*float64(time.Second)), int(count)
	return fig, nil
}

// insertShares describes how a replay spread the tokens the engines prefilled (and so wrote into
// their caches): each engine's share, and the largest share over the mean. The engines' caches
// are equal, so an uneven spread turns one cache over faster than the others.
func insertShares(engines []engine, before, after []float64) string {
	var total, most float64
	d := make([]float64, len(engines))
	for i := range engines {
		d[i] = after[i] - before[i]
		total += d[i]
		most = max(most, d[i])
	}
	if total <= 0 {
		return "engines prefilled no uncached token"
	}
	parts := make([]string, len(engines))
	for i, e := range engines {
		parts[i] = fmt.Sprintf("%s %.1f%%", e.id, 100*d[i]/total)
	}
	return fmt.Sprintf("uncached tokens prefilled: %s (largest ÷ mean %.2f)", strings.Join(parts, ", "), most*float64(len(engines))/total)
}

// startSystem starts f.engines fresh simulated engines at engineSpeed and c's router in front
// of them, and waits until a completion passes and the engines are empty again. The caller
// stops the system, also after an error.
func startSystem(ctx context.Context, f flags, c config, dir string, engineSpeed float64) (*system, error) {
	sys := &system{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sys, err
	}
	start := func(name string, bin string, args ...string) (*proc, error) {
		p, err := startProc(filepath.Join(dir, name+".log"), bin, args...)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		sys.procs = append(sys.procs, p)
		return p, nil
	}
	ports, err := freePorts(3*f.engines + 6)
	if err != nil {
		return sys, err
	}
	kvInterval := f.kvInterval // trace replays scale it; the closed loop keeps the engines' default
	if kvInterval <= 0 {
		kvInterval = defaultKVInterval
	}
	engines := make([]engine, f.engines)
	for i := range engines {
		hp, kp, rp := ports[3*i], ports[3*i+1], ports[3*i+2]
		e := engine{id: fmt.Sprintf("e%d", i), url: fmt.Sprintf("http://127.0.0.1:%d", hp),
			kv: fmt.Sprintf("tcp://127.0.0.1:%d", kp), replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp)}
		engines[i] = e
		if _, err := start("engine-"+e.id, f.sluiceBin, "simengine", "-addr", fmt.Sprintf("127.0.0.1:%d", hp), "-id", e.id, "-model", model,
			"-metrics-naming", "sglang", "-kv-events-endpoint", fmt.Sprintf("tcp://*:%d", kp), "-kv-replay-endpoint", fmt.Sprintf("tcp://*:%d", rp),
			"-speed", ftoa(engineSpeed), "-cache-blocks", strconv.Itoa(f.cacheBlocks), "-max-running", strconv.Itoa(f.maxRunning),
			"-prefill-tokens-per-sec", ftoa(f.prefillTokPerSec), "-decode-ms-per-token", ftoa(f.decodeMs),
			"-kv-interval", kvInterval.String(), "-log-level", "warn"); err != nil {
			return sys, err
		}
	}
	for _, e := range engines {
		if err := waitHTTP(ctx, e.url+"/health", sys.procs, 30*time.Second); err != nil {
			return sys, fmt.Errorf("engine %s: %w", e.id, err)
		}
	}
	p := ports[3*f.engines:]
	var routerURL string
	var counted []*proc
	var extra []int
	var metricsURLs map[string]string
	promptIDs := false
	switch c.system {
	case "sglang-router":
		routerURL = fmt.Sprintf("http://127.0.0.1:%d", p[0])
		args := []string{"-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", strconv.Itoa(p[0]),
			"--policy", c.policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", strconv.Itoa(p[1]), "--log-level", "warn", "--worker-urls"}
		for _, e := range engines {
			args = append(args, e.url)
		}
		r, err := start("sglang-router", f.routerPython, args...)
		if err != nil {
			return sys, err
		}
		counted = []*proc{r}
		metricsURLs = map[string]string{"sglang-router": fmt.Sprintf("http://127.0.0.1:%d/metrics", p[1])}
	case "sluice", "sluice-base":
		bin := f.sluiceBin
		if c.system == "sluice-base" {
			bin = f.closed.baseline
		}
		policy, embedded := strings.CutSuffix(c.policy, "+embedded")
		policy, promptIDs = strings.CutSuffix(policy, "+ids")
		tag := fmt.Sprintf("peer-%d-%s", time.Now().UnixNano(), policy)
		loadTopic, kvTopic := tag+"-load", tag+"-kv"
		if err := createTopics(ctx, f.brokers, loadTopic, kvTopic); err != nil {
			return sys, err
		}
		sys.after = append(sys.after, func() { deleteTopics(f.brokers, loadTopic, kvTopic) })
		var cfg strings.Builder
		cfg.WriteString("workers:\n")
		for _, e := range engines {
			fmt.Fprintf(&cfg, "  - {id: %s, url: %q, models: [%s], role: plain}\n", e.id, e.url, model)
		}
		spec := "type: " + policy
		if policy == "cache_aware" && f.cacheAwareSettings != "" {
			spec += ", " + f.cacheAwareSettings
		}
		fmt.Fprintf(&cfg, "buckets:\n  - id: all\n    models: [%s]\n    groups:\n      plain:\n        policy: {%s}\n", model, spec)
		cfgPath := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
			return sys, err
		}
		grpcAddr, httpAddr, gwAddr, linkAddr := fmt.Sprintf("127.0.0.1:%d", p[0]), fmt.Sprintf("127.0.0.1:%d", p[1]),
			fmt.Sprintf("127.0.0.1:%d", p[2]), fmt.Sprintf("127.0.0.1:%d", p[3])
		linkArgs := []string{"enginelink", "-kafka-brokers", f.brokers, "-load-topic", loadTopic, "-kv-topic", kvTopic,
			"-http-addr", linkAddr, "-log-level", "warn"}
		if f.scrapeInterval > 0 {
			linkArgs = append(linkArgs, "-scrape-interval", f.scrapeInterval.String())
		}
		for _, e := range engines {
			linkArgs = append(linkArgs, "-engine", fmt.Sprintf("id=%s,model=%s,engine=sglang,kv=%s,replay=%s,loads=%s/v1/loads,metrics=%s/metrics",
				e.id, model, e.kv, e.replay, e.url, e.url))
		}
		link, err := start("enginelink", bin, append(linkArgs, strings.Fields(f.linkArgs)...)...)
		if err != nil {
			return sys, err
		}
		deciderArgs := append([]string{"-grpc-addr", grpcAddr, "-http-addr", httpAddr, "-config", cfgPath,
			"-config-snapshot", "-", "-kafka-brokers", f.brokers, "-load-topic", loadTopic, "-kv-topic", kvTopic},
			strings.Fields(f.deciderArgs)...)
		tok := f.sluiceTokenizer
		if tok == "auto" {
			tok = "estimate"
			if policy == "cache_aware" {
				tok = "engine"
			}
		}
		gwArgs := append([]string{"gateway", "-addr", gwAddr, "-decider-addr", grpcAddr, "-tokenizer", tok,
			"-log-level", "warn"}, strings.Fields(f.gatewayArgs)...)
		var gw, dec *proc
		if embedded {
			// One process: the gateway runs the decider (-embed-decider, its flags prefixed).
			// No value here starts with "-".
			for i, a := range deciderArgs {
				if strings.HasPrefix(a, "-") {
					deciderArgs[i] = "-decider." + a[1:]
				}
			}
			gwArgs = append(append(gwArgs, "-embed-decider"), deciderArgs...)
			if gw, err = start("gateway", bin, gwArgs...); err != nil {
				return sys, err
			}
			if err := waitHTTP(ctx, "http://"+httpAddr+"/readyz", sys.procs, 60*time.Second); err != nil {
				return sys, fmt.Errorf("embedded decider: %w", err)
			}
		} else {
			if dec, err = start("decider", bin, append([]string{"decider", "-log-level", "warn"}, deciderArgs...)...); err != nil {
				return sys, err
			}
			if err := waitHTTP(ctx, "http://"+httpAddr+"/readyz", sys.procs, 60*time.Second); err != nil {
				return sys, fmt.Errorf("decider: %w", err)
			}
			if gw, err = start("gateway", bin, gwArgs...); err != nil {
				return sys, err
			}
		}
		routerURL = "http://" + gwAddr
		counted = []*proc{gw, link}
		if dec != nil {
			counted = append(counted, dec)
		}
		metricsURLs = map[string]string{"decider": "http://" + httpAddr + "/metrics", "enginelink": "http://" + linkAddr + "/metrics",
			"gateway": "http://" + gwAddr + "/metrics"}
		if f.kafkaPID > 0 {
			extra = []int{f.kafkaPID}
		}
	default:
		return sys, fmt.Errorf("unknown system %q", c.system)
	}
	if err := waitCompletion(ctx, routerURL, sys.procs, 90*time.Second); err != nil {
		return sys, fmt.Errorf("%s not serving: %w", c.system, err)
	}
	// The readiness requests left blocks behind: start every engine empty. sluice's decider
	// hears the clear through KV events; give it and a load report a moment.
	for _, e := range engines {
		if err := post(ctx, e.url+"/admin/reset-cache"); err != nil {
			return sys, fmt.Errorf("reset %s: %w", e.id, err)
		}
	}
	time.Sleep(1500 * time.Millisecond)

	sys.url, sys.counted, sys.extra, sys.metricsURLs, sys.engines, sys.promptIDs = routerURL, counted, extra, metricsURLs, engines, promptIDs
	return sys, nil
}

const model = "sim"

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// proc is one child in its own process group, its output in a log file.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startProc(logPath, bin string, args ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") { // only flags configure the children
			env = append(env, kv)
		}
	}
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &proc{name: strings.TrimSuffix(filepath.Base(logPath), ".log"), log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process group, SIGKILL after 10 s.
func (p *proc) stop() {
	if p.running() {
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

var quick = &http.Client{Timeout: 5 * time.Second}

func exited(procs []*proc) error {
	for _, p := range procs {
		if !p.running() {
			return fmt.Errorf("%s exited (log %s)", p.name, p.log)
		}
	}
	return nil
}

func waitHTTP(ctx context.Context, url string, procs []*proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if err := exited(procs); err != nil {
			return err
		}
		resp, err := quick.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("GET %s not 200 within %v: %s", url, timeout, last)
}

// waitCompletion sends a short streaming completion until one succeeds.
func waitCompletion(ctx context.Context, url string, procs []*proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	r := trace.Request{Index: -1, InputTokens: 8, OutputTokens: 1}
	var last error
	for time.Now().Before(deadline) {
		if err := exited(procs); err != nil {
			return err
		}
		res := peer.Replay(ctx, peer.Options{URL: url, Model: model, Timeout: 5 * time.Second, Client: quick}, []trace.Request{r}, nil)
		if last = res[0].Err; last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return fmt.Errorf("no completion within %v: %w", timeout, last)
}

// saveURL writes the body of GET url to path (or why it could not).
func saveURL(url, path string) {
	var body []byte
	resp, err := quick.Get(url)
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		body = []byte(err.Error())
	}
	_ = os.WriteFile(path, body, 0o644)
}

func post(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := quick.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

func createTopics(ctx context.Context, brokers string, topics ...string) error {
	c := &kafka.Client{Addr: kafka.TCP(split(brokers)...), Timeout: 30 * time.Second}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: 4, ReplicationFactor: 1})
	}
	resp, err := c.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for t, err := range resp.Errors {
		if err != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	// Every partition has a leader before the decider's readers start.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err == nil {
			ready := 0
			for _, mt := range md.Topics {
				ok := mt.Error == nil && len(mt.Partitions) == 4
				for _, p := range mt.Partitions {
					ok = ok && p.Error == nil && p.Leader.ID >= 0
				}
				if ok {
					ready++
				}
			}
			if ready == len(topics) {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("topics %v have no leaders after 30s", topics)
}

func deleteTopics(brokers string, topics ...string) {
	c := &kafka.Client{Addr: kafka.TCP(split(brokers)...), Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
}
