package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary stand in for eddybench when benchmark (c)
// re-executes itself to start its broker and instance children.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestAppendWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"", nil},
		{"Hello, world.", []string{"hello", "world"}},
		{"a-b  c's 42x", []string{"a", "b", "c", "s", "42x"}},
		{"ÉTÉ été", []string{"été", "été"}},
		{"x\xffy", []string{"x", "y"}},
	} {
		require.Equal(t, tc.want, appendWords(nil, tc.line), "line %q", tc.line)
	}
}

func TestLineGenDeterministic(t *testing.T) {
	a, b := newLineGen(7), newLineGen(7)
	for range 100 {
		l := a.line()
		require.Equal(t, l, b.line())
		n := len(appendWords(nil, l))
		require.GreaterOrEqual(t, n, minWordsPerLine)
		require.LessOrEqual(t, n, maxWordsPerLine)
	}
}

func TestFmtNum(t *testing.T) {
	for in, want := range map[float64]string{0: "0.0", 42.26: "42.3", 999: "999", 1234: "1,234", 1234567.8: "1,234,568"} {
		require.Equal(t, want, fmtNum(in))
	}
}

// TestSmoke runs the default benchmarks at tiny sizes, a warm-up and one
// measured run each: the figures mean nothing, but every phase, check and
// child process is exercised.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and child processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--runs", "1", "--lines", "2000", "--records", "3000", "--keys", "3000", "--tasks", "4", "--partitions", "3"},
		strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	// Ratios at these sizes are noise, so a FAIL verdict is not an error;
	// only a broken benchmark is.
	require.NoError(t, err, errOut.String())
	// The 4 tasks' stores are one database in the default (shared) layout.
	for _, want := range []string{"(a) word count", "(b) restore", "(b) … App, 4 tasks", "(c) peak RSS, 4 tasks", "badger after close, 1 DBs"} {
		require.Contains(t, out.String(), want)
	}
}

// TestSmokeHighCardinality runs benchmark (m), which is not in the
// default set, at a tiny size.
func TestSmokeHighCardinality(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and an App")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "m", "--runs", "1", "--keys", "3000", "--tasks", "4"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "(m) count, distinct keys")
	require.Contains(t, out.String(), "(m) info: floor loop vs baseline")
	require.Contains(t, out.String(), "(m) info: eddy in-memory store vs baseline")
}

// TestSmokeUncombined runs (a) without combining, which adds the two-stage
// loop: its run checks that it consumed every word and wrote a count for
// each distinct one.
func TestSmokeUncombined(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and Apps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "a", "--runs", "1", "--combine=false", "--lines", "3000", "--partitions", "3"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "(a) info: two-stage loop vs baseline")
	require.Contains(t, out.String(), "(a) info: eddy vs two-stage loop")
}

// TestSmokeWindows runs benchmark (w), which is not in the default set, at
// a tiny size: the windowed and key-value counts with their checks, the
// window-store restore read back through a WindowStore, and the stream
// through a window store with its expiry checked.
func TestSmokeWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and Apps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "w", "--runs", "1", "--window-records", "4000", "--tasks", "4"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	for _, want := range []string{"(w1 spread) tumbling-window vs key-value count", "(w1 live) tumbling-window vs key-value count",
		"(w1 spread) info: windowed vs key-value count by (key, minute)",
		"(w2) window-store restore", "(w3) window store disk, 10× retention", "(w3) Go heap, peak of period 10 / 2nd"} {
		require.Contains(t, out.String(), want)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--only", "x"}, {"--task-ladder", "64,x"}, {"--task-idle", "0s"}, {"--runs", "0"}, {"--lines", "0"}, {"--window-records", "0"}, {"extra"}} {
		var out, errOut bytes.Buffer
		require.Error(t, run(context.Background(), args, strings.NewReader(""), &out, &errOut), "args %v", args)
	}
}

// TestSmokeCorpus runs (a) over a text file, as --corpus reads real text:
// blank lines are not records, and words in any script are counted (the
// run checks every word's final count against the file's).
func TestSmokeCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and an App")
	}
	var text strings.Builder
	words := []string{"Zürich", "señal", "Οδός", "река", "東京", "naïve", "Straße", "word42"}
	for i := range 1500 {
		if i%10 == 0 {
			text.WriteString("   \n")
		}
		for j := range 3 + i%7 {
			text.WriteString(words[(i*7+j*3)%len(words)])
			text.WriteString([]string{" ", ", ", "; ", " — "}[(i+j)%4])
		}
		text.WriteString("end.\n")
	}
	path := filepath.Join(t.TempDir(), "corpus.txt")
	require.NoError(t, os.WriteFile(path, []byte(text.String()), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "a", "--runs", "1", "--corpus", path, "--partitions", "3"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "(a) word count: 1500 lines ("+path+")")

	var o2, e2 bytes.Buffer
	require.ErrorContains(t, run(context.Background(), []string{"--only", "a", "--corpus", filepath.Join(t.TempDir(), "missing")},
		strings.NewReader(""), &o2, &e2), "--corpus")
}

// The report states the run's machine and commit and one row per figure,
// with each side's median and spread and the ratio of the medians.
func TestWriteReport(t *testing.T) {
	ri := runInfo{start: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), took: 90 * time.Second, goVer: "go1.26.8",
		platform: "linux/amd64", cpus: 2, procs: 2, load: "0.50 0.40 0.30", commit: "abc123", args: []string{"--only", "a"}}
	rows := []row{
		ratioRow("(a) word count", "lines/s", spread{1250, 1200, 1150}, spread{990, 1000, 1100}, 1.0),
		{name: "(s) first | record", unit: "ms", eddy: 42.5, target: "≤ 300 ms", hasCheck: true},
	}
	var b strings.Builder
	require.NoError(t, writeReport(&b, ri, rows, nil))
	out := b.String()
	for _, want := range []string{
		"| commit | `abc123` |",
		"| CPUs | 2 (GOMAXPROCS 2) |",
		"| load average at start | 0.50 0.40 0.30 |",
		"| took | 1m30s |",
		"| (a) word count | lines/s | 1,200 | 1,150–1,250 (3 runs) | 1,000 | 990–1,100 (3 runs) | 1.200× | ≥ 1.0× | ok |",
		`| (s) first \| record | ms | 42.5 | one run | - | - | - | ≤ 300 ms | FAIL |`,
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "Benchmarks that failed")
}

// TestSmokeTasks runs benchmark (t), which is not in the default set, at
// tiny task counts in both store layouts: both children, every phase of
// the instance child and each figure's row.
func TestSmokeTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker and instance children")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "t", "--runs", "1", "--task-ladder", "2,3", "--task-idle", "200ms", "--task-layouts", "shared,per-store"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	for _, want := range []string{"(t) 2 tasks: cold Start → all running", "(t) 3 tasks: restart Start → all running",
		"(t) 3 tasks: idle CPU", "(t) 3 tasks: file descriptors", "(t) 3 tasks: close", "(t) 3 tasks, per-store: file descriptors"} {
		require.Contains(t, out.String(), want)
	}
}
