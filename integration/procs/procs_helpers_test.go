package procs

// Helpers for the multi-process tests: they build the demo binary once per
// test run and run its broker, instance and produce subcommands as child
// processes, which the tests kill with SIGKILL and restart. Each process's
// output is kept in memory and printed only when the test fails.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
)

const (
	// procApp is the demo's default application ID, which the instance
	// subcommand uses for the group and its internal topics.
	procApp = "wordcount"
	// procStartTimeout bounds how long a child may take to print its ready
	// line; building is done by then, so this is start-up only.
	procStartTimeout = 30 * time.Second
	// procLogTail is how much of each process's output a failing test
	// prints; set EDDY_TEST_LOGDIR to keep whole logs in files.
	procLogTail = 64 << 10
)

// TestMain removes the demo binary built for the multi-process tests once
// every test has run; a per-test cleanup would throw the build away after
// the first test that used it.
func TestMain(m *testing.M) {
	code := m.Run()
	if demoBin.dir != "" {
		os.RemoveAll(demoBin.dir)
	}
	os.Exit(code)
}

var demoBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// demoBinary returns the path of the demo binary, building it on first use
// (or EDDY_DEMO_BIN, a binary built beforehand).
// It is built without -race: the race detector is for this test process,
// and an instrumented child would only make the chaos slower.
func demoBinary(t *testing.T) string {
	t.Helper()
	demoBin.once.Do(func() {
		if bin := os.Getenv("EDDY_DEMO_BIN"); bin != "" {
			demoBin.path = bin
			return
		}
		root, err := moduleRoot()
		if err != nil {
			demoBin.err = err
			return
		}
		if demoBin.dir, err = os.MkdirTemp("", "eddy-demo-bin-"); err != nil {
			demoBin.err = err
			return
		}
		path := filepath.Join(demoBin.dir, "demo")
		cmd := exec.Command("go", "build", "-o", path, "./cmd/demo")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			demoBin.err = fmt.Errorf("go build ./cmd/demo: %w\n%s", err, out)
			return
		}
		demoBin.path = path
	})
	require.NoError(t, demoBin.err)
	return demoBin.path
}

// moduleRoot finds the directory holding go.mod, upwards from the package
// directory `go test` runs in.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// freePort returns a loopback address whose port was free a moment ago.
// Another process could take it before the child binds it; on loopback in
// a test that is rare enough, and the child then fails loudly at start.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// proc is one long-running child process, started again with the same
// arguments after each kill.
type proc struct {
	name string
	args []string
	log  *fixture.LogBuffer // stdout and stderr of every incarnation

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has been waited for
	waitErr error         // set before exited is closed
	killed  bool          // the test killed the current incarnation
	starts  int
}

// procCluster is a demo broker process and the children started against it.
// Cleanup kills every child still running and, if the test failed, prints
// their logs.
type procCluster struct {
	t      *testing.T
	bin    string
	dir    string
	broker *proc
	addr   string // the broker's host:port

	mu    sync.Mutex
	procs []*proc
}

// newProcCluster builds the demo binary if needed and starts a broker
// process with the given default partition count.
func newProcCluster(t *testing.T, partitions int) *procCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	c := &procCluster{t: t, bin: demoBinary(t), dir: t.TempDir()}
	t.Cleanup(c.cleanup)
	args := []string{"broker", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(c.dir, "broker"), "--partitions", strconv.Itoa(partitions)}
	if lvl := os.Getenv("EDDY_TEST_BROKER_LOG"); lvl != "" {
		args = append(args, "--log-level", lvl)
	}
	c.broker = c.newProc("broker", args...)
	m := c.start(c.broker, regexp.MustCompile(`^listening on (\S+)$`))
	c.addr = m[1]
	return c
}

