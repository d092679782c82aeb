package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/runtime"
)

// nearLimitValue is the size of the biggest input value the test sends:
// just under the producer's default batch limit (1,000,012 bytes, Kafka's
// max.message.bytes default; the embedded broker accepts 1,048,588), with
// room for the record batch's own framing.
const nearLimitValue = 999_000

// startGuarantee starts a word-count instance under guarantee g on dir,
// closed by the test's cleanup if the test has not closed or killed it.
func startGuarantee(t *testing.T, c *cluster, name, dir string, g runtime.ProcessingGuarantee) *instance {
	t.Helper()
	logs := new(logBuffer)
	app, err := runtime.New(wordCount(t), runtime.Config{
		ApplicationID:       "wc",
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		ProcessingGuarantee: g,
		CommitInterval:      commitInterval,
		SessionTimeout:      3 * time.Second,
		NumStreamThreads:    streamThreads(t),
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return &instance{App: app, name: name, stateDir: dir}
}

// waitCaughtUpAny is the harness's waitCaughtUp for either guarantee.
// Under exactly-once every transaction ends with a commit marker in each
// partition it wrote, which takes an offset but is never consumed: a
// repartition partition whose last stable offset is its end (no open
// transaction) is caught up when its committed offset reaches the end or
// the marker just before it.
func waitCaughtUpAny(t *testing.T, c *cluster, g runtime.ProcessingGuarantee) {
	t.Helper()
	if g != runtime.ExactlyOnce {
		c.waitCaughtUp(t, "wc")
		return
	}
	rep := repartitionTopic("wc")
	topics := []string{inputTopic, rep}
	waitFor(t, settleTimeout, "application wc to commit all input", func() (bool, string) {
		com, err := c.committed(t, "wc", topics...)
		if err != nil {
			return false, err.Error()
		}
		ends := c.endOffsets(t, topics...)
		stable, err := c.adm.ListCommittedOffsets(ctx(t), rep)
		if err != nil {
			return false, err.Error()
		}
		for _, topic := range topics {
			for p, end := range ends[topic] {
				got := com[topic][p]
				if topic == rep && end > 0 {
					lso, ok := stable.Lookup(rep, p)
					if !ok || lso.Offset != end {
						return false, fmt.Sprintf("%s/%d has an open transaction", topic, p)
					}
					if got == end-1 {
						continue
					}
				}
				if got != end {
					return false, fmt.Sprintf("%s/%d committed %d of %d", topic, p, got, end)
				}
			}
		}
		return true, ""
	})
}

// bigLines returns input lines holding records as big as Kafka takes: a
// 70,000-byte word (badger's key limit is 65,000 bytes), two such words
// sharing their first 69,999 bytes, a 900,000-byte line of many words, and
// a line of nearLimitValue bytes holding a 450,000-byte word (whose
// repartition record carries it as key and value, ~900 KB) among many
// small ones. round varies the words so that every call adds new keys as
// well as counting old ones again.
func bigLines(c *corpus, round int, want map[string]int64) []string {
	word := func(b byte, n int, tail string) string { return strings.Repeat(string(b), n) + tail }
	many := func(size int, extra ...string) string {
		var sb strings.Builder
		for _, w := range extra {
			sb.WriteString(w)
			sb.WriteByte(' ')
		}
		for sb.Len() < size-12 {
			sb.WriteString(c.Render(c.Vocab[c.Zipf.Uint64()]))
			sb.WriteByte(' ')
		}
		return sb.String()
	}
	tag := string(rune('a' + round))
	lines := []string{
		"before " + word('w', 70_000, "") + " after",
		word('q', 69_999, "a") + " " + word('q', 69_999, "b") + " " + word('q', 69_999, tag),
		many(900_000),
		many(nearLimitValue, word('h', 450_000, tag), word('w', 70_000, "")),
		"x" + word('y', 900, tag),
	}
	for _, l := range lines {
		if len(l) > nearLimitValue {
			panic("a line beyond the producer's limit")
		}
		for _, w := range tokenize(l) {
			want[w]++
		}
	}
	return lines
}

// TestBigRecordsCounted is issue 11's first test: records with a
// 70,000-byte word, a 900,000-byte line and a value near the broker's
// limit are counted exactly like any other, under either guarantee, while
// running, across a crash and restart on the kept state directory, and
// across a full restoration into a wiped one.
func TestBigRecordsCounted(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newCluster(t, 2)
			dir := t.TempDir()
			gen := newCorpus(11, 500)
			want := make(map[string]int64)

			a := startGuarantee(t, c, "run1", dir, g)
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			c.produceLines(t, append(gen.Lines(5_000, want), bigLines(gen, 0, want)...))
			waitCaughtUpAny(t, c, g)
			requireStore(t, want, a)

			// A crash: whatever the stores had not written is restored
			// from the changelogs, big keys included.
			c.produceLines(t, bigLines(gen, 1, want))
			waitCaughtUpAny(t, c, g)
			a.Kill()
			c.produceLines(t, append(gen.Lines(2_000, want), bigLines(gen, 2, want)...))
			a = startGuarantee(t, c, "run2", dir, g)
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			waitCaughtUpAny(t, c, g)
			requireStore(t, want, a)

			// A full restoration into an empty state directory.
			a.close(t)
			require.NoError(t, os.RemoveAll(dir))
			a = startGuarantee(t, c, "run3", dir, g)
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			require.Positive(t, a.Stats().RestoredRecords)
			requireStore(t, want, a)
			c.produceLines(t, bigLines(gen, 3, want))
			waitCaughtUpAny(t, c, g)
			requireStore(t, want, a)

			requireCounts(t, want, readCommittedLatest(t, c.b.Addrs()[0], outputTopic, c.partitions), "topic "+outputTopic)
			require.Zero(t, a.Stats().Skipped)
			a.close(t)
		})
	}
}
