package iq

// Following a watch over HTTP, as the routing Client does and as a server
// relays a watch its own replica cannot serve: one event stream at a time
// from the replicas of one partition, resumed on the next from the last
// position delivered whenever the one serving ends or falls silent.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/topology"
)

// watchCandidates orders the hosts of a partition for a watch: the active
// first, then standbys and warmups (all at random with PreferSpread),
// leaving out skip (the asking instance).
func watchCandidates(km KeyQueryMetadata, prefer Preference, skip string) []string {
	var hosts []string
	if km.Active != "" {
		hosts = append(hosts, km.Active)
	}
	hosts = append(hosts, km.Standbys...)
	hosts = append(hosts, km.Warmups...)
	if prefer == PreferSpread {
		rand.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	}
	return slices.DeleteFunc(hosts, func(h string) bool { return h == skip && skip != "" })
}

// Watch follows a key from outside the application, resuming on another
// replica whenever the one serving it ends the watch or stops answering.
// keyText and keyBytes are as for Get. Updates carry the value as the JSON
// the server rendered. It fails at once for what is wrong with the query
// itself; otherwise a replica that cannot serve is a pause: Next keeps
// trying the partition's replicas, refreshing the routing table, for as
// long as its context allows. A watch from now returns only once a replica
// has started it, so that Resume is a position from the first: Watch
// itself keeps trying the replicas, as long as ctx allows.
func (c *Client) Watch(ctx context.Context, store, keyText string, keyBytes []byte, opts WatchOptions) (*RemoteWatch, error) {
	return c.watchKey(ctx, store, keyBytes, opts, func(from int64) string { return watchPath(store, keyText, watchQuery(opts, from)) })
}

// watchKey follows a watch confined to the partition of keyBytes, asked
// from a position with path.
func (c *Client) watchKey(ctx context.Context, store string, keyBytes []byte, opts WatchOptions, path func(from int64) string) (*RemoteWatch, error) {
	m, _, err := c.metadata(ctx, false)
	if err != nil {
		return nil, err
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return nil, err
	}
	part := topology.Partition(keyBytes, n)
	prefer := opts.Prefer
	if prefer == PreferFreshest {
		prefer = c.opts.Prefer
	}
	rw := c.remoteWatch(store, part, opts, prefer, path)
	if err := rw.start(ctx); err != nil {
		return nil, err
	}
	return &RemoteWatch{rw}, nil
}

// remoteWatch follows the watch path asks for on the replicas of one
// partition that the client's routing table names.
func (c *Client) remoteWatch(store string, part int32, opts WatchOptions, prefer Preference, path func(from int64) string) *remoteWatch {
	return &remoteWatch{rt: c.rt, store: store, path: path, opts: opts, last: opts.From, part: part,
		hosts: func(ctx context.Context, refresh bool) ([]string, error) {
			m, _, err := c.metadata(ctx, refresh)
			if err != nil {
				return nil, err
			}
			km, err := locate(m, store, part)
			if err != nil {
				return nil, err
			}
			return watchCandidates(km, prefer, ""), nil
		}}
}

// RemoteWatch is a watch followed over HTTP (Client.Watch). Next is called
// from one goroutine at a time; Close from any.
type RemoteWatch struct{ rw *remoteWatch }

// Next returns the next update. It returns a *WatchEndedError wrapping
// ErrWatcherTooSlow when the reader fell behind the serving replica's
// buffer (resume with a new watch from its Resume), and ctx's error when
// ctx ends first; every other end of the serving replica is resumed on
// another.
func (w *RemoteWatch) Next(ctx context.Context) (Update, error) { return w.rw.Next(ctx) }

// Resume returns the position of the last update delivered, or the start.
func (w *RemoteWatch) Resume() int64 { return w.rw.last }

// Close ends the watch.
func (w *RemoteWatch) Close() { w.rw.Close() }

// remoteWatch follows a watch over HTTP across the replicas hosts names,
// connecting to the next one from the last delivered position whenever
// the current one ends.
type remoteWatch struct {
	rt    *router
	store string
	part  int32
	opts  WatchOptions
	hosts func(ctx context.Context, refresh bool) ([]string, error)
	// path is the request of the watch from a position.
	path func(from int64) string

	last     int64 // FromNow until the first stream said where it starts
	attempts int   // connections tried; after the first, the table is refreshed
	cur      *sseStream
}

type sseEvent struct {
	name string
	data []byte
}

// sseStream reads one HTTP event stream on a goroutine of its own.
type sseStream struct {
	host   string
	body   io.ReadCloser
	events chan sseEvent
	err    error // why events closed, read after it is
	once   sync.Once
}

func (st *sseStream) close() { st.once.Do(func() { st.body.Close() }) }

func (st *sseStream) read() {
	defer close(st.events)
	silence := time.AfterFunc(watchSilence, st.close)
	defer silence.Stop()
	br := bufio.NewReader(st.body)
	var name string
	var data []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			st.err = &transportError{host: st.host, err: fmt.Errorf("watch stream: %w", err)}
			return
		}
		silence.Reset(watchSilence)
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if name != "" {
				st.events <- sseEvent{name, data}
			}
			name, data = "", nil
		case line[0] == ':':
		default:
			f, v, _ := strings.Cut(string(line), ":")
			v = strings.TrimPrefix(v, " ")
			switch f {
			case "event":
				name = v
			case "data":
				data = append(data, v...)
			}
		}
	}
}

