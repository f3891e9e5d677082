package proctest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Decider makes REST calls to a running decider's HTTP port with protojson bodies.
type Decider struct {
	// Addr is the decider's HTTP host:port.
	Addr string
	// Token is sent as the bearer token of every call.
	Token string
	// Client makes the calls.
	Client *http.Client
}

// Call makes one REST call: in (nil: no body) as the request's JSON body, the answer,
// which must be 200, decoded into out.
func (d Decider) Call(t testing.TB, method, path string, in, out proto.Message) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := protojson.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+d.Addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.Client.Do(req)
	if err != nil {
		t.Fatalf("%s decider %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s decider %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s decider %s = %s: %s", method, path, resp.Status, b)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
		t.Fatalf("%s decider %s: decode: %v: %s", method, path, err, b)
	}
}

// Engines reads GET /v1/admin/engines, keyed by engine id.
func (d Decider) Engines(t testing.TB) map[string]*sluicev1.Engine {
	t.Helper()
	var resp sluicev1.ListEnginesResponse
	d.Call(t, http.MethodGet, "/v1/admin/engines", nil, &resp)
	out := map[string]*sluicev1.Engine{}
	for _, e := range resp.GetEngines() {
		out[e.GetId()] = e
	}
	return out
}

// EnginesReady reports whether every engine of ids is registered with the decider,
// healthy and with a load report, and otherwise what each missing one lacks: a condition
// for Eventually.
func (d Decider) EnginesReady(t testing.TB, ids ...string) (bool, string) {
	t.Helper()
	engs := d.Engines(t)
	var missing []string
	for _, id := range ids {
		e, ok := engs[id]
		switch {
		case !ok:
			missing = append(missing, id+": not registered")
		case !e.GetHealthy():
			missing = append(missing, id+": unhealthy ("+e.GetHealthReason()+")")
		case !e.GetLoad().GetLoadKnown():
			missing = append(missing, id+": no load report yet")
		}
	}
	return len(missing) == 0, strings.Join(missing, "; ")
}

// DryRun asks POST /v1/decide what the decider would decide for a chat of model whose
// prompt has tokenIDs, with explain, taking no lease.
func (d Decider) DryRun(t testing.TB, model string, tokenIDs []uint32) *sluicev1.DecideResponse {
	t.Helper()
	var resp sluicev1.DecideResponse
	d.Call(t, http.MethodPost, "/v1/decide", &sluicev1.DecideRequest{Model: model, InputTokens: int64(len(tokenIDs)),
		TokenIds: tokenIDs, DryRun: true, Explain: true}, &resp)
	return &resp
}

// PlainPick is a dry-run decision's engine and reason for a plain bucket.
func PlainPick(d *sluicev1.DecideResponse) string {
	p := d.GetPick().GetPlain()
	return fmt.Sprintf("%s (%s)", p.GetEngineId(), p.GetReason())
}

// Matched is the prefix length a decision's explain output credits engine with.
func Matched(d *sluicev1.DecideResponse, engine string) int64 {
	for _, a := range d.GetExplain().GetAttempts() {
		for _, st := range a.GetStages() {
			for _, c := range st.GetCandidates() {
				if c.GetEngineId() == engine {
					return c.GetMatchedTokens()
				}
			}
		}
	}
	return 0
}

// Candidates summarises a decision's explain output: each candidate's reported load,
// in-flight count, prefix match, note and rejection.
func Candidates(d *sluicev1.DecideResponse) string {
	var parts []string
	for _, a := range d.GetExplain().GetAttempts() {
		for _, st := range a.GetStages() {
			for _, c := range st.GetCandidates() {
				parts = append(parts, fmt.Sprintf("%s{known=%v running=%d waiting=%d inflight=%d matched=%d note=%q rejection=%q}",
					c.GetEngineId(), c.GetLoadKnown(), c.GetRunningRequests(), c.GetWaitingRequests(), c.GetInflightRequests(),
					c.GetMatchedTokens(), c.GetNote(), c.GetRejection()))
			}
		}
	}
	return strings.Join(parts, " ")
}
