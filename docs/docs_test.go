// Package docs holds the tests of the documentation: README.md, DESIGN.md
// and the pages of this folder. It has no code of its own.
//
// TestRunnableBlocks runs the fenced blocks that say they are runnable, so
// that what the pages tell a reader to type works. A block is runnable when
// its info string's second word is "runnable":
//
//	```sh runnable
//	```go runnable file=~/wordcount/main.go
//
// The words after it:
//
//   - file=PATH (go blocks): the block is written to PATH, where ~ is the
//     test's home directory.
//   - background (sh blocks): the block is started and left running, as in
//     a terminal of its own, until the page's last block has run; it must
//     not exit before. name=NAME names it. ready=HOST:PORT waits until the
//     address accepts connections, ready=http://... until it answers 200.
//   - expect=TEXT (sh blocks, repeatable, TEXT without spaces): the block
//     is run again until its standard output contains every TEXT.
//
// A line <!-- runnable: interrupt NAME --> between blocks sends SIGINT to
// the background block NAME, as Ctrl-C in its terminal would, and waits for
// it to exit.
//
// The blocks of one page run in order, each with bash -euo pipefail in the
// repository's root, with HOME a new temporary directory (the Go caches,
// module cache and settings stay the caller's, so nothing is downloaded
// that is not already there) and every 127.0.0.1:PORT, in blocks and
// attributes alike, replaced by a free port, the same one for the same PORT
// throughout the page, so that the test runs beside a broker on 9092.
//
// TestExportedIdentifiersDocumented (doccomments_test.go) checks that the
// public packages document every exported name.
//
// TestLinks checks that every relative link of the same pages leads to a
// file that exists and, with a #fragment, to a heading of that file.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// pages lists the documentation files, relative to this folder.
func pages(t *testing.T) []string {
	t.Helper()
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(md)
	return append([]string{"../README.md", "../DESIGN.md"}, md...)
}

// step is one runnable block, or an interrupt directive, of a page.
type step struct {
	line      int // where it starts, for messages
	lang      string
	body      string
	file      string
	bg        bool
	name      string
	ready     string
	expect    []string
	interrupt string // the background block to interrupt, for a directive
}

var interruptRE = regexp.MustCompile(`^<!-- runnable: interrupt (\S+) -->$`)

// parseSteps reads the runnable blocks and directives of a page.
func parseSteps(t *testing.T, text string) []step {
	t.Helper()
	var steps []step
	var cur *step
	var body []string
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case !inFence && strings.HasPrefix(line, "```"):
			inFence = true
			words := strings.Fields(strings.TrimPrefix(line, "```"))
			if len(words) < 2 || words[1] != "runnable" {
				continue
			}
			cur = &step{line: i + 1, lang: words[0]}
			for _, w := range words[2:] {
				k, v, _ := strings.Cut(w, "=")
				switch k {
				case "file":
					cur.file = v
				case "background":
					cur.bg = true
				case "name":
					cur.name = v
				case "ready":
					cur.ready = v
				case "expect":
					cur.expect = append(cur.expect, v)
				default:
					t.Fatalf("line %d: unknown word %q after runnable", i+1, w)
				}
			}
			if cur.lang == "go" && cur.file == "" {
				t.Fatalf("line %d: a runnable go block needs file=PATH", i+1)
			}
			body = nil
		case inFence && strings.HasPrefix(line, "```"):
			inFence = false
			if cur != nil {
				cur.body = strings.Join(body, "\n") + "\n"
				steps = append(steps, *cur)
				cur = nil
			}
		case inFence:
			body = append(body, line)
		default:
			if m := interruptRE.FindStringSubmatch(line); m != nil {
				steps = append(steps, step{line: i + 1, interrupt: m[1]})
			}
		}
	}
	return steps
}

var addrRE = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// freePorts replaces every 127.0.0.1:PORT of the steps by a free port,
// consistently.
func freePorts(t *testing.T, steps []step) {
	t.Helper()
	ports := map[string]string{}
	replace := func(s string) string {
		return addrRE.ReplaceAllStringFunc(s, func(addr string) string {
			port := strings.TrimPrefix(addr, "127.0.0.1:")
			if _, ok := ports[port]; !ok {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ports[port] = ln.Addr().String()
				ln.Close()
			}
			return ports[port]
		})
	}
	for i := range steps {
		steps[i].body = replace(steps[i].body)
		steps[i].ready = replace(steps[i].ready)
		for j := range steps[i].expect {
			steps[i].expect[j] = replace(steps[i].expect[j])
		}
	}
}

// syncBuffer is a process's output, written by its pipes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a block being run, in a process group of its own so that
// signals reach what it started (go run's program, say).
type proc struct {
	st     step
	cmd    *exec.Cmd
	stdout syncBuffer
	output syncBuffer // stdout and stderr together
	done   chan struct{}
	err    error
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) { syscall.Kill(-p.cmd.Process.Pid, sig) }

// runner runs one page's steps.
type runner struct {
	t    *testing.T
	root string
	env  []string
	home string
	bg   []*proc
}

