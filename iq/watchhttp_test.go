package iq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// changelogBackend is an instance whose one replica commits changes to a
// changelog it keeps, as an active does: the change is in the store and
// the position past it before it is published.
type changelogBackend struct {
	*fakeBackend
	hub Hub
	r   *fakeReplica

	mu  sync.Mutex
	log []Change
	// gate, when set, holds every read back of the changelog until it is
	// closed, and readBackErr then fails it.
	gate        chan struct{}
	readBackErr error
}

func (b *changelogBackend) Hub() *Hub { return &b.hub }

func (b *changelogBackend) ReadChangelog(ctx context.Context, _ string, _ int32, match func([]byte) bool, from, to int64) ([]Change, int64, error) {
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		if b.readBackErr != nil {
			return nil, 0, b.readBackErr
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Change
	for _, c := range b.log[from:min(to, int64(len(b.log)))] {
		if match(c.Key) {
			out = append(out, c)
		}
	}
	return out, 0, nil
}

// commit appends changes to the changelog, moves the replica past them and
// publishes them.
func (b *changelogBackend) commit(keys []string) {
	b.mu.Lock()
	changes := make([]Change, len(keys))
	for i, k := range keys {
		pos := int64(len(b.log))
		changes[i] = Change{Key: []byte(k), Value: []byte(strconv.FormatInt(pos, 10)), Position: pos}
		b.log = append(b.log, changes[i])
	}
	end := int64(len(b.log))
	b.mu.Unlock()
	b.r.set(func(i *ReplicaInfo) { i.Position, i.End = end, end })
	b.hub.Publish(b.r.info.Store, 0, changes)
}

// Watches started, and resumed from where they stopped, at any moment of
// a stream of commits each receive every change of their key after their
// start position, once and in order: a change is either read back or
// delivered live, whatever the interleaving.
func TestWatchesStartedDuringCommitsMissNothing(t *testing.T) {
	const commits, watchers = 400, 24
	keys := []string{"a", "b", "c"}
	fb := &changelogBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.r = fb.add("s", 0, RoleActive)
	fb.r.set(func(i *ReplicaInfo) { i.Position, i.End = 0, 0 })
	fb.commit(keys) // a position to watch from
	q := NewQuerier(fb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// last holds each key's last position once the commits are over.
	var last atomic.Pointer[map[string]int64]
	type result struct {
		key  string
		from int64
		got  []int64
		err  error
	}
	results := make([]result, watchers)
	var wg sync.WaitGroup
	for i := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			res := &results[i]
			res.key = keys[i%len(keys)]
			res.from = FromStart
			if i%2 == 1 {
				res.from = int64(rng.IntN(3))
			}
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			from := res.from
			for {
				w, err := q.WatchBytes(ctx, "s", []byte(res.key), WatchOptions{From: from, Buffer: 1 << 20})
				if err != nil {
					res.err = err
					return
				}
				// Each watch takes a few updates, then the watcher
				// resumes from where it stopped, as after a failover.
				for n := rng.IntN(20); n >= 0; n-- {
					if m := last.Load(); m != nil && len(res.got) > 0 && res.got[len(res.got)-1] == (*m)[res.key] {
						w.Close()
						return
					}
					nctx, ncancel := context.WithTimeout(ctx, 20*time.Millisecond)
					u, err := w.Next(nctx)
					ncancel()
					if ctx.Err() != nil {
						res.err = fmt.Errorf("at %v: %w", res.got, ctx.Err())
						w.Close()
						return
					}
					if err == nil {
						res.got = append(res.got, u.Position)
					}
				}
				from = w.Resume()
				w.Close()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range commits {
		batch := make([]string, 1+rng.IntN(3))
		for j := range batch {
			batch[j] = keys[rng.IntN(len(keys))]
		}
		fb.commit(batch)
		time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
	}
	fb.mu.Lock()
	log := slices.Clone(fb.log)
	fb.mu.Unlock()
	ends := map[string]int64{}
	for _, c := range log {
		ends[string(c.Key)] = c.Position
	}
	last.Store(&ends)
	wg.Wait()
	for i, res := range results {
		require.NoError(t, res.err, "watcher %d of %q from %d", i, res.key, res.from)
		var want []int64
		for _, c := range log {
			if string(c.Key) == res.key && c.Position > res.from {
				want = append(want, c.Position)
			}
		}
		require.Equal(t, want, res.got, "watcher %d of %q from %d", i, res.key, res.from)
	}
}

// An http.Server made by HTTPServer ends its watch streams when it shuts
// down, each with an end event saying where to resume, rather than
// waiting for the watchers to hang up.
func TestShutdownEndsWatchStreams(t *testing.T) {
	fb := &changelogBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.r = fb.add("s", 0, RoleActive)
	fb.r.set(func(i *ReplicaInfo) { i.Position, i.End = 0, 0 })
	fb.commit([]string{"a", "b"})
	api := NewServer(fb, ServerConfig{}, CodecFor("s", serde.String, serde.String, nil))
	srv := api.HTTPServer("127.0.0.1:0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	defer srv.Close()

	// A stream that never ends fails the reads below, not the whole run.
	hc := &http.Client{Timeout: 20 * time.Second}
	resp, err := hc.Get("http://" + ln.Addr().String() + "/v1/stores/s/watch?key=a&from=start")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	next := streamEvents(t, resp.Body)
	ev := next()
	require.Equal(t, "start", ev.name)
	ev = next()
	name, data := ev.name, ev.data
	require.Equal(t, "update", name)
	require.Contains(t, data, `"position":0`)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	ev = next()
	name, data = ev.name, ev.data
	require.Equal(t, "end", name)
	var end struct {
		Reason string
		Resume int64
	}
	require.NoError(t, json.Unmarshal([]byte(data), &end))
	require.Equal(t, "shutting_down", end.Reason, data)
	require.Equal(t, int64(0), end.Resume, "the last position sent")
	require.NoError(t, <-shut, "Shutdown returned once the streams ended, within its deadline")
}

// A reconnecting EventSource sends back the id of the last update it got
// as Last-Event-ID, to the URL it first asked: the watch resumes after
// that update, whatever the URL's from= (or a range watch's resume=)
// says, and without the current value a from=now&current=true URL asks
// for.
func TestWatchResumesFromLastEventID(t *testing.T) {
	fb := &changelogBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.r = fb.add("s", 0, RoleActive)
	fb.r.set(func(i *ReplicaInfo) { i.Position, i.End = 0, 0 })
	fb.commit([]string{"a", "b", "a", "b", "a"}) // a at 0, 2 and 4
	api := NewServer(fb, ServerConfig{}, CodecFor("s", serde.String, serde.String, nil))
	srv := httptest.NewServer(api)
	host := strings.TrimPrefix(srv.URL, "http://")
	fb.mu.Lock()
	fb.self = host
	fb.mu.Unlock()
	fb.setMeta(Metadata{Partitions: map[string]int32{"s": 1}, Hosts: []HostMetadata{{Host: host, Active: []StorePartition{{"s", 0}}}}}, nil)
	defer srv.Close()
	defer api.Close()
	hc := &http.Client{Timeout: 20 * time.Second}
	open := func(path, lastID string) (*http.Response, func() (string, string)) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		next := streamEvents(t, resp.Body)
		return resp, func() (string, string) {
			t.Helper()
			ev := next()
			return ev.name, ev.id
		}
	}
	for _, path := range []string{"/v1/stores/s/watch?key=a&from=now&current=true", "/v1/stores/s/watch?key=a&from=start"} {
		resp, event := open(path, "0")
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		name, _ := event()
		require.Equal(t, "start", name, path)
		for _, want := range []string{"2", "4"} {
			name, id := event()
			require.Equal(t, "update", name, path)
			require.Equal(t, want, id, "%s: the updates after the last event's, and only those", path)
		}
	}
	resp, _ := open("/v1/stores/s/watch?key=a&from=start", "x")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a Last-Event-ID that is no position")

	// A range watch's id is its resume token.
	resp, event := open("/v1/stores/s/range/watch?prefix=a&resume=start", RangeResume{0: 2}.String())
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("range watch: %d %s", resp.StatusCode, b)
	}
	name, _ := event()
	require.Equal(t, "start", name)
	name, id := event()
	require.Equal(t, "update", name)
	require.Equal(t, RangeResume{0: 4}.String(), id, "the range's updates after the token, not from the start")
}

// A watch whose first replica's host takes the connection and never
// answers (a paused process) is served by the next replica: the host's
// own time-out is no reason to give the watch up.
func TestWatchGoesPastAHostThatNeverAnswers(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hung.Close()
	var conns []net.Conn
	var connsMu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, c) // held open, never answered
			connsMu.Unlock()
		}
	}()
	defer func() {
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()

	fb := &changelogBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.r = fb.add("s", 0, RoleActive)
	fb.r.set(func(i *ReplicaInfo) { i.Position, i.End = 0, 0 })
	fb.commit([]string{"a", "b", "a"})
	api := NewServer(fb, ServerConfig{}, CodecFor("s", serde.String, serde.String, nil))
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer api.Close()
	serving := strings.TrimPrefix(srv.URL, "http://")
	fb.mu.Lock()
	fb.self = serving
	fb.mu.Unlock()
	// The routing table names the hung host as the active, asked first.
	fb.setMeta(Metadata{Partitions: map[string]int32{"s": 1}, Hosts: []HostMetadata{
		{Host: hung.Addr().String(), Active: []StorePartition{{"s", 0}}},
		{Host: serving, Standby: []StorePartition{{"s", 0}}},
	}}, nil)

	tr := &http.Transport{ResponseHeaderTimeout: 200 * time.Millisecond}
	defer tr.CloseIdleConnections()
	cl, err := NewClient([]string{serving}, ClientOptions{Transport: tr})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := cl.Watch(ctx, "s", "a", []byte("a"), WatchOptions{From: FromStart, Staleness: AnyStaleness()})
	require.NoError(t, err)
	defer w.Close()
	for _, want := range []int64{0, 2} {
		u, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, want, u.Position)
		require.Equal(t, serving, u.Provenance.Host)
	}
}

