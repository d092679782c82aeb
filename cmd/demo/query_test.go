package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantPos   []string
		wantHTTP  string
		wantStale string
		wantErr   error
	}{
		{name: "flags first", args: []string{"--http", "a:1", "fox"}, wantPos: []string{"fox"}, wantHTTP: "a:1"},
		{name: "word first", args: []string{"fox", "--http", "a:1"}, wantPos: []string{"fox"}, wantHTTP: "a:1"},
		{name: "word between flags", args: []string{"--http", "a:1", "fox", "--staleness", "any"}, wantPos: []string{"fox"}, wantHTTP: "a:1", wantStale: "any"},
		{name: "equals form", args: []string{"fox", "-staleness=lag:3"}, wantPos: []string{"fox"}, wantStale: "lag:3"},
		{name: "several positionals keep their order", args: []string{"b", "--http", "a:1", "a"}, wantPos: []string{"b", "a"}, wantHTTP: "a:1"},
		{name: "double dash ends flags", args: []string{"--http", "a:1", "--", "-fox", "--staleness"}, wantPos: []string{"-fox", "--staleness"}, wantHTTP: "a:1"},
		{name: "double dash after a word", args: []string{"fox", "--", "--http"}, wantPos: []string{"fox", "--http"}},
		{name: "no positionals", args: []string{"--http", "a:1"}, wantHTTP: "a:1"},
		{name: "unknown flag after a word", args: []string{"fox", "--nope"}, wantErr: errUsage},
		{name: "missing flag value", args: []string{"fox", "--http"}, wantErr: errUsage},
		{name: "help", args: []string{"fox", "-h"}, wantErr: flag.ErrHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			h := fs.String("http", "", "")
			s := fs.String("staleness", "", "")
			pos, err := parseInterspersed(fs, tt.args)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantPos, pos)
			require.Equal(t, tt.wantHTTP, *h)
			require.Equal(t, tt.wantStale, *s)
		})
	}
}

func TestQueryUsageErrors(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no http", []string{"fox"}, "--http: an instance's HOST:PORT is required"},
		{"bad http", []string{"--http", "localhost", "fox"}, `want HOST:PORT, got "localhost"`},
		{"no word", []string{"--http", "a:1"}, "want exactly one WORD, got 0"},
		{"two words", []string{"--http", "a:1", "fox", "dog"}, "want exactly one WORD, got 2"},
		{"not one word", []string{"--http", "a:1", "fox dog"}, `"fox dog" is not one word`},
		{"no letters", []string{"--http", "a:1", "--", "--"}, `"--" is not one word`},
		{"bad staleness", []string{"--http", "a:1", "fox", "--staleness", "lag:x"}, "--staleness: iq: invalid query"},
		{"bad last", []string{"--http", "a:1", "fox", "--windows", "--last", "0"}, "--last must be positive"},
		{"bad timeout", []string{"--http", "a:1", "fox", "--timeout", "0s"}, "--timeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runCmd(ctx, "", append([]string{"query"}, tt.args...)...)
			require.ErrorIs(t, err, errUsage)
			require.Contains(t, stderr, tt.want)
			require.Contains(t, stderr, "usage: demo query")
		})
	}
}