func (c *procCluster) newProc(name string, args ...string) *proc {
	p := &proc{name: name, args: args, log: new(fixture.LogBuffer)}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// start runs p and waits for a line of its standard output matching ready,
// returning the submatches.
func (c *procCluster) start(p *proc, ready *regexp.Regexp) []string {
	c.t.Helper()
	p.mu.Lock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			p.mu.Unlock()
			c.t.Fatalf("%s: started while still running", p.name)
		}
	}
	p.starts++
	fmt.Fprintf(p.log, "=== %s: start #%d at %s: demo %s\n", p.name, p.starts,
		time.Now().Format("15:04:05.000"), strings.Join(p.args, " "))
	cmd := exec.Command(c.bin, p.args...)
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		p.mu.Unlock()
		c.t.Fatalf("%s: start: %v", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.killed, p.waitErr = cmd, exited, false, nil
	p.mu.Unlock()

	readyCh := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(p.log, "[stdout] %s\n", line)
			if m := ready.FindStringSubmatch(line); m != nil {
				select {
				case readyCh <- m:
				default:
				}
			}
		}
		// Wait only once the pipe is drained, as os/exec requires.
		io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()

	select {
	case m := <-readyCh:
		return m
	case <-exited:
		c.t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.exitErr(), logTail(p.log.String(), procLogTail))
	case <-time.After(procStartTimeout):
		c.t.Fatalf("%s not ready after %s\n%s", p.name, procStartTimeout, logTail(p.log.String(), procLogTail))
	}
	return nil
}

// kill sends SIGKILL to p and waits until it is gone, so that its state
// directory lock and its port are free when this returns.
func (p *proc) kill() { p.stop(syscall.SIGKILL) }

// term sends SIGTERM to p, a graceful stop, and waits until it has exited.
func (p *proc) term() { p.stop(syscall.SIGTERM) }

// stop sends sig to p, marking its exit as asked for, and waits until it
// is gone.
func (p *proc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	select {
	case <-exited:
	default:
		p.killed = true
		cmd.Process.Signal(sig)
		fmt.Fprintf(p.log, "=== %s: %s at %s\n", p.name, sigName(sig), time.Now().Format("15:04:05.000"))
	}
	p.mu.Unlock()
	<-exited
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// died reports whether p exited without being killed by the test, with the
// error it exited with.
func (p *proc) died() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.killed {
		return false, nil
	}
	select {
	case <-p.exited:
		return true, p.waitErr
	default:
		return false, nil
	}
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// cleanup kills every child still running and prints their logs if the test
// failed.
func (c *procCluster) cleanup() {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	// Instances first, so that they do not log the broker's death.
	for _, p := range slices.Backward(procs) {
		p.kill()
	}
	if logDir := os.Getenv("EDDY_TEST_LOGDIR"); logDir != "" {
		for _, p := range procs {
			f := filepath.Join(logDir, strings.NewReplacer("/", "_").Replace(c.t.Name())+"-"+p.name+".log")
			if err := os.WriteFile(f, []byte(p.log.String()), 0o644); err != nil {
				c.t.Errorf("keeping the log of %s: %v", p.name, err)
			}
		}
		c.t.Logf("logs kept in %s", logDir)
	}
	if !c.t.Failed() {
		return
	}
	for _, p := range procs {
		c.t.Logf("log of %s (last %d KiB):\n%s", p.name, procLogTail>>10, logTail(p.log.String(), procLogTail))
	}
}

func logTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[...]\n" + s[len(s)-n:]
}

// procInstance is a demo instance process with a fixed state directory and
// HTTP address, kept across restarts.
type procInstance struct {
	*proc
	c        *procCluster
	http     string // host:port of the query API
	stateDir string
	id       string // process ID, from the ready line
}

var instanceReady = regexp.MustCompile(`^instance (\S+) serving on http://(\S+)$`)

// startInstance starts `demo instance` with one standby per task and the
// given guarantee ("exactly-once" or "at-least-once").
func (c *procCluster) startInstance(name, guarantee string) *procInstance {
	c.t.Helper()
	in := &procInstance{c: c, http: freePort(c.t), stateDir: filepath.Join(c.dir, name)}
	in.proc = c.newProc(name, "instance", "--brokers", c.addr, "--state-dir", in.stateDir,
		"--http", in.http, "--standbys", "1", "--guarantee", guarantee)
	in.restart()
	return in
}

