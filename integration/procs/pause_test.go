package procs

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
)

// signal sends sig to the current incarnation of p.
func (p *proc) signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// stopped reports whether every thread of p's process is stopped (state T
// in /proc): kill returns once the signal is sent, and a thread running on
// another CPU may still serve a request before it stops.
func (p *proc) stopped() (bool, string) {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err.Error()
	}
	for _, tk := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, tk.Name(), "stat"))
		if err != nil {
			return false, err.Error()
		}
		// The state follows the command name, which is in parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if state := strings.Fields(rest)[0]; state != "T" {
			return false, fmt.Sprintf("thread %s in state %s", tk.Name(), state)
		}
	}
	return true, ""
}

// localAnswer is what an instance answers for a key from its own replica
// (route=false).
type localAnswer struct {
	status   int
	role     string
	contact  *int64 // served_by.contact_ms_ago
	err      string
	transErr error
}

func (a localAnswer) String() string {
	if a.transErr != nil {
		return a.transErr.Error()
	}
	c := "null"
	if a.contact != nil {
		c = fmt.Sprint(*a.contact)
	}
	return fmt.Sprintf("HTTP %d role %q contact_ms_ago %s %s", a.status, a.role, c, a.err)
}

// activeAnswer reports whether a is an answer as the partition's active.
func (a localAnswer) activeAnswer() bool { return a.status == 200 && a.role == "active" }

func (h *procHTTP) local(addr, word, staleness string) localAnswer {
	resp, err := h.hc.Get("http://" + addr + "/v1/stores/" + fixture.CountsStore + "/keys/" + url.PathEscape(word) +
		"?staleness=" + url.QueryEscape(staleness) + "&route=false")
	if err != nil {
		return localAnswer{transErr: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var w struct {
		ServedBy *struct {
			Role    string `json:"role"`
			Contact *int64 `json:"contact_ms_ago"`
		} `json:"served_by"`
		Error string `json:"error"`
	}
	a := localAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(body, &w); err != nil {
		a.err = string(body)
		return a
	}
	a.err = w.Error
	if w.ServedBy != nil {
		a.role, a.contact = w.ServedBy.Role, w.ServedBy.Contact
	}
	return a
}

// pausedQueries is how many queries the pause test sends a stopped
// instance: enough that some are served on resuming before its group client
// hears it was dropped and closes its tasks, which is when an instance that
// took its tasks for fresh would answer as their active.
const pausedQueries = 64

// issue 29 item 2: an instance paused (SIGSTOP) while the group gives its
// partition to another instance must not answer as that partition's
// active when it resumes (SIGCONT): from the first query on it no longer
// vouches for its last contact with the group, which is as old as the
// pause. It refuses until it has rejoined, and never answers as the active
// while the other instance does.
func TestMultiProcessPausedActiveDoesNotAnswerAsActiveOnResume(t *testing.T) {
	const partitions = 2
	c := newProcCluster(t, partitions)
	h := newProcHTTP(t)
	a := c.startInstanceWith("a", "at-least-once", "--session-timeout", "3s")
	b := c.startInstanceWith("b", "at-least-once", "--session-timeout", "3s")
	waitSettled(t, h, fixture.SettleTimeout, partitions, a, b)

	var words []string
	for i := range 20 {
		words = append(words, fmt.Sprintf("word%02d", i))
	}
	var lines []string
	for range 5 {
		lines = append(lines, strings.Join(words, " "))
	}
	require.NoError(t, c.produceFile(t.Context(), c.writeLines("text.txt", lines)))
	var word string
	fixture.WaitFor(t, fixture.SettleTimeout, "a word counted by a as its active", func() (bool, string) {
		for _, w := range words {
			if ans := h.local(a.http, w, "active"); ans.activeAnswer() {
				word = w
				return true, ""
			}
		}
		return false, "a answers no word as an active"
	})

	// Queries sent while a is stopped wait in its sockets and are the
	// first thing it serves when it resumes, racing its group client's
	// first heartbeat. Warm connections make them land at once.
	hq := &procHTTP{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pausedQueries}, Timeout: fixture.SettleTimeout}}
	t.Cleanup(hq.hc.CloseIdleConnections)
	var warm sync.WaitGroup
	for range pausedQueries {
		warm.Go(func() { hq.local(a.http, word, "any") })
	}
	warm.Wait()

	require.NoError(t, a.signal(syscall.SIGSTOP))
	paused := time.Now()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			a.signal(syscall.SIGCONT)
		}
	})
	fixture.WaitFor(t, 10*time.Second, "a stopped", a.stopped)
	answers := make(chan localAnswer, pausedQueries)
	for range pausedQueries {
		go func() { answers <- hq.local(a.http, word, "any") }()
	}
	fixture.WaitFor(t, fixture.SettleTimeout, "b answering "+word+" as its active", func() (bool, string) {
		ans := h.local(b.http, word, "active")
		return ans.activeAnswer(), ans.String()
	})
	require.NoError(t, a.signal(syscall.SIGCONT))
	resumed = true
	pause := time.Since(paused)

	statuses := map[string]int{}
	for range pausedQueries {
		ans := <-answers
		require.NoError(t, ans.transErr)
		statuses[fmt.Sprintf("%d %s", ans.status, ans.role)]++
		require.False(t, ans.activeAnswer(), "a answered as the active right after a pause of %s: %s", pause, ans)
		if ans.status == 200 {
			require.NotNil(t, ans.contact)
			require.GreaterOrEqual(t, time.Duration(*ans.contact)*time.Millisecond, pause-time.Second,
				"its contact is at least as old as the pause: %s", ans)
		}
	}
	t.Logf("paused %s; a's answers for %q to the queries sent meanwhile: %v", pause.Round(time.Millisecond), word, statuses)

	// Until a has rejoined and the group settled, a never answers as the
	// active while b does.
	both, asked := 0, 0
	fixture.WaitFor(t, fixture.SettleTimeout, "the group to settle after the pause", func() (bool, string) {
		requireAlive(t, a, b)
		for range 10 {
			ansA := h.local(a.http, word, "active")
			asked++
			if ansA.activeAnswer() && h.local(b.http, word, "active").activeAnswer() {
				both++
			}
		}
		msg := settledProblem(h, partitions, a, b)
		return msg == "", msg
	})
	t.Logf("after the pause: %d queries of a, %d answered as the active while b did", asked, both)
	require.Zero(t, both, "a answered as the active while b did")
}

