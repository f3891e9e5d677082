package gateway

import (
	"bytes"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// An engine's redirect is followed as http.Client follows it: a 307 re-sends the body to the
// Location, and the client gets the second answer.
func TestEngineRedirectFollowedAsBefore(t *testing.T) {
	e1, e2 := newFakeEngine(t, "e1"), newFakeEngine(t, "e2")
	e1.setHandler(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, e2.url()+r.URL.Path, http.StatusTemporaryRedirect)
	})
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	resp := post(t, g, routeChat, body)
	if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != `{"engine":"e2","path":"/v1/chat/completions"}` {
		t.Fatalf("POST = %d %s, want e2's answer after e1's 307", resp.StatusCode, got)
	}
	if reqs := e2.requests(); len(reqs) != 1 || string(reqs[0].body) != body {
		t.Fatalf("e2 got %d requests (%v), want the body once", len(reqs), reqs)
	}
	// A redirect without a Location is relayed as is, as the client does.
	e1.setHandler(func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusFound) })
	resp = post(t, g, routeChat, body)
	readAll(t, resp)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("POST = %d, want the engine's 302 without a Location relayed", resp.StatusCode)
	}
	waitLeases(t, d)
}

// engineDoer words a transport failure exactly as http.Client.Do does, and turns a URL's user
// info into basic auth as the client does.
func TestEngineDoerMatchesClient(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String() + "/v1/chat/completions"
	lis.Close()
	rt := newH1Transport(newEngineTransport())
	client := &http.Client{Transport: rt}
	d := engineDoer{client, rt}
	send := func(do func(*http.Request) (*http.Response, error), url string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		return do(req)
	}
	_, want := send(client.Do, dead)
	_, got := send(d.Do, dead)
	if want == nil || got == nil || got.Error() != want.Error() {
		t.Fatalf("engineDoer error = %v, want http.Client's %v", got, want)
	}

	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	resp, err := send(d.Do, strings.Replace(srv.URL, "http://", "http://user:secret@", 1)+"/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if auth != "Basic dXNlcjpzZWNyZXQ=" {
		t.Fatalf("Authorization = %q, want the user info as basic auth", auth)
	}
}

// isEventStreamReference is isEventStream without its fast path.
func isEventStreamReference(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

func TestIsEventStream(t *testing.T) {
	for _, ct := range []string{"", "application/json", "text/event-stream", "Text/Event-Stream; charset=utf-8", " text/event-stream ",
		"text/event-stream;", "text/event-stream; x", "text/event-streams", "application/event-stream", "text/event-stream\u212a"} {
		if got, want := isEventStream(ct), isEventStreamReference(ct); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

func FuzzIsEventStream(f *testing.F) {
	f.Add("text/event-stream; charset=utf-8")
	f.Add("application/json")
	f.Fuzz(func(t *testing.T, ct string) {
		if got, want := isEventStream(ct), isEventStreamReference(ct); got != want {
			t.Fatalf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	})
}

// inferenceFirst answers every request as the REST mux alone would, with the same handlers.
func TestInferenceFirstMatchesMux(t *testing.T) {
	newMux := func() (*runtime.ServeMux, map[string]runtime.HandlerFunc) {
		mux := runtime.NewServeMux()
		routes := map[string]runtime.HandlerFunc{}
		for _, p := range []string{routeChat, routeCompletions, routeGenerate} {
			h := func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
				_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" handled by "+p)
			}
			routes[p] = h
			if err := mux.HandlePath(http.MethodPost, p, h); err != nil {
				t.Fatal(err)
			}
		}
		if err := mux.HandlePath(http.MethodGet, "/v1/{name=**}", func(w http.ResponseWriter, _ *http.Request, pp map[string]string) {
			_, _ = io.WriteString(w, "get "+pp["name"])
		}); err != nil {
			t.Fatal(err)
		}
		return mux, routes
	}
	mux, routes := newMux()
	fast := inferenceFirst(mux, routes)
	for _, tc := range []struct{ method, target, override string }{
		{http.MethodPost, routeChat, ""}, {http.MethodPost, routeCompletions, ""}, {http.MethodPost, routeGenerate, ""},
		{http.MethodGet, routeChat, ""}, {http.MethodPut, routeChat, ""}, {http.MethodPost, "/v1/chat%2Fcompletions", ""},
		{http.MethodPost, "/v1/chat/completions/", ""}, {http.MethodPost, "/v1/chat/completions?x=1", ""},
		{http.MethodPost, routeChat, "GET"}, {http.MethodPost, "/v1/models", ""}, {http.MethodPost, "/V1/chat/completions", ""},
	} {
		do := func(h http.Handler) (int, string) {
			req := httptest.NewRequest(tc.method, tc.target, strings.NewReader("{}"))
			if tc.override != "" {
				req.Header.Set("X-HTTP-Method-Override", tc.override)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code, w.Body.String()
		}
		wantCode, wantBody := do(mux)
		gotCode, gotBody := do(fast)
		if gotCode != wantCode || gotBody != wantBody {
			t.Errorf("%s %s (override %q) = %d %q, want the mux's %d %q", tc.method, tc.target, tc.override, gotCode, gotBody, wantCode, wantBody)
		}
	}
}
