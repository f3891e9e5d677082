package simengine

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/google/go-cmp/cmp"
)

// TestDataParallelRanks runs a two-rank sim: each rank has its own engine and PUB socket, a
// request pinned to a rank (SGLang's body field or vLLM's header) lands there, its events come
// out of that rank's socket with the rank in the batch and its own seq from 0.
func TestDataParallelRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := zmqConfig(KVEventsVLLM)
	cfg.MetricsNaming = NamingVLLM
	cfg.DPSize = 2
	cfg.KVEventsEndpoint = "tcp://*:0"
	s, base := start(t, cfg)
	subs := make([]zmq4.Socket, 2)
	for rank := range subs {
		ep, _, err := s.KVEventsEndpoints(ctx, rank)
		if err != nil {
			t.Fatal(err)
		}
		sub := zmq4.NewSub(ctx)
		defer sub.Close()
		if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			t.Fatal(err)
		}
		if err := sub.Dial(ep); err != nil {
			t.Fatal(err)
		}
		waitSubscribed(ctx, t, s, rank)
		subs[rank] = sub
	}

	eps, err := s.Endpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Endpoints{ID: "sim-test", Model: "m", Engine: NamingVLLM, KVFormat: KVEventsVLLM, BaseURL: base,
		MetricsURL: base + "/metrics", DPSize: 2, KV: eps.KV, Binds: true}
	if diff := cmp.Diff(want, eps); diff != "" || len(eps.KV) != 2 || eps.KV[0] == eps.KV[1] {
		t.Errorf("Endpoints mismatch (-want +got):\n%s", diff)
	}

	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 1, "data_parallel_rank": 1})
	b, _ := json.Marshal(map[string]any{"prompt": []int{5, 6, 7, 8}, "max_tokens": 1})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-data-parallel-rank", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	for rank, want := range [][]uint32{{5, 6, 7, 8}, {1, 2, 3, 4}} {
		msgs := receiveEvents(t, subs[rank], 1)
		m := msgs[0]
		if m.seq != 0 || m.batch.DPRank != int32(rank) || !m.batch.HasRank {
			t.Errorf("rank %d: first batch seq %d dp_rank %d, want seq 0 dp_rank %d", rank, m.seq, m.batch.DPRank, rank)
		}
		if st := m.batch.Events[0].Stored; st == nil || !slices.Equal(st.TokenIDs, want) {
			t.Errorf("rank %d: first event %+v, want the blocks of %v", rank, m.batch.Events[0], want)
		}
	}

	if resp, _ := post(t, base+"/v1/completions", map[string]any{"prompt": "x", "data_parallel_rank": 2}); resp.StatusCode != 400 {
		t.Errorf("data_parallel_rank 2 of 2: status %d, want 400", resp.StatusCode)
	}
	before := []int64{s.Engines()[0].Load().PromptTokensTotal, s.Engines()[1].Load().PromptTokensTotal}
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{9}, "max_tokens": 1})
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{9}, "max_tokens": 1})
	for rank, e := range s.Engines() {
		if got := e.Load().PromptTokensTotal - before[rank]; got != 1 {
			t.Errorf("rank %d looked up %d prompt tokens of two unpinned requests, want 1 (round robin)", rank, got)
		}
	}

	fams := scrape(t, base)
	var engines []string
	for _, m := range fams["vllm:num_requests_running"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "engine" {
				engines = append(engines, l.GetValue())
			}
		}
	}
	slices.Sort(engines)
	if diff := cmp.Diff([]string{"0", "1"}, engines); diff != "" {
		t.Errorf("vllm:num_requests_running engine labels mismatch (-want +got):\n%s", diff)
	}
}

// TestDataParallelSGLangLoads checks the per-rank /v1/loads entries and SGLang's dp_rank label.
func TestDataParallelSGLangLoads(t *testing.T) {
	cfg := testConfig()
	cfg.DPSize = 3
	_, base := start(t, cfg)
	m := getObject(t, base+"/v1/loads")
	loads, _ := m["loads"].([]any)
	var ranks []float64
	for _, l := range loads {
		ranks = append(ranks, l.(map[string]any)["dp_rank"].(float64))
	}
	if diff := cmp.Diff([]float64{0, 1, 2}, ranks); diff != "" || m["num_accelerators"] != 3.0 {
		t.Errorf("/v1/loads ranks mismatch (-want +got):\n%s (num_accelerators %v)", diff, m["num_accelerators"])
	}
	if info := getObject(t, base+"/server_info"); info["dp_size"] != 3.0 || len(info["internal_states"].([]any)) != 3 {
		t.Errorf("/server_info dp_size %v, %d internal states; want 3, 3", info["dp_size"], len(info["internal_states"].([]any)))
	}
	var got []string
	for _, s := range scrape(t, base)["sglang:num_running_reqs"].Metric {
		labels := map[string]string{}
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if diff := cmp.Diff(map[string]string{"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
			"dp_rank": labels["dp_rank"]}, labels); diff != "" {
			t.Errorf("sglang:num_running_reqs labels mismatch (-want +got):\n%s", diff)
		}
		got = append(got, labels["dp_rank"])
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"0", "1", "2"}, got); diff != "" {
		t.Errorf("sglang:num_running_reqs dp_rank labels mismatch (-want +got):\n%s", diff)
	}
}