// restart starts the instance again on its state directory and port.
func (in *procInstance) restart() {
	in.c.t.Helper()
	m := in.c.start(in.proc, instanceReady)
	if in.id != "" && m[1] != in.id {
		in.c.t.Fatalf("%s came back as process %s, was %s: the state directory was not kept", in.name, m[1], in.id)
	}
	in.id = m[1]
	require.Equal(in.c.t, in.http, m[2], "%s serves where it was told to", in.name)
}

// produceFile runs `demo produce` on a file of lines and waits for it to
// report that every line was acknowledged.
func (c *procCluster) produceFile(ctx context.Context, file string) error {
	cmd := exec.CommandContext(ctx, c.bin, "produce", "--brokers", c.addr, "--file", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("demo produce %s: %w\n%s", filepath.Base(file), err, out)
	}
	return nil
}

// writeLines writes lines to a new file in the cluster's directory.
func (c *procCluster) writeLines(name string, lines []string) string {
	c.t.Helper()
	f := filepath.Join(c.dir, name)
	require.NoError(c.t, os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return f
}

// requireAlive fails the test if an instance exited on its own.
func requireAlive(t *testing.T, insts ...*procInstance) {
	t.Helper()
	for _, in := range insts {
		if died, err := in.died(); died {
			t.Fatalf("instance %s exited on its own: %v\n%s", in.name, err, logTail(in.log.String(), procLogTail))
		}
	}
}

// procHTTP queries the instances' HTTP API.
type procHTTP struct{ hc *http.Client }

func newProcHTTP(t *testing.T) *procHTTP {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &procHTTP{hc: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// keyAnswer is the query API's answer to a key lookup, success or refusal.
type keyAnswer struct {
	Status   int    `json:"-"`
	Value    *int64 `json:"value"`
	ServedBy *struct {
		Host string `json:"host"`
		Role string `json:"role"`
		Lag  int64  `json:"lag"`
	} `json:"served_by"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Tried  []struct {
		Host   string `json:"host"`
		Reason string `json:"reason"`
	} `json:"tried"`
}

// reasons summarizes why a refusal was given: its own reason and those of
// each host tried, e.g. "not_available[rebalancing suspect]".
func (a keyAnswer) reasons() string {
	var rs []string
	for _, t := range a.Tried {
		rs = append(rs, t.Reason)
	}
	return fmt.Sprintf("%s%v", a.Reason, rs)
}

// count looks word up through addr. A 404 from a replica is a count of 0;
// any other non-200 answer is an error naming the reason.
func (h *procHTTP) count(addr, word, staleness string) (int64, keyAnswer, error) {
	u := "http://" + addr + "/v1/stores/" + fixture.CountsStore + "/keys/" + url.PathEscape(word) +
		"?staleness=" + url.QueryEscape(staleness) + "&route=true"
	resp, err := h.hc.Get(u)
	if err != nil {
		return 0, keyAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, keyAnswer{}, err
	}
	a := keyAnswer{Status: resp.StatusCode}
	if err := json.Unmarshal(body, &a); err != nil {
		return 0, a, fmt.Errorf("HTTP %d, undecodable %q: %w", resp.StatusCode, body, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && a.ServedBy != nil:
		return 0, a, nil
	case resp.StatusCode != http.StatusOK || a.Value == nil || a.ServedBy == nil:
		return 0, a, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return *a.Value, a, nil
}

// healthy reports whether addr's /healthz answers 200: the routing table is
// known and no local replica is restoring.
func (h *procHTTP) healthy(addr string) bool {
	resp, err := h.hc.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// routing is an instance's routing table for the counts store: the hosts
// of the group and the active host of each partition.
type routing struct {
	hosts   []string // sorted
	actives map[int32]string
}

func (r routing) String() string { return fmt.Sprintf("hosts %v, actives %v", r.hosts, r.actives) }

func (r routing) equal(o routing) bool {
	return slices.Equal(r.hosts, o.hosts) && maps.Equal(r.actives, o.actives)
}

// routing fetches addr's routing table.
func (h *procHTTP) routing(addr string) (routing, error) {
	resp, err := h.hc.Get("http://" + addr + "/v1/metadata")
	if err != nil {
		return routing{}, err
	}
	defer resp.Body.Close()
	var m struct {
		Instances []struct {
			Host   string `json:"host"`
			Active []struct {
				Store     string `json:"store"`
				Partition int32  `json:"partition"`
			} `json:"active"`
		} `json:"instances"`
	}
	if resp.StatusCode != http.StatusOK {
		return routing{}, fmt.Errorf("%s: HTTP %d", addr, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return routing{}, err
	}
	r := routing{actives: make(map[int32]string)}
	for _, in := range m.Instances {
		r.hosts = append(r.hosts, in.Host)
		for _, a := range in.Active {
			if a.Store == fixture.CountsStore {
				r.actives[a.Partition] = in.Host
			}
		}
	}
	slices.Sort(r.hosts)
	return r, nil
}

// settledProblem returns why the instances do not yet form a settled
// group, or "": every one healthy (routing table known, nothing
// restoring), all with the same routing table, naming all of them as hosts
// and an active for each partition.
func settledProblem(h *procHTTP, partitions int, insts ...*procInstance) string {
	var first routing
	for i, in := range insts {
		if !h.healthy(in.http) {
			return in.name + " not healthy"
		}
		r, err := h.routing(in.http)
		if err != nil {
			return err.Error()
		}
		if i == 0 {
			first = r
			continue
		}
		if !r.equal(first) {
			return fmt.Sprintf("%s sees %s, %s sees %s", insts[0].name, first, in.name, r)
		}
	}
	if len(first.hosts) != len(insts) || len(first.actives) != partitions {
		return "routing table: " + first.String()
	}
	return ""
}

// waitSettled waits until the instances form a settled group.
func waitSettled(t *testing.T, h *procHTTP, timeout time.Duration, partitions int, insts ...*procInstance) {
	t.Helper()
	fixture.WaitFor(t, timeout, "the group to settle", func() (bool, string) {
		requireAlive(t, insts...)
		msg := settledProblem(h, partitions, insts...)
		return msg == "", msg
	})
}

// snapshotCounts queries every word through the instances (spread over
// them, route=true) and returns the counts that came back and the failures.
func snapshotCounts(h *procHTTP, words []string, staleness string, insts ...*procInstance) (map[string]int64, map[string]error) {
	got := make(map[string]int64, len(words))
	failed := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				n, _, err := h.count(insts[i%len(insts)].http, words[i], staleness)
				mu.Lock()
				if err != nil {
					failed[words[i]] = err
				} else {
					got[words[i]] = n
				}
				mu.Unlock()
			}
		})
	}
	for i := range words {
		next <- i
	}
	close(next)
	wg.Wait()
	return got, failed
}

// chaosSeed returns the seed of a chaos schedule: EDDY_CHAOS_SEED when set,
// so that a failing schedule can be replayed, else a fresh one.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("EDDY_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "EDDY_CHAOS_SEED")
		return seed
	}
	return rand.Uint64()
}

// startInstanceWith starts `demo instance` with one standby per task, the
// guarantee and the extra flags given (such as --session-timeout).
func (c *procCluster) startInstanceWith(name, guarantee string, extra ...string) *procInstance {
	c.t.Helper()
	in := &procInstance{c: c, http: freePort(c.t), stateDir: c.dir + "/" + name}
	args := append([]string{"instance", "--brokers", c.addr, "--state-dir", in.stateDir,
		"--http", in.http, "--standbys", "1", "--guarantee", guarantee}, extra...)
	in.proc = c.newProc(name, args...)
	in.restart()
	return in
}
