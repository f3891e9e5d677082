package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// EnvOpenAIPython names the interpreter of the venv holding the official openai package,
// exported by scripts/test.sh (scripts/lib/openaienv.sh).
const EnvOpenAIPython = "SLUICE_TEST_OPENAI_PYTHON"

// openAIPython returns that interpreter: t.Fatal in CI when it is missing, t.Skip elsewhere.
func openAIPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv(EnvOpenAIPython)
	if py == "" {
		if testenv.InCI() {
			t.Fatalf("%s is required in CI but not set: run the tests through scripts/test.sh", EnvOpenAIPython)
		}
		t.Skipf("%s unset: run scripts/test.sh (it provisions the openai virtualenv)", EnvOpenAIPython)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s=%s: %v", EnvOpenAIPython, py, err)
	}
	return py
}

// TestOpenAIClient runs the official openai Python package against `sluice dev` (a real
// process: in-process Kafka, decider, enginelink, gateway and simulated vLLM/SGLang engines)
// as an OpenAI user would: chat, streaming chat (plain and prefill/decode), completions
// (streamed too), the async client, models list and retrieve, session affinity, and the error
// classes — NotFoundError for an unknown model or route, BadRequestError for an empty chat or
// n > 1, InternalServerError for a gateway whose decider is down — each with OpenAI's error
// object. Every check of testdata/openai_client.py is a subtest.
func TestOpenAIClient(t *testing.T) {
	py := openAIPython(t)
	dir := t.TempDir()
	bin := proctest.BuildSluice(t, dir)
	procs := proctest.NewSet(t, dir, proctest.Options{StopGrace: stopGrace, TailLines: tailLines})
	ports := proctest.FreePorts(t, 6)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	dev := procs.Start(t, "dev", nil, bin, "dev", "-gateway-addr", addr(0), "-grpc-addr", addr(1), "-http-addr", addr(2),
		"-link-addr", addr(3), "-speed", "50", "-log-level", "info")
	gateway := "http://" + addr(0)
	proctest.WaitHTTP(t, quick, dev, gateway+"/readyz", startTimeout)
	// The engines are candidates once their first health probe passed: /v1/models lists
	// the models of healthy engines only.
	proctest.Eventually(t, poll, startTimeout, "every dev model served", func() (bool, string) {
		resp, err := quick.Get(gateway + "/v1/models")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := string(b)
		return strings.Contains(s, `"sim-chat"`) && strings.Contains(s, `"sim-pd"`) && strings.Contains(s, `"sim-session"`), s
	})
	// A gateway whose decider is not there (port ports[5] was free and nothing binds it).
	dead := procs.Start(t, "gateway-without-decider", nil, bin, "gateway", "-addr", addr(4), "-decider-addr", addr(5), "-decide-timeout", "1s")
	proctest.WaitHTTP(t, quick, dead, "http://"+addr(4)+"/healthz", startTimeout)

	cmd := exec.Command(py, filepath.Join("testdata", "openai_client.py"), "--base-url", gateway+"/v1", "--dead-url", "http://"+addr(4)+"/v1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openai_client.py: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var checks int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			Name   string `json:"name"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("openai_client.py printed %q: %v", sc.Text(), err)
		}
		checks++
		t.Run(r.Name, func(t *testing.T) {
			if !r.OK {
				t.Error(r.Detail)
				return
			}
			t.Log(r.Detail)
		})
	}
	// openai_version plus the checks; fewer lines mean the script stopped early.
	if checks < 19 {
		t.Errorf("openai_client.py reported %d checks, want 19:\n%s\nstderr:\n%s", checks, out, stderr.String())
	}
}