// cannedServer answers every request with status and body, and records
// the request URIs.
func cannedServer(t *testing.T, status int, body string) (addr string, uris func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T, host string) string {
	ln, err := net.Listen("tcp", host+":0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestQueryAnswersAndRefusals(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name    string
		status  int
		body    string
		args    []string
		wantURI string
		wantOut []string // substrings of stdout
		wantErr []string // substrings of the error; none means success
	}{
		{
			name:   "count, word normalized, bound passed on",
			status: 200, body: `{"key":"fox","value":42,"partition":2,"served_by":{"host":"h:1","role":"standby","position":99,"lag":3}}`,
			args:    []string{"Fox", "--staleness", "lag:5"},
			wantURI: "/v1/stores/counts/keys?key=fox&route=true&staleness=lag%3A5",
			wantOut: []string{"fox: 42\n", "served by h:1: standby replica of counts partition 2 at position 99, lag 3\n"},
		},
		{
			name:   "what the replica cannot vouch for is said so",
			status: 404, body: `{"key":"fox","partition":2,"error":"key not found","served_by":{"host":"h:1","role":"standby","position":null,"lag":null,"rebuilding":true}}`,
			args:    []string{"fox", "--staleness", "any"},
			wantURI: "/v1/stores/counts/keys?key=fox&route=true&staleness=any",
			wantOut: []string{"served by h:1: standby replica of counts partition 2 rebuilding, lag unknown\n"},
		},
		{
			name:   "absent word is an answer",
			status: 404, body: `{"key":"zebra","partition":1,"error":"key not found","served_by":{"host":"h:2","role":"active","position":7,"lag":0}}`,
			args:    []string{"zebra"},
			wantURI: "/v1/stores/counts/keys?key=zebra&route=true&staleness=active",
			wantOut: []string{"zebra: not counted (no such word in counts partition 1)", "served by h:2: active replica"},
		},
		{
			name:   "windows: the last minutes with provenance",
			status: 200, body: `{"key":"fox","partition":1,"served_by":{"host":"h:3","role":"active","position":12,"lag":0},"windows":[` +
				`{"key":"fox","start":"2024-05-01T12:00:00.000Z","end":"2024-05-01T12:01:00.000Z","start_ms":1,"end_ms":2,"value":4},` +
				`{"key":"fox","start":"2024-05-01T12:01:00.000Z","end":"2024-05-01T12:02:00.000Z","start_ms":1,"end_ms":2,"value":7},` +
				`{"key":"fox","start":"2024-05-01T12:02:00.000Z","end":"2024-05-01T12:03:00.000Z","start_ms":1,"end_ms":2,"value":2}]}`,
			args:    []string{"--windows", "--last", "2", "Fox", "--staleness", "lag:5"},
			wantURI: "/v1/stores/counts-per-minute/windows?key=fox&route=true&staleness=lag%3A5",
			wantOut: []string{"fox per minute:\n  2024-05-01T12:01:00.000Z - 2024-05-01T12:02:00.000Z  7\n  2024-05-01T12:02:00.000Z - 2024-05-01T12:03:00.000Z  2\n" +
				"served by h:3: active replica of counts-per-minute partition 1 at position 12, lag 0\n"},
		},
		{
			name:   "windows: a word without minutes is an answer",
			status: 404, body: `{"key":"zebra","partition":0,"error":"no windows for the key in the time range","windows":[],"served_by":{"host":"h:2","role":"standby","position":5,"lag":null}}`,
			args:    []string{"zebra", "--windows"},
			wantURI: "/v1/stores/counts-per-minute/windows?key=zebra&route=true&staleness=active",
			wantOut: []string{"zebra: no counts in the minutes counts-per-minute keeps (partition 0)\n", "served by h:2: standby replica of counts-per-minute partition 0 at position 5, lag unknown"},
		},
		{
			name:   "windows: a refusal is an error",
			status: 503, body: `{"error":"iq: no replica","reason":"not_available","tried":[{"host":"h:1","error":"too stale","reason":"too_stale"}]}`,
			args:    []string{"fox", "--windows"},
			wantErr: []string{`query "fox": no replica could answer within staleness=active (HTTP 503)`, "tried h:1: too_stale"},
		},
		{
			name:   "json prints the answer unchanged",
			status: 200, body: `{"key":"fox","value":1,"partition":0,"served_by":{"host":"h:1","role":"active","position":1,"lag":0}}`,
			args:    []string{"--json", "fox"},
			wantOut: []string{`{"key":"fox","value":1,"partition":0,"served_by":{"host":"h:1","role":"active","position":1,"lag":0}}`},
		},
		{
			name:   "no replica within the bound: every attempt and a hint",
			status: 503, body: `{"error":"iq: store \"counts\" partition 1: no replica could answer","reason":"not_available","partition":1,
				"tried":[{"host":"h:1","error":"iq: h:1 unreachable: connection refused","reason":"unreachable"},
				         {"host":"h:2","error":"iq: standby replica refuses staleness=active","reason":"too_stale"}]}`,
			args: []string{"fox"},
			wantErr: []string{`query "fox": no replica could answer within staleness=active (HTTP 503)`,
				"tried h:1: unreachable: iq: h:1 unreachable: connection refused", "tried h:2: too_stale",
				"--staleness lag:10000"},
		},
		{
			name:   "no replica with a loose bound: retry",
			status: 503, body: `{"error":"iq: no replica could answer: no host holds the partition","reason":"not_available","tried":[]}`,
			args:    []string{"fox", "--staleness", "any"},
			wantErr: []string{"within staleness=any", "no host holds the partition", "retry shortly: the cluster is probably rebalancing"},
		},
		{
			name:   "not started",
			status: 503, body: `{"error":"iq: instance has not received its first assignment yet","reason":"not_started"}`,
			args:    []string{"fox"},
			wantErr: []string{"has not received its first assignment yet; retry in a few seconds"},
		},
		{
			name:   "shutting down",
			status: 503, body: `{"error":"iq: instance is shutting down","reason":"shutting_down"}`,
			args:    []string{"fox"},
			wantErr: []string{"is shutting down; ask another instance"},
		},
		{
			name:   "other refusals say status, reason and message",
			status: 404, body: `{"error":"iq: unknown store","reason":"unknown_store"}`,
			args:    []string{"fox"},
			wantErr: []string{"refused it with HTTP 404 Not Found (unknown_store): iq: unknown store"},
		},
		{
			name:   "not the query API",
			status: 404, body: `404 page not found`,
			args:    []string{"fox"},
			wantErr: []string{"answered HTTP 404 Not Found, which is not an answer of the query API", "--http address"},
		},
		{
			name:   "json still fails on a refusal",
			status: 503, body: `{"error":"x","reason":"rebalancing"}`,
			args:    []string{"fox", "--json"},
			wantOut: []string{`{"error":"x","reason":"rebalancing"}`},
			wantErr: []string{"(rebalancing): x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, uris := cannedServer(t, tt.status, tt.body)
			stdout, _, err := runCmd(ctx, "", append([]string{"query", "--http", "http://" + addr + "/"}, tt.args...)...)
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				require.NotErrorIs(t, err, errUsage)
				require.Equal(t, 1, exitCode(err, io.Discard))
				for _, w := range tt.wantErr {
					require.Contains(t, err.Error(), w)
				}
			}
			for _, w := range tt.wantOut {
				require.Contains(t, stdout, w)
			}
			if tt.wantURI != "" {
				require.Equal(t, []string{tt.wantURI}, uris())
			}
		})
	}

	t.Run("nothing listening", func(t *testing.T) {
		addr := deadAddr(t, "127.0.0.1")
		_, _, err := runCmd(ctx, "", "query", "--http", addr, "fox")
		require.ErrorContains(t, err, `query "fox": cannot reach the instance at `+addr)
	})
	t.Run("no answer in time", func(t *testing.T) {
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		defer hang.Close()
		_, _, err := runCmd(ctx, "", "query", "--http", hang.Listener.Addr().String(), "--timeout", "100ms", "fox")
		require.ErrorContains(t, err, "no answer from "+hang.Listener.Addr().String()+" within 100ms")
	})
	t.Run("interrupted", func(t *testing.T) {
		addr, _ := cannedServer(t, 200, `{}`)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, _, err := runCmd(cancelled, "", "query", "--http", addr, "fox")
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestNormalizeHTTP(t *testing.T) {
	for in, want := range map[string]string{"a:1": "a:1", " http://a:1/ ": "a:1", "https://a:1": "a:1", "[::1]:80": "[::1]:80"} {
		got, err := normalizeHTTP(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", "http://", "https://", "a", "ftp://a:1"} {
		_, err := normalizeHTTP(in)
		require.Error(t, err, in)
	}
	require.True(t, strings.HasPrefix(querySynopsis, "--http HOST:PORT WORD"))
}
