package iq

// Watches over HTTP, as Server-Sent Events:
//
//	GET /v1/stores/{store}/keys/{key}/watch  (or /v1/stores/{store}/watch?key=)
//	    ?from=N|start|now (default now) &current=true &staleness= &prefer= &route= (default true)
//	    &coalesce=true &buffer=N
//
// The answer is text/event-stream. It opens with an event "start" whose
// data is {"position"} (the position the watch starts after), then one
// event "update" per change, its id the change's position and its data
// {"key","value","deleted","timestamp_ms","position","partition","current",
// "coalesced","truncated","served_by"}. A watch that cannot go on where it
// is served ends with an event "end": an error answer with "resume", the
// position to resume from. Comments (": ping") keep an idle stream alive.
// A watch that cannot start is answered like a key lookup that failed,
// except that an unknown store or a malformed parameter is a 400.
//
// A routed watch (route=true) that the local replica cannot serve, or can
// no longer serve, is relayed from another instance's replica from the last
// position sent, and resumed on another when that one ends or stops
// answering: the stream's reader sees a pause, never a gap or a duplicate.

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
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/topology"
)

// watchPing is how often an idle stream carries a comment, and
// watchSilence how long a reader waits without a byte before it takes the
// stream for dead and resumes elsewhere.
const (
	watchPing    = time.Second
	watchSilence = 5 * time.Second
)

// wireUpdate is the data of an "update" event.
type wireUpdate struct {
	Key         string          `json:"key"`
	Value       json.RawMessage `json:"value,omitempty"`
	Deleted     bool            `json:"deleted,omitempty"`
	TimestampMs int64           `json:"timestamp_ms"`
	Position    int64           `json:"position"`
	Partition   int32           `json:"partition"`
	Current     bool            `json:"current,omitempty"`
	Coalesced   bool            `json:"coalesced,omitempty"`
	Truncated   bool            `json:"truncated,omitempty"`
	ServedBy    *wireServedBy   `json:"served_by"`
	// StartMs and EndMs bound the window of a window watch's update.
	StartMs *int64 `json:"start_ms,omitempty"`
	EndMs   *int64 `json:"end_ms,omitempty"`
}

// wireWatchEnd is the data of an "end" event.
type wireWatchEnd struct {
	wireError
	Resume int64 `json:"resume"`
}

func (s *Server) registerWatches() {
	s.mux.HandleFunc("GET /v1/stores/{store}/keys/{key}/watch", func(w http.ResponseWriter, r *http.Request) {
		s.handleWatch(w, r, r.PathValue("key"))
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/watch", func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("key") {
			refuseWatch(w, invalidf("a watch needs a key: /v1/stores/%s/watch?key=KEY", r.PathValue("store")))
			return
		}
		s.handleWatch(w, r, r.URL.Query().Get("key"))
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/range/watch", s.handleRangeWatch)
	s.mux.HandleFunc("GET /v1/stores/{store}/keys/{key}/windows/watch", func(w http.ResponseWriter, r *http.Request) {
		s.handleWindowWatch(w, r, r.PathValue("key"))
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/windows/watch", func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("key") {
			refuseWatch(w, invalidf("a window watch needs a key: /v1/stores/%s/windows/watch?key=KEY", r.PathValue("store")))
			return
		}
		s.handleWindowWatch(w, r, r.URL.Query().Get("key"))
	})
}

// refuseWatch answers a watch that cannot start. What is wrong with the
// request itself, an unknown store included, is a 400.
func refuseWatch(w http.ResponseWriter, err error) {
	status, we := toWireError(err)
	if errors.Is(err, ErrUnknownStore) || errors.Is(err, ErrInvalidQuery) || errors.Is(err, ErrUnknownPartition) {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, we)
}

// parseWatch reads a key watch's parameters.
func parseWatch(v url.Values) (WatchOptions, bool, error) {
	o, route, err := parseWatchFlags(v)
	if err != nil {
		return o, false, err
	}
	switch s := v.Get("from"); s {
	case "", "now":
	case "start":
		o.From = FromStart
	default:
		if o.From, err = strconv.ParseInt(s, 10, 64); err != nil || o.From < 0 {
			return o, false, invalidf("from=%q: want now, start or a changelog position", s)
		}
	}
	if o.Current && o.From != FromNow {
		return o, false, invalidf("current=true needs from=now: a watch from a position delivers the changes after it")
	}
	return o, route, nil
}

