package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
)

// waitUntil polls cond until it holds, failing the test with cond's last
// explanation when the deadline passes first.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, why)
		}
		<-tick.C
	}
}

// httpGet fetches a URL and returns its status, Content-Type and body.
func httpGet(t *testing.T, u string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// testCluster is an embedded broker and two word-count instances with one
// standby per task, serving HTTP on loopback ports, that have counted
// text.
type testCluster struct {
	ins     []*instance
	brokers []string
	want    map[string]int64 // the count of every word produced
	// perMinute is every word's count per minute (by window start, in
	// Unix milliseconds), from the times the produced records carry.
	perMinute map[string]map[int64]int64
}

func startTestCluster(t *testing.T) *testCluster {
	ctx := testCtx(t)
	b := startBroker(t)
	c := &testCluster{want: map[string]int64{}, brokers: b.Addrs()}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 {
		in, err := startInstance(ctx, instanceOptions{
			brokers: b.Addrs(), stateDir: t.TempDir(), http: "127.0.0.1:0", app: "wordcount",
			standbys: 1, logger: logger, sessionTimeout: time.Second,
		})
		require.NoError(t, err)
		t.Cleanup(func() { in.close() })
		c.ins = append(c.ins, in)
	}

	// Settled: both instances hold an active and a standby of every
	// partition between them, and report no restoration.
	waitUntil(t, 20*time.Second, "the cluster settles", func() (bool, string) {
		all, err := fetchCluster(ctx, http.DefaultClient, c.ins[0].addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		v := all.of(countsStore)
		if len(v.Instances) != 2 {
			return false, fmt.Sprintf("%d instances", len(v.Instances))
		}
		var actives, standbys int
		for _, in := range v.Instances {
			actives += len(in.Active)
			standbys += len(in.Standby)
			if in.Error != "" || len(in.Lags) != len(in.Active)+len(in.Standby) {
				return false, fmt.Sprintf("%s reports %v (error %q)", in.Host, in.Lags, in.Error)
			}
			for _, l := range in.Lags {
				if l.Role == "restoring" {
					return false, fmt.Sprintf("%s restores %s/%d", in.Host, l.Store, l.Partition)
				}
			}
		}
		n := int(v.Partitions[countsStore])
		return n > 0 && actives == n && standbys == n, fmt.Sprintf("%d actives, %d standbys of %d partitions", actives, standbys, n)
	})

	// Two letters JavaScript's toLowerCase lower-cases unlike the counter:
	// the page must still find these words (testPageInChromium).
	lines := append(generateLines(7, 300), "ΟΔΟΣ İZMİR ΟΔΟΣ")
	for _, l := range lines {
		for _, w := range words(l) {
			c.want[w]++
		}
	}
	_, stderr, err := runCmd(ctx, strings.Join(lines, "\n"), "produce", "--brokers", strings.Join(b.Addrs(), ","))
	require.NoError(t, err, stderr)
	c.perMinute = minuteCounts(ctx, t, b.Addrs(), len(lines))

	// Counted: every word's count is exact on its active.
	waitUntil(t, 20*time.Second, "the counts are exact", func() (bool, string) {
		for w, n := range c.want {
			got, err := lookup(c.ins[c.activeOf(t, w)], w)
			if err != nil || got != n {
				return false, fmt.Sprintf("%s: %d (%v), want %d", w, got, err, n)
			}
		}
		return true, ""
	})
	return c
}

// minuteCounts reads the n lines of the input topic and counts their
// words per minute of the records' times: what counts-per-minute must
// hold. The producer leaves record times to the client (the time of
// producing), so they can only be known by reading them back.
func minuteCounts(ctx context.Context, t *testing.T, brokers []string, n int) map[string]map[int64]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(inputTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	out := map[string]map[int64]int64{}
	for read := 0; read < n; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d lines", read, n)
		require.NoError(t, fs.Err0())
		for _, r := range fs.Records() {
			read++
			start := r.Timestamp.UnixMilli() - r.Timestamp.UnixMilli()%time.Minute.Milliseconds()
			for _, w := range words(string(r.Value)) {
				if out[w] == nil {
					out[w] = map[int64]int64{}
				}
				out[w][start]++
			}
		}
	}
	return out
}

// activeOf returns the index of the instance holding the active of a
// word's partition. The assignor decides where actives go (a sticky one
// may leave them all on the instance that started first), so tests pick
// which instance to ask from this.
func (c *testCluster) activeOf(t *testing.T, word string) int {
	for i, in := range c.ins {
		part, err := in.app.Queries().KeyPartition(countsStore, []byte(word))
		require.NoError(t, err)
		for _, r := range in.app.Queries().LocalReplicas() {
			if r.Store == countsStore && r.Partition == part && r.Role.String() == "active" {
				return i
			}
		}
	}
	t.Fatalf("no instance holds the active of %q", word)
	return -1
}

// queryCmd runs the query command like runCmd, again while its answer is
// a refusal (HTTP 503, "retry shortly"), for up to 20 s: a probing
// rebalance may still move a partition's active after the cluster
// settled, and a refusal then is the right answer, not the one the test
// is after.
func queryCmd(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		stdout, stderr, err = runCmd(ctx, "", args...)
		if err == nil || !strings.Contains(err.Error()+stderr, "(HTTP 503)") || time.Now().After(deadline) {
			return stdout, stderr, err
		}
		select {
		case <-ctx.Done():
			return stdout, stderr, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestMultiProcessCommands runs query, status, the status page and the
// metrics endpoint against a real two-instance cluster in this process.
func TestMultiProcessCommands(t *testing.T) {
	start := time.Now()
	c := startTestCluster(t)
	t.Logf("cluster settled and counted in %s", time.Since(start).Round(time.Millisecond))
	ctx := testCtx(t)
	// x holds the active of word's partition, y a standby (two
	// instances, one standby per task: y holds every partition in some
	// role, so it can answer anything locally with staleness=any).
	var word string
	for w := range c.want {
		word = w
		break
	}
	x, y := c.ins[c.activeOf(t, word)], c.ins[1-c.activeOf(t, word)]
	want := c.want[word]

	t.Run("query answered locally and forwarded", func(t *testing.T) {
		for _, tc := range []struct {
			ask, host string
		}{{x.addr, x.addr}, {y.addr, x.addr}} {
			stdout, stderr, err := queryCmd(ctx, t, "query", "--http", tc.ask, word)
			require.NoError(t, err, stderr)
			require.Contains(t, stdout, fmt.Sprintf("%s: %d\n", word, want))
			require.Contains(t, stdout, "served by "+tc.host+": active replica of counts partition ")
		}
		// Words may be given in any case, flags after them. With any
		// staleness y answers from its own replica.
		stdout, _, err := queryCmd(ctx, t, "query", strings.ToUpper(word), "--http", y.addr, "--staleness", "any")
		require.NoError(t, err)
		require.Regexp(t, `^`+word+`: \d+\nserved by `+regexp.QuoteMeta(y.addr)+`: (active|standby) replica`, stdout)

		stdout, _, err = queryCmd(ctx, t, "query", "--http", x.addr, "--json", word)
		require.NoError(t, err)
		var ka keyAnswer
		require.NoError(t, json.Unmarshal([]byte(stdout), &ka))
		require.Equal(t, strconv.FormatInt(want, 10), string(ka.Value))
		require.Equal(t, x.addr, ka.ServedBy.Host)

		stdout, _, err = queryCmd(ctx, t, "query", "--http", x.addr, "zzyzx")
		require.NoError(t, err)
		require.Contains(t, stdout, "zzyzx: not counted")
	})

	t.Run("query windows", func(t *testing.T) {
		// Every word's counts per minute are exact, asked of either
		// instance (which routes to the active). The totals are exact
		// already; the minutes are counted in the same tasks and
		// commits, but are waited for rather than assumed.
		answer := func(i int, w string) (map[int64]int64, windowsAnswer, string) {
			ask := c.ins[i%2].addr
			stdout, stderr, err := queryCmd(ctx, t, "query", "--http", ask, "--windows", "--json", w)
			require.NoError(t, err, stderr)
			var wa windowsAnswer
			require.NoError(t, json.Unmarshal([]byte(stdout), &wa), stdout)
			got := map[int64]int64{}
			for _, win := range wa.Windows {
				start, err := time.Parse(time.RFC3339, win.Start)
				require.NoError(t, err)
				end, err := time.Parse(time.RFC3339, win.End)
				require.NoError(t, err)
				require.Equal(t, time.Minute, end.Sub(start), "a one-minute window: %s", stdout)
				n, err := strconv.ParseInt(string(win.Value), 10, 64)
				require.NoError(t, err)
				got[start.UnixMilli()] = n
			}
			return got, wa, stdout
		}
		waitUntil(t, 20*time.Second, "the counts per minute are exact", func() (bool, string) {
			for i, w := range slices.Sorted(maps.Keys(c.perMinute)) {
				if got, _, out := answer(i, w); !maps.Equal(got, c.perMinute[w]) {
					return false, fmt.Sprintf("%s: want %v, got %s", w, c.perMinute[w], out)
				}
			}
			return true, ""
		})
		_, wa, _ := answer(0, word)
		require.Equal(t, x.addr, wa.ServedBy.Host, "routed to the active")

		// The human answer lists the minutes, oldest first, and who
		// answered.
		stdout, stderr, err := queryCmd(ctx, t, "query", "--http", y.addr, "--windows", word)
		require.NoError(t, err, stderr)
		var b strings.Builder
		fmt.Fprintf(&b, "%s per minute:\n", word)
		for _, start := range slices.Sorted(maps.Keys(c.perMinute[word])) {
			fmt.Fprintf(&b, "  %s - %s  %d\n", time.UnixMilli(start).UTC().Format("2006-01-02T15:04:05.000Z"),
				time.UnixMilli(start+60_000).UTC().Format("2006-01-02T15:04:05.000Z"), c.perMinute[word][start])
		}
		fmt.Fprintf(&b, "served by %s: active replica of counts-per-minute partition ", x.addr)
		require.True(t, strings.HasPrefix(stdout, b.String()), "got\n%s\nwant prefix\n%s", stdout, b.String())

		stdout, _, err = queryCmd(ctx, t, "query", "--http", x.addr, "--windows", "zzyzx")
		require.NoError(t, err)
		require.Contains(t, stdout, "zzyzx: no counts in the minutes counts-per-minute keeps")
	})

	t.Run("status", func(t *testing.T) {
		stdout, stderr, err := runCmd(ctx, "", "status", "--http", y.addr)
		require.NoError(t, err, stderr)
		out := squash(stdout)
		require.Contains(t, out, "cluster as seen from "+y.addr+": 2 instances; stores counts (3 partitions)\n"+
			"(not shown: counts-per-minute, counts-per-minute-final, counts-per-minute-final-pending, in the same tasks)")
		rows := regexp.MustCompile(`(?m)^counts/\d .*$`).FindAllString(out, -1)
		require.Len(t, rows, 3, stdout)
		for _, r := range rows {
			require.Equal(t, 1, strings.Count(r, "active"), "one active per partition: %s", r)
			require.Equal(t, 1, strings.Count(r, "standby lag "), "one standby per partition: %s", r)
		}
		for _, in := range c.ins {
			require.Regexp(t, `(?m)^`+regexp.QuoteMeta(in.addr)+` [\d,-]+ [\d,-]+ - ok`, out)
		}
	})

	t.Run("tasks", func(t *testing.T) {
		stdout, stderr, err := runCmd(ctx, "", "tasks", "--http", y.addr, "--all")
		require.NoError(t, err, stderr)
		out := squash(stdout)
		// Each of the 3 counting tasks has an active and a standby, of its
		// 4 stores each, over the two instances.
		for _, role := range []string{"active", "standby"} {
			rows := regexp.MustCompile(`(?m)^\S+ 1_\d \d \S+ counts/\d `+role+` \d+ \d+ [\d.]+ (B|KiB|MiB) \d+$`).FindAllString(out, -1)
			require.Len(t, rows, 3, "a %s counts store per partition:\n%s", role, stdout)
		}
		for _, in := range c.ins {
			require.Contains(t, out, "\n"+in.addr+" ", "a line for every instance")
		}
	})

	t.Run("status page", func(t *testing.T) {
		status, ctype, body := httpGet(t, "http://"+y.addr+"/")
		require.Equal(t, 200, status)
		require.Equal(t, "text/html; charset=utf-8", ctype)
		require.Contains(t, body, "<title>Eddy word count</title>")
		require.Contains(t, body, `fetch("cluster.json"`)

		status, ctype, body = httpGet(t, "http://"+y.addr+"/cluster.json")
		require.Equal(t, 200, status)
		require.Equal(t, "application/json", ctype)
		var pv pageView
		require.NoError(t, json.Unmarshal([]byte(body), &pv))
		require.Len(t, pv.Instances, 2)
		require.Len(t, pv.Rows, 3)

		// Both instances sample their input; y gathers them (and keeps
		// x's for the charts after x stops answering, below).
		waitUntil(t, 10*time.Second, "both instances' input history", func() (bool, string) {
			var ch clusterHistory
			if err := getJSON(ctx, http.DefaultClient, y.addr, "/cluster-history.json", &ch); err != nil {
				return false, err.Error()
			}
			if len(ch.Instances) != 2 {
				return false, fmt.Sprintf("%d instances", len(ch.Instances))
			}
			var rate float64
			for _, in := range ch.Instances {
				if in.Error != "" || len(in.Samples) == 0 {
					return false, fmt.Sprintf("%s: %d samples, error %q", in.Host, len(in.Samples), in.Error)
				}
				for _, s := range in.Samples {
					rate = max(rate, s.Rate)
				}
			}
			return rate > 0, "no input rate above 0 in the history"
		})

		status, _, _ = httpGet(t, "http://"+y.addr+"/nope")
		require.Equal(t, 404, status, "only / is the page")
		status, _, _ = httpGet(t, "http://"+y.addr+"/healthz")
		require.Equal(t, 200, status, "the query server keeps /healthz")
	})

	t.Run("status page in a browser", func(t *testing.T) {
		testPageInChromium(t, c, y, word)
	})

	t.Run("metrics", func(t *testing.T) {
		// One refusal of each kind the demo's own queries can cause.
		status, _, _ := httpGet(t, "http://"+y.addr+"/v1/stores/counts/keys/x?staleness=soon")
		require.Equal(t, 400, status)
		status, _, _ = httpGet(t, "http://"+y.addr+"/v1/stores/made-up-"+strconv.Itoa(int(time.Now().UnixNano()))+"/keys/x")
		require.Equal(t, 404, status)

		// scrape returns a function summing the samples of a metric
		// that carry the given labels, failing if there are none.
		scrape := func(in *instance) func(metric string, labels ...string) float64 {
			status, ctype, body := httpGet(t, "http://"+in.addr+"/metrics")
			require.Equal(t, 200, status)
			require.True(t, strings.HasPrefix(ctype, "text/plain"), ctype)
			require.Contains(t, body, "\ngo_goroutines ", "the Go collector is registered")
			// x runs actives, so every documented series is there.
			checkAgainstDocs(t, body, in == x)
			return func(metric string, labels ...string) float64 {
				t.Helper()
				re := `(?m)^` + regexp.QuoteMeta(metric) + `\{([^}]*)\} (\S+)$`
				var sum float64
				var found bool
			lines:
				for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(body, -1) {
					for _, l := range labels {
						if !strings.Contains(m[1], l) {
							continue lines
						}
					}
					v, err := strconv.ParseFloat(m[2], 64)
					require.NoError(t, err)
					sum, found = sum+v, true
				}
				require.True(t, found, "no %s with %v in\n%s", metric, labels, body)
				return sum
			}
		}
		app := `application="wordcount"`
		// x runs every active of the counts store.
		xv := scrape(x)
		require.Greater(t, xv("eddy_records_processed_total", app), 0.0)
		require.Equal(t, 0.0, xv("eddy_records_skipped_total", app))
		require.Greater(t, xv("eddy_commit_latency_seconds_count", app), 0.0)
		require.Greater(t, xv("eddy_rebalances_total", app), 0.0)
		require.Greater(t, xv("eddy_replica_position", `store="counts"`, `role="active"`), 0.0)
		require.Equal(t, 0.0, xv("eddy_replica_lag_records", `store="counts"`, `role="active"`))
		require.Greater(t, xv("eddy_queries_served_total", app, `store="counts"`, `role="active"`, `via="local"`), 0.0)
		require.Equal(t, 1.0, xv("eddy_app_state", `state="running"`))
		require.Equal(t, 0.0, xv("eddy_consumer_lag_records", `topic="text"`), "x has counted all the text")
		// Present; x's tasks may have been reopened (and their counts
		// started again) by a rebalance since they counted the text.
		require.GreaterOrEqual(t, xv("eddy_task_records_processed_total"), 0.0)
		// y follows x's actives, answered the staleness=any query
		// itself, and passed on x's answers.
		yv := scrape(y)
		require.GreaterOrEqual(t, yv("eddy_replica_lag_records", `store="counts"`, `role="standby"`), 0.0)
		require.Greater(t, yv("eddy_rebalances_total", app), 0.0)
		require.Greater(t, yv("eddy_queries_served_total", app, `store="counts"`, `via="local"`), 0.0)
		require.Greater(t, yv("eddy_queries_served_total", `role="active"`, `via="forwarded"`), 0.0)
		require.Equal(t, 1.0, yv("eddy_queries_refused_total", `store="counts"`, `reason="invalid_query"`))
		require.Equal(t, 1.0, yv("eddy_queries_refused_total", `store="other"`, `reason="unknown_store"`),
			"store names the demo does not serve share one label value")

		qc := y.metrics.counts()
		require.Positive(t, qc.Local)
		require.Positive(t, qc.Forwarded)
		require.EqualValues(t, 2, qc.Refused)
	})

	t.Run("an instance that stops answering", func(t *testing.T) {
		// x's HTTP server goes away while x stays in the group: its
		// actives can no longer be asked, and y must say so.
		require.NoError(t, x.srv.Close())

		stdout, _, err := runCmd(ctx, "", "status", "--http", y.addr, "--timeout", "1s")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^`+regexp.QuoteMeta(x.addr)+` .* unreachable: `, squash(stdout))

		_, _, err = runCmd(ctx, "", "query", "--http", y.addr, word)
		require.ErrorContains(t, err, "no replica could answer within staleness=active")
		require.ErrorContains(t, err, "tried "+x.addr+": unreachable")
		require.ErrorContains(t, err, "--staleness lag:10000")

		// y's standby of the partition answers when allowed to.
		stdout, _, err = runCmd(ctx, "", "query", "--http", y.addr, word, "--staleness", "any")
		require.NoError(t, err)
		require.Contains(t, stdout, "served by "+y.addr+": standby replica of counts partition ")
		require.GreaterOrEqual(t, y.metrics.counts().Refused, int64(3))
	})

	t.Run("input charts in a browser", func(t *testing.T) {
		testChartsInChromium(t, c, y, x)
	})
}

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromiumTries is how many times dumpDOM starts Chromium when it dies of a
// signal. CI saw Chromium end in a segmentation fault while other test
// packages loaded the machine, in two runs out of many, before any page
// was loaded; a crash of the browser says nothing about the page.
const chromiumTries = 3

// dumpDOM loads a page in headless Chromium, runs its timers for budget of
// virtual time, and returns the DOM its script built. If Chromium dies of a
// signal chromiumTries times in a row, the test is skipped with the
// browser's output: a browser that cannot run on this machine is as good
// as absent. Any other failure (an exit status, a timeout) fails the test.
// extra are more Chromium flags (--window-size, --screenshot).
func dumpDOM(t *testing.T, bin, u string, budget time.Duration, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 60*time.Second)
	defer cancel()
	var crashes []string
	for range chromiumTries {
		// Virtual time runs the page's timers without waiting for them
		// in real time, and pauses while its fetches are in flight.
		cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", "--disable-breakpad", "--user-data-dir="+t.TempDir(),
			fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds()), "--dump-dom")
		cmd.Args = append(append(cmd.Args, extra...), u)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && !exitErr.Exited() && ctx.Err() == nil {
			t.Logf("chromium died (%v) after %s: %s", err, time.Since(start).Round(time.Millisecond), stderr.String())
			crashes = append(crashes, err.Error())
			continue
		}
		require.NoError(t, err, "chromium: %s", stderr.String())
		t.Logf("chromium rendered %s in %s", u, time.Since(start).Round(time.Millisecond))
		return string(out)
	}
	t.Skipf("Chromium (%s) died of a signal %d times in a row (%s; its output is logged above): "+
		"skipping the real-browser check, which needs a browser that runs on this machine", bin, len(crashes), strings.Join(crashes, ", "))
	return ""
}

// chartAttrs are the data attributes of the page's charts, by host and kind.
type chartAttrs struct {
	samples int
	max     float64
	lines   int
}

// pageCharts reads the charts out of a dumped DOM.
func pageCharts(t *testing.T, dom string) (draws int, charts map[string]chartAttrs) {
	t.Helper()
	m := regexp.MustCompile(`<table id="charts" data-draws="(\d+)">`).FindStringSubmatch(dom)
	require.NotNil(t, m, "the charts table:\n%s", dom)
	draws, _ = strconv.Atoi(m[1])
	charts = map[string]chartAttrs{}
	re := regexp.MustCompile(`(?s)<svg [^>]*data-host="([^"]+)" data-kind="(rate|lag)" data-samples="(\d+)" data-max="([\d.]+)"[^>]*>(.*?)</svg>`)
	for _, m := range re.FindAllStringSubmatch(dom, -1) {
		n, _ := strconv.Atoi(m[3])
		mx, _ := strconv.ParseFloat(m[4], 64)
		charts[m[1]+" "+m[2]] = chartAttrs{samples: n, max: mx, lines: len(regexp.MustCompile(`<polyline points="[\d., ]+"`).FindAllString(m[5], -1))}
	}
	return draws, charts
}

// testChartsInChromium loads the status page in headless Chromium and
// checks its input charts: a rate and a lag chart for the cluster and for
// each instance (gone's from the samples it gave before it stopped
// answering), drawn with the samples so far, redrawn while the page is
// open, and drawn with more samples when it is loaded later.
func testChartsInChromium(t *testing.T, c *testCluster, in, gone *instance) {
	bin := chromium()
	if bin == "" {
		t.Skip("Chromium is not installed (looked for chromium, chromium-browser, google-chrome and google-chrome-stable on PATH): " +
			"skipping the real-browser test of the status page's charts; install it (apt-get install chromium) to run it")
	}
	u := "http://" + in.addr + "/"
	draws, first := pageCharts(t, dumpDOM(t, bin, u, 4*time.Second))
	require.GreaterOrEqual(t, draws, 2, "the charts are redrawn while the page is open")
	for _, host := range []string{"all", c.ins[0].addr, c.ins[1].addr} {
		for _, kind := range []string{"rate", "lag"} {
			ch, ok := first[host+" "+kind]
			require.True(t, ok, "a %s chart for %s in %v", kind, host, first)
			require.Positive(t, ch.samples, "%s %s has data points", host, kind)
			require.Positive(t, ch.lines, "%s %s draws a line", host, kind)
		}
	}
	require.Greater(t, first["all rate"].max, 1.0, "the text the cluster counted shows in its input rate")
	require.Contains(t, first, gone.addr+" rate")
	require.Regexp(t, regexp.QuoteMeta(gone.addr)+`<small title="unreachable: [^"]*">not answering</small>`, dumpDOM(t, bin, u, time.Second),
		"an instance that stopped answering keeps its last samples, marked")

	// The instances keep sampling: a later load draws more points.
	waitUntil(t, 20*time.Second, "more samples on a later load", func() (bool, string) {
		_, later := pageCharts(t, dumpDOM(t, bin, u, time.Second))
		return later["all rate"].samples > first["all rate"].samples,
			fmt.Sprintf("%d samples, first load %d", later["all rate"].samples, first["all rate"].samples)
	})
}

// testPageInChromium loads the status page in headless Chromium, with a
// word to query in its URL, and checks the DOM the page's script built:
// the grid of every partition on every instance, and the answer.
func testPageInChromium(t *testing.T, c *testCluster, in *instance, word string) {
	bin := chromium()
	if bin == "" {
		t.Skip("Chromium is not installed (looked for chromium, chromium-browser, google-chrome and google-chrome-stable on PATH): " +
			"skipping the real-browser test of the status page; install it (apt-get install chromium) to run it")
	}
	u := "http://" + in.addr + "/?word=" + url.QueryEscape(strings.ToUpper(word)) + "&staleness=any"
	dom := dumpDOM(t, bin, u, 3*time.Second)

	for _, i := range c.ins {
		require.Contains(t, dom, `<th class="" data-host="`+i.addr+`">`, "a column per instance")
	}
	require.Equal(t, 3, strings.Count(dom, `data-role="active"`), "one active per partition:\n%s", dom)
	require.Equal(t, 3, strings.Count(dom, `data-role="standby"`), "one standby per partition:\n%s", dom)
	require.Regexp(t, `<td class="r-active" data-role="active" data-host="[^"]+" title="active">active</td>`, dom)
	require.Regexp(t, `<td class="r-standby" data-role="standby" data-host="[^"]+" title="standby lag \d+">standby lag \d+</td>`, dom)
	require.Contains(t, dom, "seen from "+in.addr+" · 2 instances")

	require.Contains(t, dom, `<div id="answer" aria-live="polite" data-status="200">`, "the query in the URL was asked:\n%s", dom)
	require.Contains(t, dom, fmt.Sprintf(`<span class="value">%s: %d</span>`, word, c.want[word]))
	require.Regexp(t, `served by <span class="chip r-(active|standby)">(active|standby)</span>`, dom)

	// The word's last minutes, oldest first, from counts-per-minute.
	starts := slices.Sorted(maps.Keys(c.perMinute[word]))
	var spans []string
	for _, st := range starts[max(len(starts)-5, 0):] {
		spans = append(spans, fmt.Sprintf(`<span class="minute">%s %d</span>`, time.UnixMilli(st).UTC().Format("15:04"), c.perMinute[word][st]))
	}
	require.Contains(t, dom, `<p class="minutes">per minute (UTC): `+strings.Join(spans, " · ")+`</p>`, "the word's minutes:\n%s", dom)

	// Typed in capitals, a word with a final Σ or an İ is looked up as the
	// counter lower-cased it (σ, and i without a combining dot).
	for _, w := range []struct {
		typed, counted string
		n              int64
	}{{"ΟΔΟΣ", "οδοσ", 2}, {"İZMİR", "izmir", 1}} {
		require.Equal(t, w.n, c.want[w.counted], "the input's count of %s", w.counted)
		dom := dumpDOM(t, bin, "http://"+in.addr+"/?word="+url.QueryEscape(w.typed)+"&staleness=any", 3*time.Second)
		require.Contains(t, dom, fmt.Sprintf(`<span class="value">%s: %d</span>`, w.counted, w.n), "%s typed:\n%s", w.typed, dom)
	}
}

// documentedSeries parses the Metrics section of docs/operations.md: each
// series' type, whether it is there from start-up ("always"), and the
// values of the labels whose values are fixed.
func documentedSeries(t *testing.T) (types map[string]string, always map[string]bool, labels map[string][]string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	types, always, labels = map[string]string{}, map[string]bool{}, map[string][]string{}
	_, section, ok := strings.Cut(string(b), "\n## Metrics\n")
	require.True(t, ok, "docs/operations.md has a Metrics section")
	section, _, _ = strings.Cut(section, "\n#")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "| `eddy_") {
			require.Len(t, cols, 2, "label table row %q", line)
			// The values are the code spans before any parenthesis.
			vals, _, _ := strings.Cut(cols[1], " (")
			label := strings.Trim(cols[0], " `")
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(vals, -1) {
				labels[label] = append(labels[label], m[1])
			}
			continue
		}
		require.Len(t, cols, 6, "metrics table row %q", line)
		name := strings.Trim(cols[0], " `")
		types[name] = strings.TrimSpace(cols[1])
		always[name] = strings.HasPrefix(strings.TrimSpace(cols[3]), "always")
	}
	require.NotEmpty(t, types)
	require.NotEmpty(t, labels)
	return types, always, labels
}

// exposedLabelValues reads, from a Prometheus text exposition, every value
// each label of an eddy_ series takes.
func exposedLabelValues(body string) map[string][]string {
	out := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^eddy_\w+\{([^}]*)\}`).FindAllStringSubmatch(body, -1) {
		for _, l := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
			if !slices.Contains(out[l[1]], l[2]) {
				out[l[1]] = append(out[l[1]], l[2])
			}
		}
	}
	return out
}

// TestQueryLabelValuesDocumented holds the documented values of the query
// counters' labels to those the demo gives them.
func TestQueryLabelValuesDocumented(t *testing.T) {
	_, _, labels := documentedSeries(t)
	require.ElementsMatch(t, queryRefusalCodes, labels["reason"], "reason label values")
	require.ElementsMatch(t, []string{viaLocal, viaForwarded}, labels["via"], "via label values")
	require.ElementsMatch(t, iq.Endpoints, labels["endpoint"], "endpoint label values")
	roles := []string{servedRoleNone}
	for r := iq.RoleActive; !strings.HasPrefix(r.String(), "Role("); r++ {
		roles = append(roles, r.String())
	}
	require.ElementsMatch(t, roles, labels["served_role"], "served_role label values")
	require.ElementsMatch(t, append([]string{iq.OutcomeOK, "unauthorized"}, queryRefusalCodes...), labels["outcome"], "outcome label values")
}

// exposedFamilies reads the eddy_ families of a Prometheus text exposition,
// with their types.
func exposedFamilies(body string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (eddy_\S+) (\S+)$`).FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// checkAgainstDocs fails if body exposes an eddy_ series
// docs/operations.md does not list (or lists with another type), or a
// value of a fixed label it does not list, or lacks a series it lists as
// always there (every one it lists, with all).
func checkAgainstDocs(t *testing.T, body string, all bool) {
	t.Helper()
	types, always, labels := documentedSeries(t)
	exposed := exposedFamilies(body)
	for name, typ := range exposed {
		require.Contains(t, types, name, "%s is not in docs/operations.md's metrics table", name)
		require.Equal(t, types[name], typ, "%s's type", name)
	}
	for label, values := range exposedLabelValues(body) {
		if documented, fixed := labels[label]; fixed {
			for _, v := range values {
				require.Contains(t, documented, v, "label %s's value %q is not documented", label, v)
			}
		}
	}
	for name := range types {
		// The demo has no global table; the runtime's
		// TestGlobalStoreProcessorQueriesAndMetrics checks the global
		// store series against the table.
		if (all || always[name]) && !strings.HasPrefix(name, "eddy_global_store_") {
			require.Contains(t, exposed, name, "docs/operations.md lists %s, /metrics lacks it", name)
		}
	}
}

