package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/task"
)

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, thousands(n), "%d", n)
	}
}

func TestProgressBarAndPercent(t *testing.T) {
	tests := []struct {
		done, total int64
		bar         string
		pct         int
	}{
		{0, 100, "░░░░░░░░░░", 0},
		{50, 100, "█████░░░░░", 50},
		{99, 100, "█████████░", 99},
		{100, 100, "██████████", 100},
		{150, 100, "██████████", 100},
		{0, 0, "██████████", 100}, // nothing to restore is done
		{-5, 100, "░░░░░░░░░░", 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.bar, progressBar(tt.done, tt.total, 10), "%d of %d", tt.done, tt.total)
		require.Equal(t, tt.pct, percent(tt.done, tt.total), "%d of %d", tt.done, tt.total)
	}
}

func TestWrap(t *testing.T) {
	require.Equal(t, []string{"the quick", "brown fox", "jumps"}, wrap("the quick brown fox jumps", 10))
	require.Equal(t, []string{"a", "longerthanwidth", "b"}, wrap("a longerthanwidth b", 10))
	require.Equal(t, []string{""}, wrap("", 10))
	require.Equal(t, []string{"κόσμε κόσμε"}, wrap("κόσμε κόσμε", 11), "width counts runes")
}

func TestFitKeepsEscapes(t *testing.T) {
	s := paint(ansiGreen, "active") + " 0 1 2"
	require.Equal(t, 12, visibleLen(s))
	require.Equal(t, s, fit(s, 12))
	cut := fit(s, 8)
	require.Equal(t, 8, visibleLen(cut))
	require.Equal(t, ansiGreen+"active"+ansiReset+" …"+ansiReset, cut)
}

// testFrame is a frame in the middle of a failover: #2 killed, #3
// restoring partition 1 it took over, #1 serving a standby.
func testFrame() *frame {
	return &frame{
		elapsed:  23400 * time.Millisecond,
		settings: "3 instances · 1 standby per task · exactly-once · 500 lines/s",
		step:     "#2 killed 2.0s ago",
		fed:      11500,
		fedRate:  500,
		answered: 1234,
		refused:  3,
		maxLag:   37,
		bound:    "lag:10000",
		instances: []instanceRow{
			{name: "#1", addr: "127.0.0.1:4001", state: stateUp, recPerSec: 812, replicas: []replicaCell{
				{partition: 0, role: task.Running},
				{partition: 3, role: task.Running},
				{partition: 4, role: task.Standby, lag: 2},
				{partition: 5, role: task.Warmup, lag: -1},
			}},
			{name: "#2", addr: "127.0.0.1:4002", state: stateKilled},
			{name: "#3", addr: "127.0.0.1:4003", state: stateUp, recPerSec: 790.4, replicas: []replicaCell{
				{partition: 1, role: task.Restoring, lag: 1000, done: 1000, total: 2000},
				{partition: 2, role: task.Running},
			}},
			{name: "#4", addr: "127.0.0.1:4004", state: stateStarting},
		},
		top: []topWord{{"the", 12345}, {"ko", 567}},
		recent: []answer{
			{word: "the", count: 12345, instance: "#1", host: "127.0.0.1:4001", partition: 3, role: "active"},
			{word: "ko", refusal: "no replica of partition 1 could answer (unreachable)"},
		},
		events: []event{
			{at: 5 * time.Second, msg: "cluster settled"},
			{at: 21 * time.Second, msg: "killing #2 hard (network cut: no commit, no leave-group). It runs partitions 1 and 4 as active"},
		},
	}
}

func TestRenderPlain(t *testing.T) {
	var b bytes.Buffer
	renderPlain(&b, testFrame())
	require.Equal(t, "[ 23.4s] fed 11,500 lines · queries 1,234 answered, 3 refused"+
		" · #1 812 rec/s: active 0 3, standby 4 (lag 2), warmup 5 (lag ?)"+
		" · #2 killed"+
		" · #3 790 rec/s: active 2, restoring 1 (50%)"+
		" · #4 starting"+
		" · top: the 12,345 ko 567\n", b.String())
}

