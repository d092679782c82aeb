package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runCmd runs the demo with args and the given standard input, returning
// what it wrote and its error.
func runCmd(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(ctx, args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	return out.String(), errb.String(), err
}

func TestDispatchAndUsageErrors(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name       string
		args       []string
		wantUsage  bool   // error wraps errUsage
		wantHelp   bool   // error is flag.ErrHelp
		wantStderr string // substring of stderr
		wantStdout string // substring of stdout
	}{
		{name: "help", args: []string{"help"}, wantStdout: "demo produce --brokers"},
		{name: "--help", args: []string{"--help"}, wantStdout: "demo broker --listen"},
		{name: "unknown command", args: []string{"frobnicate"}, wantUsage: true, wantStderr: `unknown command "frobnicate"`},
		{name: "produce without brokers", args: []string{"produce"}, wantUsage: true, wantStderr: "--brokers is required"},
		{name: "produce with empty brokers", args: []string{"produce", "--brokers", " , "}, wantUsage: true, wantStderr: "--brokers is required"},
		{name: "produce unknown flag", args: []string{"produce", "--brokers", "x:1", "--nope"}, wantUsage: true, wantStderr: "flag provided but not defined: -nope"},
		{name: "produce stray argument", args: []string{"produce", "--brokers", "x:1", "extra"}, wantUsage: true, wantStderr: `unexpected argument "extra"`},
		{name: "produce help", args: []string{"produce", "-h"}, wantHelp: true, wantStderr: "usage: demo produce"},
		{name: "broker zero partitions", args: []string{"broker", "--partitions", "0"}, wantUsage: true, wantStderr: "--partitions must be at least 1"},
		{name: "broker bad partitions", args: []string{"broker", "--partitions", "many"}, wantUsage: true, wantStderr: "invalid value"},
		{name: "broker bad log level", args: []string{"broker", "--log-level", "loud"}, wantUsage: true, wantStderr: "--log-level"},
		{name: "broker empty listen", args: []string{"broker", "--listen", ""}, wantUsage: true, wantStderr: "--listen must not be empty"},
		{name: "instance dial via with TLS", args: []string{"instance", "--brokers", "x:1", "--state-dir", "d", "--http", "127.0.0.1:0", "--tls", "--broker-dial-via", "127.0.0.1:1"},
			wantUsage: true, wantStderr: "--broker-dial-via is a fault-testing aid for plaintext brokers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runCmd(ctx, "", tt.args...)
			switch {
			case tt.wantUsage:
				require.ErrorIs(t, err, errUsage)
				require.Equal(t, 2, exitCode(err, io.Discard))
				require.Contains(t, stderr, "usage: demo", "usage errors print the usage")
			case tt.wantHelp:
				require.ErrorIs(t, err, flag.ErrHelp)
				require.Equal(t, 0, exitCode(err, io.Discard))
			default:
				require.NoError(t, err)
			}
			require.Contains(t, stderr, tt.wantStderr)
			require.Contains(t, stdout, tt.wantStdout)
		})
	}
}

func TestExitCode(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 0, exitCode(nil, &stderr))
	require.Equal(t, 1, exitCode(errors.New("boom"), &stderr))
	require.Equal(t, "demo: boom\n", stderr.String())
}

func TestSplitBrokers(t *testing.T) {
	require.Equal(t, []string{"a:1", "b:2"}, splitBrokers(" a:1, ,b:2,"))
	require.Nil(t, splitBrokers(""))
}

func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Partitions: 3})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// readTopic reads n records of topic from the start.
func readTopic(ctx context.Context, t *testing.T, brokers []string, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", len(out), n)
		require.NoError(t, fs.Err0())
		for _, r := range fs.Records() {
			require.Nil(t, r.Key, "records carry no key")
			out = append(out, string(r.Value))
		}
	}
	return out
}

