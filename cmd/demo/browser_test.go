package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// browserPage is a page open in headless Chromium, driven over the
// DevTools protocol on a pair of pipes (--remote-debugging-pipe: commands
// in on the browser's descriptor 3, answers and events out on 4, each a
// JSON message ended by a NUL byte). Unlike --dump-dom, whose virtual time
// stands still while a fetch is open, it lets a page with an open event
// stream run in real time and be read at any moment.
type browserPage struct {
	t       *testing.T
	cmd     *exec.Cmd
	toPage  *os.File
	fromBr  *bufio.Reader
	next    int
	session string
	// exited is closed once the browser has exited, with exitErr.
	exited  chan struct{}
	exitErr error
}

// openPage starts Chromium and loads u in a page of its own. The browser
// is stopped when the test ends.
func openPage(t *testing.T, bin, u string) *browserPage {
	t.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--disable-breakpad", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.ExtraFiles = []*os.File{inR, outW}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	inR.Close()
	outW.Close()
	p := &browserPage{t: t, cmd: cmd, toPage: inW, fromBr: bufio.NewReader(outR), exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		inW.Close()
		cmd.Process.Kill()
		<-p.exited
		outR.Close()
	})
	var target struct{ TargetID string }
	p.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct{ SessionID string }
	p.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	p.session = attached.SessionID
	p.call(p.session, "Page.navigate", map[string]any{"url": u}, nil)
	return p
}

// call sends one command and decodes its result into out (if not nil),
// skipping the events that come before the answer.
func (p *browserPage) call(session, method string, params any, out any) {
	p.t.Helper()
	p.next++
	msg := map[string]any{"id": p.next, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	require.NoError(p.t, err)
	_, err = p.toPage.Write(append(b, 0))
	p.check(err, method)
	for {
		raw, err := p.fromBr.ReadBytes(0)
		p.check(err, method)
		var ans struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		require.NoError(p.t, json.Unmarshal(raw[:len(raw)-1], &ans))
		if ans.ID != p.next {
			continue // an event, or a late answer
		}
		require.Nil(p.t, ans.Error, "chromium: %s", method)
		if out != nil {
			require.NoError(p.t, json.Unmarshal(ans.Result, out))
		}
		return
	}
}

// check fails the test on an error talking to the browser, or skips it if
// the browser died of a signal, as dumpDOM does: a browser that crashes on
// a loaded machine says nothing about the page.
func (p *browserPage) check(err error, method string) {
	p.t.Helper()
	if err == nil {
		return
	}
	state := "still running"
	select {
	case <-p.exited:
		state = fmt.Sprintf("exited: %v", p.exitErr)
		var exitErr *exec.ExitError
		if errors.As(p.exitErr, &exitErr) && !exitErr.Exited() {
			p.t.Skipf("Chromium died (%v) during %s: skipping the real-browser check, which needs a browser that runs on this machine", p.exitErr, method)
		}
	case <-time.After(5 * time.Second):
	}
	require.NoError(p.t, err, "chromium: %s (browser %s)", method, state)
}

// text evaluates a JavaScript expression in the page and returns its
// value as a string.
func (p *browserPage) text(expr string) string {
	p.t.Helper()
	var res struct {
		Result struct {
			Value any
		}
	}
	p.call(p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(res.Result.Value)
}

// watchLine is a line of the page's watch log: the count, its position,
// the host and role of the replica that served it.
var watchLine = regexp.MustCompile(`(\d+|\(deleted\))(?: \(current\))?(?: \(earlier changes skipped\))? at position (-?\d+), served by (\S+) \((\w+)\)`)

// The status page's "watch a word" in a real browser: opened with ?watch=,
// it shows the word's count as it changes, each line naming the replica
// that served it, and goes on showing it after the instance serving it is
// killed, served by a replica that survived, without a count shown twice
// or skipped.
func TestWatchPanelInABrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("Chromium is not installed (looked for chromium, chromium-browser, google-chrome and google-chrome-stable on PATH): " +
			"skipping the real-browser test of the status page's watch panel; install it (apt-get install chromium) to run it")
	}
	c := startTestCluster(t)
	ctx := testCtx(t)
	word := "browserwatch"
	// The page is served by the instance that does not hold the word's
	// active, which the test kills: the page's own instance routes the
	// watch to it, then resumes it elsewhere.
	active := c.activeOf(t, word)
	page := c.ins[1-active]
	p := openPage(t, bin, "http://"+page.addr+"/?watch="+word)
	produce := func(n int) {
		t.Helper()
		_, stderr, err := runCmd(ctx, strings.Repeat(word+"\n", n), "produce", "--brokers", strings.Join(c.brokers, ","))
		require.NoError(t, err, stderr)
	}
	logText := `document.getElementById("watch-log").innerText`
	shows := func(count int) string {
		t.Helper()
		var log string
		waitUntil(t, 60*time.Second, fmt.Sprintf("the page showing count %d", count), func() (bool, string) {
			shown := p.text(`document.getElementById("watch-count").textContent`)
			log = p.text(logText) // after the count: it has the line that count came with
			return shown == fmt.Sprintf("%s: %d", word, count), log
		})
		return log
	}
	// Started from now with the current value: the word is absent.
	waitUntil(t, 30*time.Second, "the watch starting", func() (bool, string) {
		return strings.Contains(p.text(logText), "(current)"), p.text(`document.getElementById("watch-count").textContent`)
	})
	produce(3)
	log := shows(3)
	require.Regexp(t, `3 at position \d+, served by `+c.ins[active].addr+` \(active\)`, log)

	c.ins[active].kill()
	produce(2)
	log = shows(5)
	// Newest first: "<time> <count>[ (current)] at position P, served by H
	// (role)". A commit may carry several counts of the word as one (the
	// store's cache), so counts may be skipped but never repeated nor
	// shown out of order.
	lines := watchLine.FindAllStringSubmatch(log, -1)
	require.GreaterOrEqual(t, len(lines), 3, "the current value, a count before the kill and one after:\n%s", log)
	require.Equal(t, "5", lines[0][1], log)
	require.NotEqual(t, c.ins[active].addr, lines[0][3], "count 5 served after the kill by the instance that was killed")
	require.Equal(t, "(deleted)", lines[len(lines)-1][1], "the watch starts with the current value, absent:\n%s", log)
	for i := 1; i < len(lines)-1; i++ {
		newer, _ := strconv.Atoi(lines[i-1][1])
		older, _ := strconv.Atoi(lines[i][1])
		require.Less(t, older, newer, "counts newest first, each once:\n%s", log)
		newerPos, _ := strconv.ParseInt(lines[i-1][2], 10, 64)
		olderPos, _ := strconv.ParseInt(lines[i][2], 10, 64)
		require.Less(t, olderPos, newerPos, "positions newest first:\n%s", log)
	}
	require.Contains(t, log, "served by "+page.addr+" (active)", "the survivor's active served the counts after the kill:\n%s", log)
}
