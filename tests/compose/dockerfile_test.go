package compose

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerStage is one FROM … [AS name] stage of a Dockerfile, reduced to what the checks read.
type dockerStage struct {
	name       string
	base       string   // the FROM image, or the parent stage's base when FROM names a stage
	user       string   // the last USER (inherited from a parent stage)
	entrypoint []string // exec form; shell form becomes /bin/sh -c …
	runs       []string // RUN instructions, continuation lines joined
}

// hasShell reports whether the stage's base image ships /bin/sh (distroless and scratch do not).
func (s *dockerStage) hasShell() bool {
	return !strings.HasPrefix(s.base, "gcr.io/distroless/") && s.base != "scratch"
}

var instruction = regexp.MustCompile(`^(?i)([a-z]+)\s+(.*)$`)

func parseDockerfile(data string) []*dockerStage {
	var (
		stages  []*dockerStage
		cur     *dockerStage
		pending string
	)
	byName := map[string]*dockerStage{}
	// ARGs before the first FROM, with their defaults: what FROM ${X} resolves to in a build
	// without --build-arg.
	globalArgs := map[string]string{}
	for _, raw := range strings.Split(data, "\n") {
		line := strings.TrimSpace(raw)
		if pending == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		m := instruction.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		args := strings.TrimSpace(m[2])
		switch strings.ToUpper(m[1]) {
		case "ARG":
			if cur == nil {
				name, def, _ := strings.Cut(args, "=")
				globalArgs[strings.TrimSpace(name)] = strings.Trim(strings.TrimSpace(def), `"`)
			}
		case "FROM":
			f := strings.Fields(os.Expand(args, func(k string) string { return globalArgs[k] }))
			var st dockerStage
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) > 0 {
				st.base = f[0]
				if parent, ok := byName[strings.ToLower(f[0])]; ok {
					st = dockerStage{base: parent.base, user: parent.user, entrypoint: parent.entrypoint}
				}
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
				byName[strings.ToLower(f[2])] = &st
			}
			cur = &st
			stages = append(stages, cur)
		case "USER":
			if cur != nil {
				cur.user = args
			}
		case "ENTRYPOINT":
			if cur != nil {
				var ep []string
				if json.Unmarshal([]byte(args), &ep) != nil {
					ep = []string{"/bin/sh", "-c", args}
				}
				cur.entrypoint = ep
			}
		case "RUN":
			if cur != nil {
				cur.runs = append(cur.runs, args)
			}
		}
	}
	return stages
}

// stage returns the stage a build with target builds: the named one, or the last.
func stageFor(stages []*dockerStage, target string) *dockerStage {
	if target == "" {
		if len(stages) == 0 {
			return nil
		}
		return stages[len(stages)-1]
	}
	for _, s := range stages {
		if strings.EqualFold(s.name, target) {
			return s
		}
	}
	return nil
}

func readDockerfile(t *testing.T) []*dockerStage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(string(data))
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM stage")
	}
	return stages
}

// TestDockerfile checks the image the compose file builds: a static, trimmed build, and runtime
// stages that run the sluice binary as a non-root user.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	var built bool
	for _, s := range stages {
		for _, r := range s.runs {
			if strings.Contains(r, "go build") {
				built = true
				for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./services/sluice"} {
					if !strings.Contains(r, want) {
						t.Errorf("Dockerfile stage %q: `go build` lacks %s: %s", s.name, want, r)
					}
				}
			}
		}
	}
	if !built {
		t.Error("Dockerfile: no RUN … go build … stage")
	}
	for _, s := range stages {
		if len(s.entrypoint) == 0 {
			continue // a build stage
		}
		if filepath.Base(s.entrypoint[0]) != "sluice" {
			t.Errorf("Dockerfile stage %q: ENTRYPOINT %q does not run the sluice binary", s.name, s.entrypoint)
		}
		switch u := strings.SplitN(s.user, ":", 2)[0]; u {
		case "", "0", "root":
			t.Errorf("Dockerfile stage %q: runs as root (USER %q); use a non-root uid such as 65532", s.name, s.user)
		}
	}
}

// TestDockerfileBaseArgs: the base images are build arguments whose defaults are the upstream
// images, and every runtime stage resolves to the base it documents.
func TestDockerfileBaseArgs(t *testing.T) {
	want := map[string]string{"build": "golang:1.26", "distroless": "gcr.io/distroless/static-debian12:nonroot",
		"prebuilt": "alpine:3.22", "runtime": "alpine:3.22"}
	stages := readDockerfile(t)
	for _, s := range stages {
		if w, ok := want[s.name]; ok && s.base != w {
			t.Errorf("Dockerfile stage %q: FROM resolves to %q with the default build arguments, want %q", s.name, s.base, w)
		}
		delete(want, s.name)
	}
	for name := range want {
		t.Errorf("Dockerfile: no stage %q", name)
	}
	if st := stageFor(stages, "distroless"); st == nil || st.hasShell() {
		t.Error("Dockerfile: the distroless stage should be recognised as having no shell")
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?im)^#\s*syntax\s*=`).Match(data) {
		t.Error("Dockerfile: a `# syntax=` line makes BuildKit fetch a frontend image, which fails without a registry")
	}
}