// parseWatchFlags reads the parameters key and range watches share: all
// but where they start.
func parseWatchFlags(v url.Values) (WatchOptions, bool, error) {
	o := WatchOptions{From: FromNow}
	route := true
	var err error
	if o.Staleness, err = ParseStaleness(v.Get("staleness")); err != nil {
		return o, false, err
	}
	if o.Prefer, err = ParsePreference(v.Get("prefer")); err != nil {
		return o, false, err
	}
	if v.Has("current") {
		if o.Current, err = parseBool(v, "current"); err != nil {
			return o, false, err
		}
	}
	if v.Has("coalesce") {
		if o.Coalesce, err = parseBool(v, "coalesce"); err != nil {
			return o, false, err
		}
	}
	if v.Has("route") {
		if route, err = parseBool(v, "route"); err != nil {
			return o, false, err
		}
	}
	if s := v.Get("buffer"); s != "" {
		if o.Buffer, err = strconv.Atoi(s); err != nil || o.Buffer <= 0 {
			return o, false, invalidf("buffer=%q: want a positive count", s)
		}
	}
	return o, route, nil
}

// parseBool reads a true or false parameter.
func parseBool(v url.Values, name string) (bool, error) {
	b, err := strconv.ParseBool(v.Get(name))
	if err != nil {
		return false, invalidf("%s=%q: want true or false", name, v.Get(name))
	}
	return b, nil
}

// watchQuery is the query of a key watch request to another instance.
func watchQuery(o WatchOptions, from int64) url.Values {
	q := watchFlags(o)
	switch from {
	case FromNow:
		q.Set("from", "now")
		if o.Current {
			q.Set("current", "true")
		}
	case FromStart:
		q.Set("from", "start")
	default:
		q.Set("from", strconv.FormatInt(from, 10))
	}
	return q
}

// watchFlags is the query of a watch request to another instance but for
// where it starts.
func watchFlags(o WatchOptions) url.Values {
	q := url.Values{"staleness": {o.Staleness.String()}, "route": {"false"}}
	if o.Coalesce {
		q.Set("coalesce", "true")
	}
	if o.Buffer > 0 {
		q.Set("buffer", strconv.Itoa(o.Buffer))
	}
	return q
}

func watchPath(store, keyText string, q url.Values) string {
	q.Set("key", keyText)
	return "/v1/stores/" + url.PathEscape(store) + "/watch?" + q.Encode()
}

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	c, ok := s.codecs[store]
	if !ok {
		refuseWatch(w, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
		return
	}
	o, route, err := parseWatch(r.URL.Query())
	if err != nil {
		refuseWatch(w, err)
		return
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		refuseWatch(w, invalidf("malformed key %q for store %q: %v", keyText, store, err))
		return
	}
	s.serveKeyWatch(w, r, c, keyText, kb, o, route,
		func(ctx context.Context) (*Watch, error) { return s.q.WatchBytes(ctx, store, kb, o) },
		func(from int64) string { return watchPath(store, keyText, watchQuery(o, from)) })
}

// serveKeyWatch streams a watch confined to one key's partition (a key's
// or its windows'): started on the local replica by local, or, routed,
// relayed from another instance that path asks from a position, from the
// start or from where the local replica could not go on.
func (s *Server) serveKeyWatch(w http.ResponseWriter, r *http.Request, c StoreCodec, keyText string, kb []byte, o WatchOptions, route bool,
	local func(context.Context) (*Watch, error), path func(from int64) string) {
	store := r.PathValue("store")
	ctx := r.Context()
	lw, localErr := local(ctx)
	if localErr != nil && (!route || !reroutable(localErr)) {
		refuseWatch(w, localErr)
		return
	}
	part, err := s.b.KeyPartition(store, kb)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	var rw *remoteWatch
	defer func() {
		if rw != nil {
			rw.Close()
		}
	}()
	if localErr == nil {
		defer lw.Close()
		sse := startEvents(w, s.cfg.WriteTimeout)
		sse.send("start", "", map[string]int64{"position": lw.Resume()})
		next := lw.Next
		if route {
			next = func(ctx context.Context) (Update, error) {
				if rw == nil {
					u, err := lw.Next(ctx)
					var ee *WatchEndedError
					if !errors.As(err, &ee) || errors.Is(err, ErrWatcherTooSlow) {
						return u, err
					}
					// The local replica cannot go on: the watch goes on
					// from where it stopped on whichever replica can,
					// this instance's next one included.
					rw = s.relayBy(store, part, o, ee.Resume, "", path)
				}
				return rw.Next(ctx)
			}
		}
		s.streamWatch(ctx, sse, c, keyText, next)
		return
	}
	rw = s.relayBy(store, part, o, o.From, s.b.Self(), path)
	// The first connection decides between a stream and a refusal.
	if err := rw.connect(ctx); err != nil {
		refuseWatch(w, err)
		return
	}
	sse := startEvents(w, s.cfg.WriteTimeout)
	sse.send("start", "", map[string]int64{"position": rw.last})
	s.streamWatch(ctx, sse, c, keyText, rw.Next)
}