func TestProduce(t *testing.T) {
	ctx := testCtx(t)
	b := startBroker(t)
	brokers := strings.Join(b.Addrs(), ",")
	lines := generateLines(3, 500)
	lines = append(lines, "", "  spaced  ", "ünïcode line")
	text := strings.Join(lines, "\n") + "\n"

	file := filepath.Join(t.TempDir(), "in.txt")
	require.NoError(t, os.WriteFile(file, []byte(strings.ReplaceAll(text, "\n", "\r\n")), 0o644))

	tests := []struct {
		name  string
		stdin string
		args  []string
		topic string
	}{
		{"file with CRLF", "", []string{"--file", file}, "text"},
		{"stdin", text, nil, "text-stdin"},
		{"stdin via dash", text, []string{"--file", "-"}, "text-dash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"produce", "--brokers", brokers}, tt.args...)
			if tt.topic != "text" {
				args = append(args, "--topic", tt.topic)
			}
			stdout, stderr, err := runCmd(ctx, tt.stdin, args...)
			require.NoError(t, err, stderr)
			require.Contains(t, stdout, "sent 503 records to topic \""+tt.topic+"\"")

			got := readTopic(ctx, t, b.Addrs(), tt.topic, len(lines))
			slices.Sort(got)
			want := slices.Clone(lines)
			slices.Sort(want)
			require.Equal(t, want, got, "every line arrives once, unchanged")
		})
	}
}

func TestProduceEmptyInput(t *testing.T) {
	ctx := testCtx(t)
	b := startBroker(t)
	stdout, _, err := runCmd(ctx, "", "produce", "--brokers", b.Addrs()[0])
	require.NoError(t, err)
	require.Contains(t, stdout, "sent 0 records")
}

func TestProduceErrors(t *testing.T) {
	ctx := testCtx(t)
	b := startBroker(t)

	_, _, err := runCmd(ctx, "", "produce", "--brokers", b.Addrs()[0], "--file", filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// A port nothing listens on: the listener is closed before use.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, _, err = runCmd(ctx, "x\n", "produce", "--brokers", dead)
	require.ErrorContains(t, err, "cannot reach brokers")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = runCmd(cancelled, "x\n", "produce", "--brokers", b.Addrs()[0])
	require.ErrorIs(t, err, context.Canceled)
}

// brokerProcess runs `demo broker` in a goroutine, as main would, and
// returns the address it reports and a function that interrupts it and
// waits for it to stop.
func brokerProcess(ctx context.Context, t *testing.T, args ...string) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"broker"}, args...), stdio{in: strings.NewReader(""), out: pw, err: io.Discard})
		pw.Close()
		done <- err
	}()
	stop = func() {
		cancel()
		var rest []string
		for l := range lines {
			rest = append(rest, l)
		}
		require.NoError(t, <-done)
		require.Contains(t, rest, "broker stopped")
	}
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("broker exited early: %v", <-done)
		}
		addr, found := strings.CutPrefix(l, "listening on ")
		require.True(t, found, "first line %q", l)
		return addr, stop
	case <-ctx.Done():
		t.Fatal("broker did not report its address")
	}
	return "", nil
}

func TestBrokerCommandPersists(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()

	addr, stop := brokerProcess(ctx, t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--partitions", "4")
	_, stderr, err := runCmd(ctx, "one\ntwo\n", "produce", "--brokers", addr)
	require.NoError(t, err, stderr)
	stop()

	addr, stop = brokerProcess(ctx, t, "--listen", "127.0.0.1:0", "--data-dir", dir)
	defer stop()
	got := readTopic(ctx, t, []string{addr}, "text", 2)
	slices.Sort(got)
	require.Equal(t, []string{"one", "two"}, got)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx, "text")
	require.NoError(t, err)
	require.Len(t, details["text"].Partitions, 4, "--partitions applies to auto-created topics")
}

func TestBrokerCommandListenError(t *testing.T) {
	ctx := testCtx(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	_, _, err = runCmd(ctx, "", "broker", "--listen", busy.Addr().String())
	require.ErrorContains(t, err, "address already in use")
}

// cancelAfter yields its first line, then cancels ctx and yields the rest,
// the way an interrupt lands in the middle of a large input.
type cancelAfter struct {
	first, rest string
	cancel      func()
	n           int
}

func (r *cancelAfter) Read(p []byte) (int, error) {
	r.n++
	switch r.n {
	case 1:
		return copy(p, r.first), nil
	case 2:
		r.cancel()
		return copy(p, r.rest), nil
	}
	return 0, io.EOF
}

func TestProduceInterrupted(t *testing.T) {
	ctx := testCtx(t)
	b := startBroker(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("text"), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()

	cctx, cancel := context.WithCancel(ctx)
	in := &cancelAfter{first: "a\n", rest: "b\nc\nd\n", cancel: cancel}
	_, err = produceLines(cctx, cl, in)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "interrupted with")
}