func TestPlainLines(t *testing.T) {
	require.Equal(t, "[  5.0s] *** cluster settled", plainAnnouncement(event{at: 5 * time.Second, msg: "cluster settled"}))
	a := answer{at: 7250 * time.Millisecond, word: "the", count: 1234, instance: "#3", host: "127.0.0.1:4003", partition: 2, role: "standby", lag: 5}
	require.Equal(t, `[  7.2s]     query "the" = 1,234  from #3 (127.0.0.1:4003) partition 2, standby, lag 5`, plainAnswer(a))
	r := answer{at: 8 * time.Second, word: "ko", refusal: "no replica of partition 1 could answer (unreachable)"}
	require.Equal(t, `[  8.0s]     query "ko" refused: no replica of partition 1 could answer (unreachable)`, plainAnswer(r))
}

func TestRenderANSI(t *testing.T) {
	var b bytes.Buffer
	const width = 100
	renderANSI(&b, testFrame(), width)
	out := b.String()
	require.True(t, strings.HasPrefix(out, ansiHome), "redraws from the top left")
	require.True(t, strings.HasSuffix(out, ansiClearDown), "clears what an older, longer frame left below")

	lines := strings.Split(strings.TrimSuffix(out, ansiClearDown), "\n")
	lines = lines[:len(lines)-1] // after the last newline
	var plain []string
	for _, l := range lines {
		require.True(t, strings.HasSuffix(l, ansiClearLine), "every line clears its rest: %q", l)
		require.LessOrEqual(t, visibleLen(l), width, "fits the width: %q", l)
		plain = append(plain, stripANSI(l))
	}
	text := strings.Join(plain, "\n")
	for _, want := range []string{
		"Eddy word count  3 instances · 1 standby per task · exactly-once · 500 lines/s",
		"0:23",
		"▶ #2 killed 2.0s ago",
		"#1  127.0.0.1:4001      812     active 0 3   standby 4 (lag 2)   warmup 5 (lag ?)",
		"#2  127.0.0.1:4002      –       KILLED",
		"#3  127.0.0.1:4003      790     active 2   restoring 1",
		"restoring 1 ████████████░░░░░░░░░░░░  50%  1,000 of 2,000 records",
		"#4  127.0.0.1:4004      –       starting",
		"text fed     11,500 lines, 500/s",
		"queries      1,234 answered · 3 refused · largest lag in an answer 37",
		"top words    the 12,345 · ko 567",
		"the            12,345     #1 127.0.0.1:4001    partition 3  active     lag 0",
		"ko             refused no replica of partition 1 could answer (unreachable)",
		"0:05  cluster settled",
		"0:21  killing #2 hard (network cut: no commit, no leave-group). It runs partitions 1 and 4 as",
		"        active",
	} {
		require.Contains(t, text, want)
	}
	require.Contains(t, out, paint(ansiRed, "KILLED"), "killed instances stand out")
	require.Contains(t, out, paint(ansiGreen, "active")+" 0 3", "roles are coloured")
}

func TestRenderANSIKeepsNewestEventsThatFit(t *testing.T) {
	f := testFrame()
	f.events = nil
	for i := range 30 {
		f.events = append(f.events, event{at: time.Duration(i) * time.Second, msg: strings.Repeat("word ", 30) + "end"})
	}
	var b bytes.Buffer
	renderANSI(&b, f, 80)
	text := stripANSI(b.String())
	require.Contains(t, text, "0:29  word")
	require.NotContains(t, text, "0:20  word")
	require.LessOrEqual(t, strings.Count(text, "\n"), 45, "the frame fits a common terminal")
}

func TestIsTerminal(t *testing.T) {
	require.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a regular file is not a terminal")
}

// stripANSI removes escape sequences.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			i = skipEscape(s, i)
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+size])
		i += size
	}
	return b.String()
}