// TestMetricsEndpointAtStartup scrapes an instance's registry before the
// App has connected to anything: every series docs/operations.md lists as always
// there is, the query counters of the counts store at 0.
func TestMetricsEndpointAtStartup(t *testing.T) {
	topo, err := wordCount()
	require.NoError(t, err)
	app, err := runtime.New(topo, runtime.Config{ApplicationID: "wordcount", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir()})
	require.NoError(t, err)
	m, err := newInstanceMetrics(app, "wordcount")
	require.NoError(t, err)
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	status, _, body := httpGet(t, srv.URL)
	require.Equal(t, 200, status)
	checkAgainstDocs(t, body, false)
	require.Contains(t, body, `eddy_app_state{application="wordcount",state="created"} 1`)
	require.Contains(t, body, `eddy_queries_refused_total{application="wordcount",reason="too_stale",store="counts"} 0`)
	require.Contains(t, body, `eddy_queries_served_total{application="wordcount",role="standby",store="counts",via="local"} 0`)
	require.Contains(t, body, `eddy_records_processed_total{application="wordcount",source="input"} 0`)
}

func TestHistoryRing(t *testing.T) {
	h := newHistory(3)
	t0 := time.UnixMilli(1_000_000)
	h.add(t0, 100, 5)
	require.Empty(t, h.samples(), "the first reading is the rate's base")
	h.add(t0.Add(time.Second), 110, 4)
	h.add(t0.Add(2*time.Second), 130, 0)
	require.Equal(t, []sample{{At: 1_001_000, Rate: 10, Lag: 4}, {At: 1_002_000, Rate: 20, Lag: 0}}, h.samples())
	h.add(t0.Add(4*time.Second), 130, 1)
	h.add(t0.Add(5*time.Second), 3, 2) // a new App counts from 0
	require.Equal(t, []sample{{At: 1_002_000, Rate: 20, Lag: 0}, {At: 1_004_000, Rate: 0, Lag: 1}, {At: 1_005_000, Rate: 3, Lag: 2}},
		h.samples(), "the ring keeps the latest, oldest first")
}