// connect opens a stream on the first candidate that serves the watch.
// It fails with the refusals when none does.
func (rw *remoteWatch) connect(ctx context.Context) error {
	hosts, err := rw.hosts(ctx, rw.attempts > 0)
	rw.attempts++
	if err != nil {
		return err
	}
	ue := &UnavailableError{Store: rw.store, Partition: rw.part, Bound: rw.opts.Staleness}
	for _, h := range hosts {
		st, err := rw.open(ctx, h)
		if err == nil {
			rw.cur = st
			return nil
		}
		if !reroutable(err) {
			return err
		}
		ue.Tried = append(ue.Tried, Attempt{Host: h, Err: err})
	}
	if len(hosts) == 0 {
		ue.Cause = errors.New("the routing table names no replica of the partition")
	}
	return ue
}

// start makes the watch's first connection. A watch from a position that
// no replica serves yet is handed out all the same, Next connecting it
// later from that position. A watch from now is not: until a replica
// says where it starts, nothing records which changes came after the
// watch began, and a later connection from now, or a resume from a "now"
// left in its place, would skip those committed meanwhile. So start keeps
// trying the partition's replicas, as Next does, until one serves the
// watch or ctx ends.
func (rw *remoteWatch) start(ctx context.Context) error {
	wait := 50 * time.Millisecond
	for {
		err := rw.connect(ctx)
		if err == nil || !reroutable(err) {
			return err
		}
		if rw.last != FromNow {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("iq: watch of store %q partition %d from now did not start: %w (last: %w)", rw.store, rw.part, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// open starts a watch on host from the last delivered position, and reads
// its start event.
func (rw *remoteWatch) open(ctx context.Context, host string) (*sseStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rw.rt.scheme+"://"+host+rw.path(rw.last), nil)
	if err != nil {
		return nil, err
	}
	if rw.rt.token != "" {
		req.Header.Set("Authorization", "Bearer "+rw.rt.token)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := rw.rt.hc.Do(req)
	if err != nil {
		return nil, &transportError{host: host, err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return nil, decodeErrorAnswer(resp.StatusCode, body)
	}
	st := &sseStream{host: host, body: resp.Body, events: make(chan sseEvent, 64)}
	go st.read()
	select {
	case ev, ok := <-st.events:
		if !ok || ev.name != "start" {
			st.close()
			return nil, &transportError{host: host, err: errors.New("watch stream did not start")}
		}
		var start struct {
			Position int64
			// Positions are a range watch's, per partition.
			Positions map[int32]int64
		}
		if err := json.Unmarshal(ev.data, &start); err != nil {
			st.close()
			return nil, &transportError{host: host, err: err}
		}
		if pos, ok := start.Positions[rw.part]; ok {
			start.Position = pos
		}
		if rw.last == FromNow {
			rw.last = start.Position
		}
		return st, nil
	case <-ctx.Done():
		st.close()
		return nil, ctx.Err()
	}
}

// Next returns the next update, resuming on another replica as needed.
func (rw *remoteWatch) Next(ctx context.Context) (Update, error) {
	wait := 50 * time.Millisecond
	for {
		if rw.cur == nil {
			if err := rw.connect(ctx); err != nil {
				if !reroutable(err) || ctx.Err() != nil {
					return Update{}, err
				}
				select {
				case <-ctx.Done():
					return Update{}, ctx.Err()
				case <-time.After(wait):
				}
				wait = min(2*wait, time.Second)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return Update{}, ctx.Err()
		case ev, ok := <-rw.cur.events:
			if !ok {
				rw.drop()
				continue
			}
			switch ev.name {
			case "update":
				var wu wireUpdate
				if err := json.Unmarshal(ev.data, &wu); err != nil || wu.ServedBy == nil {
					rw.drop()
					continue
				}
				if wu.Position <= rw.last && !wu.Current {
					continue
				}
				rw.last = wu.Position
				u := Update{Key: []byte(wu.Key), Value: wu.Value, json: true, Deleted: wu.Deleted, Timestamp: wu.TimestampMs, Position: wu.Position,
					Current: wu.Current, Coalesced: wu.Coalesced, Truncated: wu.Truncated, Provenance: wu.ServedBy.provenance(wu.Partition)}
				if wu.StartMs != nil && wu.EndMs != nil {
					u.Window = &WatchedWindow{Start: *wu.StartMs, End: *wu.EndMs}
				}
				return u, nil
			case "end":
				var end wireWatchEnd
				json.Unmarshal(ev.data, &end)
				rw.drop()
				if end.Reason == reasonWatcherTooSlow {
					return Update{}, &WatchEndedError{Store: rw.store, Partition: rw.part, Resume: rw.last, Err: ErrWatcherTooSlow}
				}
			}
		}
	}
}

func (rw *remoteWatch) drop() {
	if rw.cur != nil {
		rw.cur.close()
		rw.cur = nil
	}
}

// Close ends the watch.
func (rw *remoteWatch) Close() { rw.drop() }