// streamEvent is one event of a stream as a plain HTTP client reads it.
type streamEvent struct{ name, id, data string }

// streamEvents returns a function that reads the next event of body.
func streamEvents(t *testing.T, body io.Reader) func() streamEvent {
	br := bufio.NewReader(body)
	return func() streamEvent {
		t.Helper()
		var ev streamEvent
		for {
			line, err := br.ReadString('\n')
			require.NoError(t, err, "reading the stream")
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "" && ev.name != "":
				return ev
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}
}

// A watch over HTTP from a position opens its stream before it reads the
// changelog back: the headers and the start event come at once however
// long the read back takes (a client gives up on a host that sends no
// headers), and a read back that fails ends the stream with where to
// resume.
func TestWatchStreamOpensBeforeItsReadBack(t *testing.T) {
	for _, fail := range []bool{false, true} {
		fb := &changelogBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1}), gate: make(chan struct{})}
		if fail {
			fb.readBackErr = errors.New("the broker is away")
		}
		fb.r = fb.add("s", 0, RoleActive)
		fb.r.set(func(i *ReplicaInfo) { i.Position, i.End = 0, 0 })
		fb.commit([]string{"a", "b", "a"})
		api := NewServer(fb, ServerConfig{}, CodecFor("s", serde.String, serde.String, nil))
		srv := httptest.NewServer(api)
		hc := &http.Client{Timeout: 20 * time.Second}
		resp, err := hc.Get(srv.URL + "/v1/stores/s/watch?key=a&from=start&route=false")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "answered while the read back waits")
		next := streamEvents(t, resp.Body)
		ev := next()
		require.Equal(t, "start", ev.name)
		close(fb.gate)
		if fail {
			ev = next()
			require.Equal(t, "end", ev.name)
			require.Contains(t, ev.data, `"resume":-1`, "resumed from the start: nothing was delivered")
			require.Contains(t, ev.data, "the broker is away")
		} else {
			for _, want := range []string{"0", "2"} {
				ev = next()
				require.Equal(t, "update", ev.name)
				require.Equal(t, want, ev.id)
			}
		}
		resp.Body.Close()
		srv.Close()
		api.Close()
	}
}
