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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
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

// resumeFromLastEvent makes a key or window watch resume after the
// position a reconnecting EventSource sends back as Last-Event-ID (the id
// of the last update it received), whatever the URL says: the browser
// reconnects to the same URL, whose from= (or resume=) would start the
// watch again from now or from the start, skipping or repeating changes.
// A fresh EventSource sends no Last-Event-ID.
func resumeFromLastEvent(r *http.Request, o *WatchOptions) error {
	id := r.Header.Get("Last-Event-ID")
	if id == "" {
		return nil
	}
	pos, err := strconv.ParseInt(id, 10, 64)
	if err != nil || pos < 0 {
		return invalidf("Last-Event-ID %q: want the changelog position of an update event", id)
	}
	o.From, o.Current = pos, false
	return nil
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
	setWatchStart(q, "from", o, from, formatPosition)
	return q
}

// setWatchStart sets where a watch request to another instance starts:
// param names the parameter ("from", or "resume" where from is a time),
// and at renders a position.
func setWatchStart(q url.Values, param string, o WatchOptions, from int64, at func(int64) string) {
	switch from {
	case FromNow:
		q.Set(param, "now")
		if o.Current {
			q.Set("current", "true")
		}
	case FromStart:
		q.Set(param, "start")
	default:
		q.Set(param, at(from))
	}
}

// formatPosition renders a changelog position as a watch request gives it.
func formatPosition(p int64) string { return strconv.FormatInt(p, 10) }

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
	if err == nil {
		err = resumeFromLastEvent(r, &o)
	}
	o.lateReadBack = true
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
		// The read back the watch owes runs once the stream is open,
		// with its pings going.
		next := func(ctx context.Context) (Update, error) {
			lw.finishStart(ctx)
			return lw.Next(ctx)
		}
		if route {
			localNext := next
			next = func(ctx context.Context) (Update, error) {
				if rw == nil {
					u, err := localNext(ctx)
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
		s.streamWatch(ctx, sse, c, keyText, lw.Resume(), next)
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
	s.streamWatch(ctx, sse, c, keyText, rw.last, rw.Next)
}

// relayBy follows a watch asked with path on the partition's replicas from
// position from, leaving out of its first connection the instance skip
// names, whose local replica just refused it. Only the first: that replica
// may serve later (this instance's standby becomes the active when the
// active's instance dies), and on a two-instance cluster it is the only
// one left.
func (s *Server) relayBy(store string, part int32, o WatchOptions, from int64, skip string, path func(from int64) string) *remoteWatch {
	return &remoteWatch{rt: s.rt, store: store, path: path, opts: o, last: from, part: part,
		hosts: func(_ context.Context, again bool) ([]string, error) {
			if again {
				skip = ""
			}
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

// streamWatch sends a watch's updates as events until it ends, the reader
// goes away or the server closes. from is the position the stream started
// after.
func (s *Server) streamWatch(ctx context.Context, sse *events, c StoreCodec, keyText string, from int64, next func(context.Context) (Update, error)) {
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(s.closing, cancel)()
	last := from
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
				if s.closing.Err() != nil {
					_, we := toWireError(errServerClosing)
					sse.send("end", "", wireWatchEnd{wireError: we, Resume: last})
				}
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
		last = u.Position
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