// relayBy follows a watch asked with path on the partition's other
// replicas from position from, leaving out the instance skip names.
func (s *Server) relayBy(store string, part int32, o WatchOptions, from int64, skip string, path func(from int64) string) *remoteWatch {
	return &remoteWatch{rt: s.rt, store: store, path: path, opts: o, last: from, part: part,
		hosts: func(context.Context, bool) ([]string, error) {
			m, err := s.b.Metadata()
			if err != nil {
				return nil, err
			}
			km, err := locate(m, store, part)
			if err != nil {
				return nil, err
			}
			return watchCandidates(km, o.Prefer, skip), nil
		}}
}

// reasonWatcherTooSlow is the reason of the end event of a watch whose
// reader fell behind its buffer (ErrWatcherTooSlow).
const reasonWatcherTooSlow = "too_slow"

// streamWatch sends a watch's updates as events until it ends or the
// reader goes away.
func (s *Server) streamWatch(ctx context.Context, sse *events, c StoreCodec, keyText string, next func(context.Context) (Update, error)) {
	ctx, cancel := context.WithCancel(ctx)
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		sse.pings(ctx, cancel)
	}()
	// The response must not be written once the handler returns.
	defer func() {
		cancel()
		<-pinging
	}()
	for {
		u, err := next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			_, we := toWireError(err)
			end := wireWatchEnd{wireError: we, Resume: -1}
			var ee *WatchEndedError
			if errors.As(err, &ee) {
				end.Resume = ee.Resume
			}
			if errors.Is(err, ErrWatcherTooSlow) {
				end.Reason = reasonWatcherTooSlow
			}
			sse.send("end", "", end)
			return
		}
		wu, err := encodeUpdate(c, keyText, u)
		if err != nil {
			sse.send("end", "", wireWatchEnd{wireError: wireError{Error: err.Error(), Reason: reasonInternal}, Resume: u.Position - 1})
			return
		}
		if !sse.send("update", strconv.FormatInt(u.Position, 10), wu) {
			return
		}
	}
}

// encodeUpdate renders an update as an event's data.
func encodeUpdate(c StoreCodec, keyText string, u Update) (wireUpdate, error) {
	wu := wireUpdate{Key: keyText, Deleted: u.Deleted, TimestampMs: u.Timestamp, Position: u.Position, Partition: u.Provenance.Partition,
		Current: u.Current, Coalesced: u.Coalesced, Truncated: u.Truncated, ServedBy: servedBy(u.Provenance)}
	if u.Window != nil {
		wu.StartMs, wu.EndMs = &u.Window.Start, &u.Window.End
	}
	if u.Deleted {
		return wu, nil
	}
	if u.json {
		wu.Value = u.Value
		return wu, nil
	}
	v, err := c.DecodeValue(u.Value)
	if err == nil {
		wu.Value, err = json.Marshal(v)
	}
	if err != nil {
		return wu, fmt.Errorf("iq: decode value: %w", err)
	}
	return wu, nil
}

// events writes Server-Sent Events, each write bounded by the server's
// write timeout rather than the connection's (which a stream outlives).
type events struct {
	mu      sync.Mutex // pings and events come from two goroutines
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func startEvents(w http.ResponseWriter, timeout time.Duration) *events {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	e := &events{w: w, rc: http.NewResponseController(w), timeout: timeout}
	e.rc.Flush()
	return e
}

func (e *events) write(b []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	if _, err := e.w.Write(b); err != nil {
		return false
	}
	return e.rc.Flush() == nil
}

func (e *events) send(event, id string, data any) bool {
	b, err := json.Marshal(data)
	if err != nil {
		return false
	}
	var buf bytes.Buffer
	buf.WriteString("event: " + event + "\n")
	if id != "" {
		buf.WriteString("id: " + id + "\n")
	}
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	return e.write(buf.Bytes())
}

// pings keeps an idle stream alive until ctx ends, and calls gone when a
// ping cannot be written.
func (e *events) pings(ctx context.Context, gone func()) {
	t := time.NewTicker(watchPing)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !e.write([]byte(": ping\n\n")) {
				gone()
				return
			}
		}
	}
}

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
// long as its context allows.
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
	if err := rw.connect(ctx); err != nil {
		if !reroutable(err) {
			return nil, err
		}
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