// historyHost is an instance reduced to /v1/metadata and /history.json,
// the latter from a real webUI whose history the test fills.
type historyHost struct {
	srv *httptest.Server
	ui  *webUI
}

func newHistoryHost(t *testing.T, meta *atomic.Pointer[string]) *historyHost {
	h := &historyHost{}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/metadata":
			io.WriteString(w, *meta.Load())
		case "/history.json":
			h.ui.serveHistory(w, r)
		case "/cluster-history.json":
			h.ui.serveClusterHistory(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	h.srv.Start()
	t.Cleanup(h.srv.Close)
	h.ui = newWebUI(h.addr(), peerClient(false, nil, ""), nil)
	t.Cleanup(h.ui.close)
	return h
}

func (h *historyHost) addr() string { return h.srv.Listener.Addr().String() }

func TestHistoryEndpoints(t *testing.T) {
	var meta atomic.Pointer[string]
	a, b := newHistoryHost(t, &meta), newHistoryHost(t, &meta)
	both := fmt.Sprintf(`{"instances":[{"host":%q},{"host":%q}],"partitions":{"counts":3}}`, a.addr(), b.addr())
	meta.Store(&both)
	t0 := time.Now().Add(-time.Minute)
	for i := range 4 {
		a.ui.hist.add(t0.Add(time.Duration(i)*time.Second), float64(100*i), float64(10-i))
		b.ui.hist.add(t0.Add(time.Duration(i)*time.Second), float64(50*i), 0)
	}

	var own historyAnswer
	require.NoError(t, getJSON(testCtx(t), http.DefaultClient, a.addr(), "/history.json", &own))
	require.Equal(t, a.addr(), own.Host)
	require.EqualValues(t, 1000, own.IntervalMs)
	require.Len(t, own.Samples, 3)
	require.Equal(t, sample{At: t0.Add(3 * time.Second).UnixMilli(), Rate: 100, Lag: 7}, own.Samples[2])

	get := func() clusterHistory {
		t.Helper()
		var ch clusterHistory
		require.NoError(t, getJSON(testCtx(t), http.DefaultClient, a.addr(), "/cluster-history.json", &ch))
		return ch
	}
	ch := get()
	require.EqualValues(t, historyLen*1000, ch.WindowMs)
	require.Len(t, ch.Instances, 2)
	hosts := []string{a.addr(), b.addr()}
	slices.Sort(hosts)
	require.Equal(t, hosts, []string{ch.Instances[0].Host, ch.Instances[1].Host}, "sorted by host")
	for _, in := range ch.Instances {
		require.Empty(t, in.Error)
		require.Len(t, in.Samples, 3)
	}

	// b dies and then leaves the routing table: its last samples stay,
	// marked, so that its chart shows where it stopped.
	b.srv.Close()
	onlyA := fmt.Sprintf(`{"instances":[{"host":%q}],"partitions":{"counts":3}}`, a.addr())
	meta.Store(&onlyA)
	ch = get()
	require.Len(t, ch.Instances, 2)
	for _, in := range ch.Instances {
		if in.Host == b.addr() {
			require.Contains(t, in.Error, "unreachable")
			require.Len(t, in.Samples, 3)
			require.Equal(t, 50.0, in.Samples[0].Rate)
		} else {
			require.Empty(t, in.Error)
		}
	}

	// An instance that cannot give the routing table answers 503.
	dead := newWebUI(deadAddr(t, "127.0.0.1"), peerClient(false, nil, ""), nil)
	defer dead.close()
	rec := httptest.NewRecorder()
	dead.serveClusterHistory(rec, httptest.NewRequest("GET", "/cluster-history.json", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "unreachable")
}