// issue 29 item 2, for standbys: an instance paused (SIGSTOP) while the
// group gives every task to the other instance — so that the partition it
// followed as a standby has no standby left — must not answer as that
// standby when it resumes (SIGCONT): its contact with the group is as old
// as the pause, past the session timeout, so it refuses (as a partition on
// the move) until it has rejoined, and any answer it gives as a standby
// vouches for a recent contact.
func TestMultiProcessPausedStandbyDoesNotAnswerAsStandbyOnResume(t *testing.T) {
	const partitions = 2
	const session = 3 * time.Second
	c := newProcCluster(t, partitions)
	h := newProcHTTP(t)
	a := c.startInstanceWith("a", "at-least-once", "--session-timeout", session.String())
	b := c.startInstanceWith("b", "at-least-once", "--session-timeout", session.String())
	waitSettled(t, h, fixture.SettleTimeout, partitions, a, b)

	var words []string
	for i := range 20 {
		words = append(words, fmt.Sprintf("word%02d", i))
	}
	var lines []string
	for range 5 {
		lines = append(lines, strings.Join(words, " "))
	}
	require.NoError(t, c.produceFile(t.Context(), c.writeLines("text.txt", lines)))
	// followed is a word of the partition a follows as a standby; ran one
	// of the partition a runs as its active, which b takes over.
	var followed, ran string
	fixture.WaitFor(t, fixture.SettleTimeout, "a word a answers as a standby and one as its active", func() (bool, string) {
		followed, ran = "", ""
		for _, w := range words {
			switch ans := h.local(a.http, w, "any"); {
			case ans.status == 200 && ans.role == "standby" && followed == "":
				followed = w
			case ans.activeAnswer() && ran == "":
				ran = w
			}
		}
		return followed != "" && ran != "", fmt.Sprintf("standby word %q, active word %q", followed, ran)
	})

	hq := &procHTTP{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pausedQueries}, Timeout: fixture.SettleTimeout}}
	t.Cleanup(hq.hc.CloseIdleConnections)
	var warm sync.WaitGroup
	for range pausedQueries {
		warm.Go(func() { hq.local(a.http, followed, "any") })
	}
	warm.Wait()

	require.NoError(t, a.signal(syscall.SIGSTOP))
	paused := time.Now()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			a.signal(syscall.SIGCONT)
		}
	})
	fixture.WaitFor(t, 10*time.Second, "a stopped", a.stopped)
	answers := make(chan localAnswer, pausedQueries)
	for range pausedQueries {
		go func() { answers <- hq.local(a.http, followed, "any") }()
	}
	fixture.WaitFor(t, fixture.SettleTimeout, "b answering "+ran+" as its active", func() (bool, string) {
		ans := h.local(b.http, ran, "active")
		return ans.activeAnswer(), ans.String()
	})
	require.NoError(t, a.signal(syscall.SIGCONT))
	resumed = true
	pause := time.Since(paused)

	statuses := map[string]int{}
	var served []localAnswer
	for range pausedQueries {
		ans := <-answers
		require.NoError(t, ans.transErr)
		statuses[fmt.Sprintf("%d %s", ans.status, ans.role)]++
		served = append(served, ans)
	}
	t.Logf("paused %s; a's answers for %q to the queries sent meanwhile: %v", pause.Round(time.Millisecond), followed, statuses)
	require.Positive(t, statuses["503 "], "a refused none of the queries served on resuming after a pause of %s: %v", pause, statuses)
	for _, ans := range served {
		if ans.status == 200 && ans.role == "standby" {
			require.NotNil(t, ans.contact, "a standby's answer says how recent its group contact is: %s", ans)
			require.Less(t, time.Duration(*ans.contact)*time.Millisecond, session,
				"a answered as a standby right after a pause of %s, on a contact older than its session: %s", pause, ans)
		}
	}
}
