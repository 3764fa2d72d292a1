package integration

import (
	"debug/elf"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

type dockerInstr struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T) []dockerInstr {
	t.Helper()
	b, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstr
	var cur *dockerInstr
	for n, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		cont := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &dockerInstr{line: n + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + trimmed
		}
		if !cont {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// execForm reads a JSON-array instruction argument: ["a", "b"].
func execForm(t *testing.T, in dockerInstr) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Errorf("Dockerfile line %d: %s %s: want the exec form [\"...\"]: %v", in.line, in.cmd, in.args, err)
	}
	return argv
}

// shellWords splits a shell command line at spaces outside double quotes.
func shellWords(s string) []string {
	var out []string
	var b strings.Builder
	inQuote, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, inWord = !inQuote, true
		case (r == ' ' || r == '\t' || r == '\n') && !inQuote:
			if inWord {
				out = append(out, b.String())
				b.Reset()
				inWord = false
			}
		default:
			b.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, b.String())
	}
	return out
}

// goBuild finds the `CGO_ENABLED=0 go build ...` command in s and returns
// its words with the output (-o X) left out and ${VERSION} written
// $VERSION, so that the Dockerfile's and the README's compare.
func goBuild(s string) []string {
	i := strings.Index(s, "CGO_ENABLED=0 go build ")
	if i < 0 {
		return nil
	}
	words := shellWords(strings.ReplaceAll(s[i:], "${VERSION}", "$VERSION"))
	if j := slices.Index(words, "-o"); j >= 0 && j+1 < len(words) {
		words = slices.Delete(words, j, j+2)
	}
	return words
}

// readmeSection returns the text of the README section headed title.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", title)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	return s
}

// The Dockerfile: a Go builder no older than go.mod wants, the README's
// build command, a distroless non-root base, the sample configuration at
// the path the entrypoint runs, the daemon's port exposed, a healthcheck
// through slotd itself on that port.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := parseDockerfile(t)
	args := map[string]string{} // ARG defaults
	var froms, runs []dockerInstr
	var last = map[string]dockerInstr{} // of the final stage
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case "FROM":
			froms = append(froms, in)
			clear(last)
		case "RUN":
			runs = append(runs, in)
		}
		last[in.cmd] = in
	}
	if len(froms) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a multi-stage build", len(froms))
	}

	// The builder's Go is at least go.mod's.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod: no go directive")
	}
	if !strings.Contains(froms[0].args, "golang:${GO_VERSION}") || args["GO_VERSION"] == "" {
		t.Errorf("Dockerfile line %d: FROM %s, want golang:${GO_VERSION} with ARG GO_VERSION", froms[0].line, froms[0].args)
	} else if cmpVersion(args["GO_VERSION"], string(m[1])) < 0 {
		t.Errorf("Dockerfile: GO_VERSION %s is older than go.mod's go %s", args["GO_VERSION"], m[1])
	}

	// The build command is the README's.
	var build []string
	for _, r := range runs {
		if b := goBuild(r.args); b != nil {
			build = b
		}
	}
	if build == nil {
		t.Fatal("Dockerfile: no RUN ... CGO_ENABLED=0 go build")
	}
	var documented []string
	for line := range strings.Lines(readmeSection(t, "Deployment")) {
		if b := goBuild(line); b != nil {
			documented = b
		}
	}
	if !slices.Equal(build, documented) {
		t.Errorf("the Dockerfile builds with\n  %q\nthe README (Deployment) documents\n  %q", build, documented)
	}
	for _, want := range []string{"-trimpath", "./cmd/slotd"} {
		if !slices.Contains(build, want) {
			t.Errorf("Dockerfile go build: no %s", want)
		}
	}
	if i := slices.Index(build, "-ldflags"); i < 0 || !strings.Contains(build[i+1], "-X github.com/slotd/slotd/cmd/slotd/cli.Version=$VERSION") {
		t.Errorf("Dockerfile go build %q: want -ldflags \"-X github.com/slotd/slotd/cmd/slotd/cli.Version=$VERSION\"", build)
	}

	// The final stage.
	base := strings.TrimSpace(last["FROM"].args)
	if base == "${BASE}" {
		base = args["BASE"]
	}
	if !strings.HasPrefix(base, "gcr.io/distroless/static") || !strings.HasSuffix(base, ":nonroot") {
		t.Errorf("Dockerfile: final base %q, want gcr.io/distroless/static...:nonroot (CA certificates, tzdata, user 65532)", base)
	}
	if u := last["USER"].args; u != "65532:65532" && u != "65532" && u != "nonroot" {
		t.Errorf("Dockerfile: USER %q, want 65532 (non-root)", u)
	}
	var binary string
	copies := map[string]string{} // destination -> source
	for _, in := range ins[slices.IndexFunc(ins, func(in dockerInstr) bool { return in == froms[len(froms)-1] }):] {
		if in.cmd != "COPY" {
			continue
		}
		w := strings.Fields(in.args)
		copies[w[len(w)-1]] = w[len(w)-2]
		if strings.HasPrefix(w[0], "--from=") && strings.HasSuffix(w[len(w)-2], "/slotd") {
			binary = w[len(w)-1]
		}
	}
	if binary == "" {
		t.Fatal("Dockerfile: no COPY --from=<builder> .../slotd into the final stage")
	}
	if src := copies[configPath]; "../"+src != dockerConfig {
		t.Errorf("Dockerfile: %s comes from %q, want %s", configPath, src, strings.TrimPrefix(dockerConfig, "../"))
	}
	entry := append(execForm(t, last["ENTRYPOINT"]), execForm(t, last["CMD"])...)
	if want := []string{binary, "run", "-config", configPath}; !slices.Equal(entry, want) {
		t.Errorf("Dockerfile: ENTRYPOINT + CMD %q, want %q", entry, want)
	}
	if s := last["STOPSIGNAL"].args; s != "" && s != "SIGTERM" {
		t.Errorf("Dockerfile: STOPSIGNAL %s: slotd hands over its slots on SIGTERM", s)
	}

	cfg := loadDeployConfig(t, dockerConfig, nil)
	port := listenPort(t, cfg)
	if port != defaultPort(t) {
		t.Errorf("%s: port %s, want the daemon's default %s", dockerConfig, port, defaultPort(t))
	}
	if e := last["EXPOSE"].args; e != port && e != port+"/tcp" {
		t.Errorf("Dockerfile: EXPOSE %q, want the listen port %s", e, port)
	}
	hc := last["HEALTHCHECK"].args
	i := strings.Index(hc, "CMD ")
	if i < 0 {
		t.Fatalf("Dockerfile: HEALTHCHECK %q has no CMD", hc)
	}
	checkHealthcheck(t, "Dockerfile HEALTHCHECK", execForm(t, dockerInstr{last["HEALTHCHECK"].line, "HEALTHCHECK", hc[i+4:]}), binary, port)
}

