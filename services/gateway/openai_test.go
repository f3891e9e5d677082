package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// openAIError decodes an OpenAI error body strictly: exactly {"error": {message, type, param,
// code}}, message, type and code set.
func openAIError(t *testing.T, body string) (code string, param *string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("body %q is not an OpenAI error {\"error\":{message,type,param,code}}: %v", body, err)
	}
	return e.Error.Code, e.Error.Param
}

func do(t *testing.T, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestOpenAIErrorShapes: every error on the OpenAI surface — unknown routes, wrong methods,
// unknown models, refused bodies — is an OpenAI error with the status OpenAI uses, and the
// bodies OpenAI refuses never reach Decide. The decider's REST paths keep grpc-gateway's shape.
func TestOpenAIErrorShapes(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}, {engine: newFakeEngine(t, "e2"), model: "org/model-7b", role: "plain"}}, "")
	rd := startRecordingDecider(t, d)
	g := startGatewayAt(t, rd.addr, nil)
	base := "http://" + g.Addr()

	tests := []struct {
		name, method, path, body string
		status                   int
		code, param, allow       string
	}{
		{"unknown route", http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`, 404, "unknown_url", "", ""},
		{"unknown route outside v1", http.MethodGet, "/v2/models", "", 404, "unknown_url", "", ""},
		{"chat with GET", http.MethodGet, routeChat, "", 405, "method_not_allowed", "", "POST"},
		{"models with POST", http.MethodPost, routeModels, "{}", 405, "method_not_allowed", "", "GET"},
		{"retrieve with DELETE", http.MethodDelete, routeModels + "/m", "", 405, "method_not_allowed", "", "GET"},
		{"unknown model", http.MethodPost, routeChat, `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found", "model", ""},
		{"retrieve unknown model", http.MethodGet, routeModels + "/gpt-9", "", 404, "model_not_found", "model", ""},
		{"empty messages", http.MethodPost, routeChat, `{"model":"m","messages":[ ]}`, 400, "empty_array", "messages", ""},
		{"n above 1", http.MethodPost, routeChat, `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "unsupported_value", "n", ""},
		{"n above 1 on completions", http.MethodPost, routeCompletions, `{"model":"m","n":3,"prompt":"x"}`, 400, "unsupported_value", "n", ""},
		{"n zero", http.MethodPost, routeChat, `{"model":"m","n":0,"messages":[{"role":"user","content":"x"}]}`, 400, "integer_below_min_value", "n", ""},
		{"n not an integer", http.MethodPost, routeChat, `{"model":"m","n":"two","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_type", "n", ""},
		{"body too large", http.MethodPost, routeChat, `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", int(g.sizes.MaxBodyBytes)) + `"}]}`, 413, "request_too_large", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(rd.requests())
			resp := do(t, tt.method, base+tt.path, tt.body)
			got := readAll(t, resp)
			code, param := openAIError(t, got)
			if resp.StatusCode != tt.status || code != tt.code {
				t.Errorf("%s %s = %d %s, want %d %s", tt.method, tt.path, resp.StatusCode, got, tt.status, tt.code)
			}
			if tt.param != "" && (param == nil || *param != tt.param) {
				t.Errorf("%s %s param = %v, want %q", tt.method, tt.path, param, tt.param)
			}
			if resp.Header.Get("Allow") != tt.allow || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s headers = %v, want Allow %q and JSON", tt.method, tt.path, resp.Header, tt.allow)
			}
			if tt.code != "model_not_found" && len(rd.requests()) != before {
				t.Errorf("%s %s reached Decide; a refused body must not", tt.method, tt.path)
			}
		})
	}
	t.Run("n of 1 and null are served", func(t *testing.T) {
		for _, body := range []string{`{"model":"m","n":1,"messages":[{"role":"user","content":"x"}]}`, `{"model":"m","n":null,"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"say \"n\": 2"}]}`} {
			if resp := post(t, g, routeChat, body); resp.StatusCode != http.StatusOK {
				t.Errorf("POST %s = %d %s, want 200", body, resp.StatusCode, readAll(t, resp))
			} else {
				readAll(t, resp)
			}
		}
	})
	t.Run("REST paths keep grpc-gateway's shape", func(t *testing.T) {
		resp := do(t, http.MethodGet, base+"/v1/admin/nope", "")
		got := readAll(t, resp)
		var st struct {
			Code    *int   `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(got), &st); err != nil || st.Code == nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /v1/admin/nope = %d %s, want grpc-gateway's 404 status body", resp.StatusCode, got)
		}
	})
	waitLeases(t, d)
}

// TestRetrieveModel: GET /v1/models/{model} answers OpenAI's model object, ids with slashes
// included.
func TestRetrieveModel(t *testing.T) {
	d := startDecider(t, []listEntry{{engine: newFakeEngine(t, "e1"), model: "m", role: "plain"}, {engine: newFakeEngine(t, "e2"), model: "org/model-7b", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	for _, id := range []string{"m", "org/model-7b"} {
		resp := do(t, http.MethodGet, "http://"+g.Addr()+routeModels+"/"+id, "")
		got := readAll(t, resp)
		var m model
		if err := json.Unmarshal([]byte(got), &m); err != nil || resp.StatusCode != http.StatusOK || m.ID != id || m.Object != "model" || m.OwnedBy == "" || m.Created == 0 {
			t.Errorf("GET /v1/models/%s = %d %s, want the model object", id, resp.StatusCode, got)
		}
	}
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDecisionHeaders: with DecisionHeaders the response names the engine(s), bucket, policy
// reason, matched tokens and configuration version; a PD answer carries x-sgl-decode-url (on
// the response and on both engines' requests) whether or not the headers are on; the decision
// is logged at debug with the same fields; generated request ids are 32 hex digits.
func TestDecisionHeaders(t *testing.T) {
	plain, p1, d1 := newFakeEngine(t, "plain-1"), newFakeEngine(t, "prefill-1"), newFakeEngine(t, "decode-1")
	d := startDecider(t, []listEntry{{engine: plain, model: "m", role: "plain"},
		{engine: p1, model: "pd", role: "prefill", bootstrapPort: 8998}, {engine: d1, model: "pd", role: "decode"}}, "")
	var logs lockedBuffer
	cfg := DefaultConfig()
	cfg.Addr, cfg.DeciderAddr, cfg.DecisionHeaders = "127.0.0.1:0", d.GRPCAddr(), true
	g, err := New(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, g.Run)
	off := startGateway(t, d, nil)
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)

	t.Run("plain", func(t *testing.T) {
		resp := post(t, g, routeChat, chat("m"), "X-Sgl-Decode-Url", "http://client-sent")
		readAll(t, resp)
		want := map[string]string{headerEngine: "plain-1", headerBucket: "plain", headerReason: resp.Header.Get(headerReason),
			headerMatchedTokens: "0", headerConfigVersion: "1", headerDecodeURL: ""}
		for h, v := range want {
			if got := resp.Header.Get(h); got != v || (h == headerReason && v == "") {
				t.Errorf("%s = %q, want %q (all: %v)", h, got, v, resp.Header)
			}
		}
		if id := resp.Header.Get("X-Request-Id"); !hexID.MatchString(id) {
			t.Errorf("X-Request-Id = %q, want 32 hex digits", id)
		}
		reqs := plain.requests()
		if h := reqs[len(reqs)-1].header.Get(headerDecodeURL); h != "" {
			t.Errorf("engine got the client's %s %q; the gateway sets it, clients do not", headerDecodeURL, h)
		}
		line := logLine(t, logs.String(), resp.Header.Get("X-Request-Id"))
		for _, f := range []string{"engine_ids=plain-1", "bucket=plain", "reason=" + resp.Header.Get(headerReason), "matched_tokens=0", "model=m"} {
			if !strings.Contains(line, f) {
				t.Errorf("debug log line %q lacks %q", line, f)
			}
		}
	})
	t.Run("pd", func(t *testing.T) {
		for _, gw := range []*Server{g, off} {
			resp := post(t, gw, routeChat, chat("pd"))
			readAll(t, resp)
			if got := resp.Header.Get(headerDecodeURL); got != d1.url() {
				t.Errorf("%s = %q, want the decode engine's URL %q", headerDecodeURL, got, d1.url())
			}
			for _, e := range []*fakeEngine{p1, d1} {
				reqs := e.requests()
				if got := reqs[len(reqs)-1].header.Get(headerDecodeURL); got != d1.url() {
					t.Errorf("%s got %s %q, want %q", e.id, headerDecodeURL, got, d1.url())
				}
			}
			if gw == off {
				if h := resp.Header.Get(headerEngine); h != "" {
					t.Errorf("decision headers off, yet %s = %q", headerEngine, h)
				}
				continue
			}
			if got := resp.Header.Get(headerEngine); got != "prefill-1, decode-1" {
				t.Errorf("%s = %q, want prefill-1, decode-1", headerEngine, got)
			}
			if got := resp.Header.Get(headerBucket); got != "pd" {
				t.Errorf("%s = %q, want pd", headerBucket, got)
			}
			if got := strings.Split(resp.Header.Get(headerReason), ", "); len(got) != 2 || got[0] == "" || got[1] == "" {
				t.Errorf("%s = %q, want two reasons", headerReason, resp.Header.Get(headerReason))
			}
		}
	})
	waitLeases(t, d)
}

// logLine returns the log line about request id.
func logLine(t *testing.T, logs, requestID string) string {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "msg=decided") && strings.Contains(l, "request_id="+requestID) {
			return l
		}
	}
	t.Fatalf("no debug line for request %s in:\n%s", requestID, logs)
	return ""
}

// FuzzValidateOpenAI: validateOpenAI never panics on a body parseFacts accepted, and refuses
// only with a 400 naming messages or n.
func FuzzValidateOpenAI(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[]}`, `{"model":"m","messages":[ ],"n":2}`, `{"model":"m","n":1e400,"messages":[{"content":"x"}]}`,
		`{"model":"m","prompt":"x","n":"2"}`, `{"model":"m","messages":[{"content":"\"n\": 3"}],"n":-1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, route := range []string{routeChat, routeCompletions} {
			facts, err := parseFacts(route, []byte(body), "")
			if err != nil {
				continue
			}
			err = validateOpenAI(route, []byte(body), facts)
			if err == nil {
				continue
			}
			var re *requestError
			if !errors.As(err, &re) || (re.param != "messages" && re.param != "n") || re.msg == "" {
				t.Errorf("validateOpenAI(%s, %q) = %v, want a requestError naming messages or n", route, body, err)
			}
		}
	})
}