func newRunner(t *testing.T) *runner {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{"HOME=" + home}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	// Pin what go would otherwise find under HOME.
	for _, v := range []string{"GOPATH", "GOCACHE", "GOMODCACHE", "GOENV"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	return &runner{t: t, root: root, env: env, home: home}
}

func (r *runner) start(st step) *proc {
	p := &proc{st: st, done: make(chan struct{})}
	p.cmd = exec.Command("bash", "-euo", "pipefail", "-c", st.body)
	p.cmd.Dir, p.cmd.Env = r.root, r.env
	p.cmd.Stdout = io.MultiWriter(&p.stdout, &p.output)
	p.cmd.Stderr = &p.output
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A program the block left behind may hold its output open.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		r.t.Fatalf("line %d: %v", st.line, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

// run runs a foreground block to its end within d, killing it after.
func (r *runner) run(st step, d time.Duration) *proc {
	p := r.start(st)
	select {
	case <-p.done:
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-p.done
		r.t.Fatalf("line %d: still running after %v:\n%s\noutput:\n%s", st.line, d, st.body, p.output.String())
	}
	return p
}

// stopAll interrupts the background blocks still running, and kills those
// that do not stop.
func (r *runner) stopAll() {
	for _, p := range r.bg {
		if !p.exited() {
			p.signal(syscall.SIGINT)
		}
	}
	for _, p := range r.bg {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

func (r *runner) dumpBackground() {
	for _, p := range r.bg {
		r.t.Logf("background block of line %d (%s), output:\n%s", p.st.line, p.st.name, tail(p.output.String(), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// ready reports whether a background block's ready condition holds.
func ready(cond string) bool {
	if strings.HasPrefix(cond, "http://") {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(cond)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	conn, err := net.DialTimeout("tcp", cond, 2*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (r *runner) step(st step) {
	t := r.t
	const (
		blockDeadline = 4 * time.Minute // the first go run builds Eddy and its dependencies
		readyDeadline = 4 * time.Minute
		retryDeadline = 2 * time.Minute
	)
	switch {
	case st.interrupt != "":
		i := slices.IndexFunc(r.bg, func(p *proc) bool { return p.st.name == st.interrupt })
		if i < 0 {
			t.Fatalf("line %d: no background block named %q before it", st.line, st.interrupt)
		}
		p := r.bg[i]
		p.signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Fatalf("line %d: %q did not exit within a minute of SIGINT:\n%s", st.line, st.interrupt, p.output.String())
		}
	case st.lang == "go":
		path := st.file
		if rest, ok := strings.CutPrefix(path, "~/"); ok {
			path = filepath.Join(r.home, rest)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(st.body), 0o644); err != nil {
			t.Fatal(err)
		}
	case st.lang != "sh":
		t.Fatalf("line %d: runnable blocks are sh or go, not %q", st.line, st.lang)
	case st.bg:
		p := r.start(st)
		r.bg = append(r.bg, p)
		if st.ready == "" {
			return
		}
		deadline := time.Now().Add(readyDeadline)
		for !ready(st.ready) {
			if p.exited() {
				t.Fatalf("line %d: exited (%v) before %s was ready:\n%s", st.line, p.err, st.ready, p.output.String())
			}
			if time.Now().After(deadline) {
				t.Fatalf("line %d: %s not ready within %v:\n%s", st.line, st.ready, readyDeadline, p.output.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	default:
		deadline := time.Now().Add(retryDeadline)
		for {
			p := r.run(st, blockDeadline)
			if p.err != nil && len(st.expect) == 0 {
				t.Fatalf("line %d: %v:\n%s\noutput:\n%s", st.line, p.err, st.body, p.output.String())
			}
			out := p.stdout.String()
			if p.err == nil && !slices.ContainsFunc(st.expect, func(e string) bool { return !strings.Contains(out, e) }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("line %d: output never held %q within %v; last (%v):\n%s", st.line, st.expect, retryDeadline, p.err, p.output.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestRunnableBlocks runs each page's runnable blocks in order: for
// README.md, the five-minute path from an empty module to a word count of
// two instances, fed, queried, and one of them stopped.
func TestRunnableBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs programs against an embedded broker; not in -short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		steps := parseSteps(t, string(text))
		if len(steps) == 0 {
			continue
		}
		t.Run(filepath.Base(page), func(t *testing.T) {
			freePorts(t, steps)
			r := newRunner(t)
			defer r.stopAll()
			for _, st := range steps {
				if t.Failed() {
					break
				}
				func() {
					defer func() {
						if t.Failed() {
							r.dumpBackground()
						}
					}()
					r.step(st)
				}()
			}
			for _, p := range r.bg {
				if p.exited() && p.st.name != "" && !slices.ContainsFunc(steps, func(s step) bool { return s.interrupt == p.st.name }) {
					t.Errorf("background block of line %d exited early (%v):\n%s", p.st.line, p.err, p.output.String())
				}
			}
		})
	}
}

var (
	linkRE     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
)

// headingAnchors returns the anchors GitHub gives a page's headings:
// lowercased, everything but letters, digits, - and _ dropped, spaces
// turned into -, and -1, -2 ... after repeats.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, c := range strings.ToLower(h) {
			switch {
			case c == ' ':
				b.WriteRune('-')
			case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) || unicode.IsMark(c):
				b.WriteRune(c)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// links returns the link targets of a page outside code.
func links(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestLinks checks every relative link and #fragment of the pages.
func TestLinks(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(text)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if frag == "" {
				continue
			}
			body, err := os.ReadFile(file)
			if err != nil || !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: a fragment of a file that is not a page", page, target)
				continue
			}
			if !headingAnchors(string(body))[frag] {
				t.Errorf("%s: link %q: %s has no heading with that anchor", page, target, file)
			}
		}
	}
}