// cmpVersion compares Go versions such as 1.26 and 1.26.8.
func cmpVersion(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// ignored says whether a .dockerignore's patterns exclude path (slash
// separated, relative to the context): the last matching pattern wins, a
// pattern matches a path or any of its parent directories, "**/" matches
// any number of directories, and "!" re-includes.
func ignored(patterns []string, path string) bool {
	out := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		match := false
		for dir := path; dir != "." && dir != ""; dir = filepath.Dir(dir) {
			if ok, _ := filepath.Match(p, dir); ok {
				match = true
			}
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				if ok, _ := filepath.Match(rest, filepath.Base(dir)); ok {
					match = true
				}
			}
		}
		if match {
			out = !neg
		}
	}
	return out
}

// The Dockerfile's build stage, run here (no Docker engine runs in CI): the
// build context that Dockerfile.dockerignore leaves is copied, the RUN
// command with `go build` runs in it as the Dockerfile writes it, and the
// result is a static binary that reports the version it was given and
// accepts the image's sample configuration.
func TestDockerfileBuildsStaticBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds slotd")
	}
	var run string
	for _, in := range parseDockerfile(t) {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			run = in.args
		}
	}
	// Drop RUN's own options (--mount=...): the rest is the shell command.
	words := strings.Fields(run)
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	command := strings.Join(words, " ")
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(command)
	if out == nil {
		t.Fatalf("Dockerfile: %q has no -o", command)
	}

	b, err := os.ReadFile(dockerIgnore)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(l, "/"))
		}
	}
	ctxDir := t.TempDir()
	var copied int
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if rel == "." {
			return nil
		}
		// A directory is walked even when ignored: "!" may re-include a file in it.
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if ignored(patterns, filepath.ToSlash(rel)) || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(ctxDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		copied++
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"go.mod", "go.sum", strings.TrimPrefix(dockerConfig, "../")} {
		if _, err := os.Stat(filepath.Join(ctxDir, must)); err != nil {
			t.Errorf("the build context leaves out %s: %v", must, err)
		}
	}
	for _, mustNot := range []string{"integration/deploy_test.go", "README.md"} {
		if _, err := os.Stat(filepath.Join(ctxDir, mustNot)); err == nil {
			t.Errorf("the build context holds %s: Dockerfile.dockerignore should leave it out", mustNot)
		}
	}

	bin := filepath.Join(t.TempDir(), "slotd")
	command = strings.Replace(command, "-o "+out[1], "-o "+bin, 1)
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = ctxDir
	// As the builder stage sets them; GOPROXY=off: only the module cache.
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-deploytest", "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH,
		"GOPROXY=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build in its context (%d files): %s: %v\n%s", copied, command, err, b)
	}
	t.Logf("built in the Dockerfile's context (%d files) in %v: %s", copied, time.Since(start).Round(time.Second), command)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v): the distroless/static base has no libc", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v", libs)
	}
	if v, err := exec.Command(bin, "version").Output(); err != nil || strings.TrimSpace(string(v)) != "slotd v0.0.0-deploytest" {
		t.Errorf("slotd version: %q, %v; want the VERSION build argument", v, err)
	}
	if v, err := exec.Command(bin, "validate", "-config", filepath.Join(ctxDir, strings.TrimPrefix(dockerConfig, "../"))).CombinedOutput(); err != nil {
		t.Errorf("the built binary rejects the image's configuration: %v\n%s", err, v)
	}
}
