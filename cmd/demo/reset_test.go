package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
)

func TestResetUsageErrors(t *testing.T) {
	ctx := testCtx(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"reset"}, "--brokers is required"},
		{[]string{"reset", "--brokers", "x:1", "--to-time", "yesterday"}, "--to-time: want RFC 3339"},
		{[]string{"reset", "--brokers", "x:1", "--sasl-password", "pw"}, "need --sasl-user"},
		{[]string{"reset", "--brokers", "x:1", "stray"}, `unexpected argument "stray"`},
	} {
		_, stderr, err := runCmd(ctx, "", tt.args...)
		require.ErrorIs(t, err, errUsage, "%v", tt.args)
		require.Contains(t, stderr, tt.want)
		require.Contains(t, stderr, "usage: demo reset")
	}
	at, err := parseResetTime("2026-01-02T15:04:05Z")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), at.UTC())
	at, err = parseResetTime("1767366245000")
	require.NoError(t, err)
	require.Equal(t, int64(1767366245000), at.UnixMilli())
}

// TestResetCommand runs `demo reset` against an embedded broker speaking
// only TLS and SASL/SCRAM: refused while the instance runs, a dry run that
// changes nothing, then the reset, and a restarted instance that counts the
// input once.
func TestResetCommand(t *testing.T) {
	ctx := testCtx(t)
	certs, err := broker.GenerateCerts()
	require.NoError(t, err)
	certDir := t.TempDir()
	require.NoError(t, certs.WriteFiles(certDir))
	srv, err := certs.ServerTLS(false)
	require.NoError(t, err)
	b, err := broker.Start(broker.Config{
		Partitions: 2,
		TLS:        srv,
		Users:      []broker.User{{Mechanism: broker.MechanismSCRAMSHA512, Name: "admin", Password: "pw", Superuser: true}},
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	brokers := strings.Join(b.Addrs(), ",")
	secFlags := []string{"--tls-ca", filepath.Join(certDir, broker.CAFile), "--sasl-user", "admin", "--sasl-password", "pw"}
	clientTLS, err := certs.ClientTLS(false)
	require.NoError(t, err)
	mech, err := broker.ClientMechanism(broker.MechanismSCRAMSHA512, "admin", "pw")
	require.NoError(t, err)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs()...)}, clientOpts(clientTLS, mech)...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)

	stateDir := t.TempDir()
	start := func() *instance {
		in, err := startInstance(ctx, instanceOptions{
			brokers: b.Addrs(), stateDir: stateDir, app: "wordcount",
			logger: slog.New(slog.NewTextHandler(io.Discard, nil)), sessionTimeout: time.Second,
			tls: clientTLS, sasl: mech,
		})
		require.NoError(t, err)
		t.Cleanup(func() { in.close() })
		return in
	}
	in := start()
	lines := generateLines(11, 200)
	want := make(map[string]int64)
	for _, l := range lines {
		for _, w := range words(l) {
			want[w]++
		}
	}
	_, stderr, err := runCmd(ctx, strings.Join(lines, "\n"), append([]string{"produce", "--brokers", brokers}, secFlags...)...)
	require.NoError(t, err, stderr)
	counted := func(in *instance) {
		waitUntil(t, 20*time.Second, "the counts are exact", func() (bool, string) {
			for w, n := range want {
				if got, err := lookup(in, w); err != nil || got != n {
					return false, fmt.Sprintf("%s: %d (%v), want %d", w, got, err, n)
				}
			}
			return true, ""
		})
	}
	counted(in)

	internal := []string{"wordcount-counts-changelog", "wordcount-words-repartition"}
	exist := func() []string {
		listed, err := adm.ListTopics(ctx, internal...)
		require.NoError(t, err)
		var out []string
		for _, n := range internal {
			if d, ok := listed[n]; ok && d.Err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	reset := append([]string{"reset", "--brokers", brokers, "--state-dir", stateDir}, secFlags...)

	// Refused while the instance runs: from another machine by its group,
	// and on its own by the lock on its state directory.
	_, _, err = runCmd(ctx, "", append([]string{"reset", "--brokers", brokers}, secFlags...)...)
	require.ErrorContains(t, err, "cannot reset application \"wordcount\"")
	require.ErrorContains(t, err, "members")
	require.Equal(t, 1, exitCode(err, io.Discard))
	_, _, err = runCmd(ctx, "", reset...)
	require.ErrorContains(t, err, "state directory is locked")
	require.NoError(t, in.close())

	stdout, stderr, err := runCmd(ctx, "", append(reset, "--dry-run")...)
	require.NoError(t, err, stderr)
	require.Contains(t, stdout, "dry run: nothing is changed")
	require.Contains(t, stdout, "would delete topic wordcount-counts-changelog")
	require.Contains(t, stdout, "would delete topic wordcount-words-repartition")
	require.Contains(t, stdout, "would set group wordcount offsets on input topic text to 0:0 1:0")
	require.Contains(t, stdout, "would delete")
	require.Equal(t, internal, exist(), "a dry run deletes nothing")
	entries, err := os.ReadDir(filepath.Join(stateDir, "wordcount"))
	require.NoError(t, err)
	require.Greater(t, len(entries), 2, "a dry run wipes nothing")

	stdout, stderr, err = runCmd(ctx, "", reset...)
	require.NoError(t, err, stderr)
	require.Contains(t, stdout, "deleted topic wordcount-counts-changelog")
	require.Contains(t, stdout, "set group wordcount offsets on input topic text to 0:0 1:0")
	require.Contains(t, stdout, "of local state directory "+filepath.Join(stateDir, "wordcount"))
	require.Empty(t, exist())
	entries, err = os.ReadDir(filepath.Join(stateDir, "wordcount"))
	require.NoError(t, err)
	for _, e := range entries {
		require.Contains(t, []string{".lock", "process-id"}, e.Name(), "only the lock and the process ID are kept")
	}

	// Counted again from the start, once.
	counted(start())
}
