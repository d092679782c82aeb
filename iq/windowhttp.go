package iq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/serde"
)

// wireWindow is one window of a window or session answer: its times both
// as RFC 3339 (for people) and as epoch milliseconds (for programs).
type wireWindow struct {
	Key     json.RawMessage `json:"key"`
	Start   string          `json:"start"`
	End     string          `json:"end"`
	StartMs int64           `json:"start_ms"`
	EndMs   int64           `json:"end_ms"`
	Value   json.RawMessage `json:"value"`
	// TimestampMs is Window.Timestamp, left out when 0.
	TimestampMs int64 `json:"timestamp_ms,omitempty"`
}

// wireKeyWindows is the 200 and 404 answer of a key's windows or sessions.
type wireKeyWindows struct {
	Key       string        `json:"key"`
	Partition int32         `json:"partition"`
	ServedBy  *wireServedBy `json:"served_by,omitempty"`
	Windows   []wireWindow  `json:"windows"`
	Truncated bool          `json:"truncated,omitempty"`
	Error     string        `json:"error,omitempty"`
}

type wirePartitionWindows struct {
	Partition int32         `json:"partition"`
	ServedBy  *wireServedBy `json:"served_by"`
	Windows   []wireWindow  `json:"windows"`
	Truncated bool          `json:"truncated,omitempty"`
}

type wireWindowRange struct {
	Store      string                 `json:"store"`
	Partitions []wirePartitionWindows `json:"partitions"`
	Failed     []wirePartitionError   `json:"failed,omitempty"`
}

func rfc3339Millis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func encodeWindows(c StoreCodec, p int32, ws []Window[[]byte, []byte]) ([]wireWindow, error) {
	out := make([]wireWindow, 0, len(ws))
	for _, win := range ws {
		var k any = string(win.Key)
		var err error
		if c.DecodeKey != nil {
			if k, err = c.DecodeKey(win.Key); err != nil {
				return nil, fmt.Errorf("iq: store %q partition %d: decode key: %w", c.Name, p, err)
			}
		}
		v, err := c.DecodeValue(win.Value)
		if err != nil {
			return nil, fmt.Errorf("iq: store %q partition %d: decode value: %w", c.Name, p, err)
		}
		ww := wireWindow{Start: rfc3339Millis(win.Start), End: rfc3339Millis(win.End), StartMs: win.Start, EndMs: win.End, TimestampMs: win.Timestamp}
		if ww.Key, err = json.Marshal(k); err == nil {
			ww.Value, err = json.Marshal(v)
		}
		if err != nil {
			return nil, fmt.Errorf("iq: store %q partition %d: %w", c.Name, p, err)
		}
		out = append(out, ww)
	}
	return out, nil
}

// parseTimeParam reads a time parameter written as epoch milliseconds or
// RFC 3339; def when absent. An RFC 3339 time finer than a millisecond is
// rounded up when up is set (the start of a range), else down, so that the
// range holds no window starting outside it.
func parseTimeParam(v url.Values, name string, def int64, up bool) (int64, error) {
	t := v.Get(name)
	if t == "" {
		return def, nil
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 {
			return 0, invalidf("%s=%q: times before the epoch hold no windows", name, t)
		}
		return n, nil
	}
	// RFC 3339 allows "t" and "z" in lower case, which time.Parse does not;
	// they are its only letters, so upper-casing changes nothing else.
	tt, err := time.Parse(time.RFC3339Nano, strings.ToUpper(t))
	if err != nil && strings.Contains(t, " ") {
		// An unescaped "+" of a time zone offset arrives as a space.
		tt, err = time.Parse(time.RFC3339Nano, strings.ReplaceAll(strings.ToUpper(t), " ", "+"))
	}
	if err != nil {
		return 0, invalidf("%s=%q: want RFC 3339 (2006-01-02T15:04:05Z) or epoch milliseconds", name, t)
	}
	if tt.UnixMilli() < 0 {
		return 0, invalidf("%s=%q: times before the epoch hold no windows", name, t)
	}
	if up {
		return ceilMillis(tt), nil
	}
	return tt.UnixMilli(), nil
}

// parseTimeRange reads from= and to= of a window query.
func parseTimeRange(v url.Values) (from, to int64, err error) {
	if from, err = parseTimeParam(v, "from", MinTime, true); err != nil {
		return 0, 0, err
	}
	if to, err = parseTimeParam(v, "to", MaxTime, false); err != nil {
		return 0, 0, err
	}
	if from > to {
		return 0, 0, invalidf("from=%q is after to=%q, or both fall within one millisecond, which no window starts in", v.Get("from"), v.Get("to"))
	}
	return from, to, nil
}

// windowsPath is the path and query of a key's windows or sessions.
func windowsPath(store string, kind StoreKind, keyText string, q url.Values) string {
	q.Set("key", keyText)
	what := "windows"
	if kind == KindSession {
		what = "sessions"
	}
	return "/v1/stores/" + url.PathEscape(store) + "/" + what + "?" + q.Encode()
}

// registerWindows adds the window and session endpoints to the server's
// mux.
func (s *Server) registerWindows() {
	s.mux.HandleFunc("GET /v1/stores/{store}/keys/{key}/windows", func(w http.ResponseWriter, r *http.Request) {
		s.handleKeyWindows(w, r, r.PathValue("key"), KindWindow)
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/keys/{key}/sessions", func(w http.ResponseWriter, r *http.Request) {
		s.handleKeyWindows(w, r, r.PathValue("key"), KindSession)
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/windows", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("key") {
			s.handleKeyWindows(w, r, r.URL.Query().Get("key"), KindWindow)
			return
		}
		s.handleAllWindows(w, r)
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/sessions", func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("key") {
			writeErr(w, invalidf("a session lookup needs a key: /v1/stores/%s/sessions?key=KEY", r.PathValue("store")))
			return
		}
		s.handleKeyWindows(w, r, r.URL.Query().Get("key"), KindSession)
	})
}

// keyWindowsLookup is a key's windows (or sessions) as its request asks
// them.
type keyWindowsLookup struct {
	store   string
	c       StoreCodec
	l       StoreLayout
	keyText string
	p       params
	o       queryOptions
	wq      windowQuery
	part    int32
}

// parseKeyWindows reads a lookup of a key's windows (kind KindWindow) or
// sessions in store from its request: the parameters, the store's
// layout, the time range, the key and its partition.
func (s *Server) parseKeyWindows(r *http.Request, c StoreCodec, store, keyText string, kind StoreKind) (keyWindowsLookup, error) {
	v := r.URL.Query()
	p, err := parseParams(v, true, s.cfg.MaxRangeEntries)
	if err != nil {
		return keyWindowsLookup{}, err
	}
	kw := keyWindowsLookup{store: store, c: c, keyText: keyText, p: p, wq: windowQuery{kind: kind}, part: p.partition}
	if kw.l, err = s.q.requireKind(store, kind); err != nil {
		return keyWindowsLookup{}, err
	}
	if kind == KindWindow {
		if kw.wq.from, kw.wq.to, err = parseTimeRange(v); err != nil {
			return keyWindowsLookup{}, err
		}
	}
	if kw.wq.key, err = c.EncodeKey(keyText); err != nil {
		return keyWindowsLookup{}, invalidf("malformed key %q for store %q: %v", keyText, store, err)
	}
	if !p.hasPartition {
		if kw.part, err = s.b.KeyPartition(store, kw.wq.key); err != nil {
			return keyWindowsLookup{}, err
		}
	}
	kw.o = buildOptions(p.options())
	return kw, nil
}

// forwardPath is the path and query of the lookup forwarded to another
// instance.
func (kw keyWindowsLookup) forwardPath() string {
	q := kw.p.forwardQuery()
	q.Set("limit", strconv.Itoa(kw.p.limit))
	if kw.wq.kind == KindWindow {
		q.Set("from", strconv.FormatInt(kw.wq.from, 10))
		q.Set("to", strconv.FormatInt(kw.wq.to, 10))
	}
	return windowsPath(kw.store, kw.wq.kind, kw.keyText, q)
}

// handleKeyWindows answers a key's windows (or sessions), routed as a key
// lookup is: the key decides the partition, and the freshest replica
// within the bound answers.
func (s *Server) handleKeyWindows(w http.ResponseWriter, r *http.Request, keyText string, kind StoreKind) {
	store := r.PathValue("store")
	c, ok := s.codec(w, store)
	if !ok {
		return
	}
	kw, err := s.parseKeyWindows(r, c, store, keyText, kind)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx := r.Context()
	rep, info, localErr := s.q.replica(store, kw.part, &kw.o)
	local, now := s.localFirst(kw.part, kw.p, info, localErr)
	if now {
		s.answerKeyWindowsLocally(ctx, w, kw, rep, info, nil)
		return
	}
	if !kw.p.route || !reroutable(localErr) {
		writeErr(w, localErr)
		return
	}
	release, err := acquire(s.forwards, "forwarded key lookups")
	if err != nil {
		s.writeErr(w, err)
		return
	}
	defer release()
	ch, rep, info, err := routeRechecked(ctx, s, store, kw.part, kw.p, &kw.o, local, localErr, kw.forwardPath(),
		decodeForwarded(func(k wireKeyWindows) (*wireServedBy, int32) { return k.ServedBy, k.Partition }))
	switch {
	case err != nil:
		writeErr(w, err)
	case ch.local:
		s.answerKeyWindowsLocally(ctx, w, kw, rep, info, ch.tried)
	default:
		ch.val.write(w)
	}
}

// answerKeyWindowsLocally reads a key's windows from the local replica.
// tried, the attempts of a router that fell back on it, make up the
// refusal if the replica moved away meanwhile.
func (s *Server) answerKeyWindowsLocally(ctx context.Context, w http.ResponseWriter, kw keyWindowsLookup, rep Replica, info ReplicaInfo, tried []Attempt) {
	pw, err := s.q.readWindows(ctx, rep, info, kw.o.bound, kw.l, kw.store, kw.part, kw.wq, kw.p.limit)
	if err == nil {
		err = s.writeKeyWindows(w, kw.c, kw.keyText, kw.part, pw)
	}
	if err != nil {
		if tried != nil {
			err = &UnavailableError{Store: kw.store, Partition: kw.part, Bound: kw.p.bound, Tried: append(tried, Attempt{Host: s.self(), Err: err})}
		}
		writeErr(w, err)
	}
}

// writeKeyWindows writes a key's windows: 200, or 404 (with the same
// body) when the key has none in the range, as a key lookup answers an
// absent key.
func (s *Server) writeKeyWindows(w http.ResponseWriter, c StoreCodec, keyText string, part int32, pw PartitionWindows[[]byte, []byte]) error {
	ws, err := encodeWindows(c, part, pw.Windows)
	if err != nil {
		return err
	}
	out := wireKeyWindows{Key: keyText, Partition: part, ServedBy: servedBy(pw.Provenance), Windows: ws, Truncated: pw.Truncated}
	if len(ws) == 0 {
		out.Error = "no windows for the key in the time range"
		writeJSON(w, http.StatusNotFound, out)
		return nil
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleAllWindows answers every key's windows in a time range, bounded as
// range queries are: MaxConcurrentRanges, MaxRangeEntries per partition,
// route=false by default, each partition routed on its own with
// route=true.
func (s *Server) handleAllWindows(w http.ResponseWriter, r *http.Request) {
	store := r.PathValue("store")
	c, p, release, ok := s.admitRange(w, r, store)
	if !ok {
		return
	}
	defer release()
	v := r.URL.Query()
	l, err := s.q.requireKind(store, KindWindow)
	if err != nil {
		writeErr(w, err)
		return
	}
	wq := windowQuery{kind: KindWindow, all: true}
	if wq.from, wq.to, err = parseTimeRange(v); err != nil {
		writeErr(w, err)
		return
	}
	ctx := r.Context()
	out := wireWindowRange{Store: store, Partitions: []wirePartitionWindows{}}
	encode := func(pw PartitionWindows[[]byte, []byte]) (wirePartitionWindows, error) {
		part := pw.Provenance.Partition
		ws, err := encodeWindows(c, part, pw.Windows)
		return wirePartitionWindows{Partition: part, ServedBy: servedBy(pw.Provenance), Windows: ws, Truncated: pw.Truncated}, err
	}
	if !p.route {
		res, err := s.q.WindowFetchAllBytes(ctx, store, wq.from, wq.to, p.options()...)
		if err != nil {
			writeErr(w, err)
			return
		}
		out.Partitions, out.Failed, err = encodeAnswered(res.Partitions, res.Refused, encode)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	parts, err := s.partitionsAsked(store, p)
	if err != nil {
		writeErr(w, err)
		return
	}
	out.Partitions, out.Failed = fanOut(s.cfg.FanOut, parts, func(part int32) (wirePartitionWindows, error) {
		return s.windowsPartition(ctx, l, store, part, wq, p, encode)
	})
	writeJSON(w, http.StatusOK, out)
}

// windowsPartition answers one partition of a routed time range over all
// keys (routePartition).
func (s *Server) windowsPartition(ctx context.Context, l StoreLayout, store string, part int32, wq windowQuery, p params, encode func(PartitionWindows[[]byte, []byte]) (wirePartitionWindows, error)) (wirePartitionWindows, error) {
	p.partition, p.hasPartition = part, true
	o := buildOptions(p.options())
	readLocal := func() (wirePartitionWindows, error) {
		rep, info, err := s.q.replica(store, part, &o)
		if err != nil {
			return wirePartitionWindows{}, err
		}
		pw, err := s.q.readWindows(ctx, rep, info, o.bound, l, store, part, wq, p.limit)
		if err != nil {
			return wirePartitionWindows{}, err
		}
		return encode(pw)
	}
	q := p.forwardQuery()
	q.Set("limit", strconv.Itoa(p.limit))
	q.Set("from", strconv.FormatInt(wq.from, 10))
	q.Set("to", strconv.FormatInt(wq.to, 10))
	pathQuery := "/v1/stores/" + url.PathEscape(store) + "/windows?" + q.Encode()
	return routePartition(ctx, s, store, part, p, pathQuery, readLocal,
		func(w wirePartitionWindows) *wireServedBy { return w.ServedBy })
}

// WindowFetch asks for a key's windows starting in [from, to]
// (milliseconds, both included), routed as Get is. keyText and keyBytes
// are as Get takes them; keys and values come back as the JSON the server
// rendered.
func (c *Client) WindowFetch(ctx context.Context, store, keyText string, keyBytes []byte, from, to int64, opts ...QueryOption) (WindowResult[json.RawMessage, json.RawMessage], error) {
	if from > to {
		return WindowResult[json.RawMessage, json.RawMessage]{}, invalidf("time range from %d to %d ms: from is after to", from, to)
	}
	return c.keyWindows(ctx, store, KindWindow, keyText, keyBytes, from, to, opts)
}

// SessionFetch asks for a key's live sessions, routed as Get is.
func (c *Client) SessionFetch(ctx context.Context, store, keyText string, keyBytes []byte, opts ...QueryOption) (WindowResult[json.RawMessage, json.RawMessage], error) {
	return c.keyWindows(ctx, store, KindSession, keyText, keyBytes, 0, 0, opts)
}

func (c *Client) keyWindows(ctx context.Context, store string, kind StoreKind, keyText string, keyBytes []byte, from, to int64, opts []QueryOption) (WindowResult[json.RawMessage, json.RawMessage], error) {
	type result = WindowResult[json.RawMessage, json.RawMessage]
	limit := buildOptions(opts).limit
	return clientLookup(ctx, c, store, keyBytes, opts, func(q url.Values) string {
		if kind == KindWindow {
			q.Set("from", strconv.FormatInt(from, 10))
			q.Set("to", strconv.FormatInt(to, 10))
		}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		return windowsPath(store, kind, keyText, q)
	}, func(st int, body []byte) (result, Provenance, error) {
		if st == http.StatusOK || st == http.StatusNotFound {
			var k wireKeyWindows
			if json.Unmarshal(body, &k) == nil && k.ServedBy != nil {
				prov := k.ServedBy.provenance(k.Partition)
				res := result{Truncated: k.Truncated, Provenance: prov, Windows: make([]Window[json.RawMessage, json.RawMessage], 0, len(k.Windows))}
				for _, ww := range k.Windows {
					res.Windows = append(res.Windows, Window[json.RawMessage, json.RawMessage]{Key: ww.Key, Start: ww.StartMs, End: ww.EndMs, Value: ww.Value, Timestamp: ww.TimestampMs})
				}
				return res, prov, nil
			}
		}
		return result{}, Provenance{}, decodeErrorAnswer(st, body)
	})
}

// decodeClientWindows turns JSON windows into typed ones.
func decodeClientWindows[K, V any](store string, raw WindowResult[json.RawMessage, json.RawMessage]) (WindowResult[K, V], error) {
	res := WindowResult[K, V]{Truncated: raw.Truncated, Provenance: raw.Provenance, Windows: make([]Window[K, V], 0, len(raw.Windows))}
	for _, rw := range raw.Windows {
		win := Window[K, V]{Start: rw.Start, End: rw.End, Timestamp: rw.Timestamp}
		if err := json.Unmarshal(rw.Key, &win.Key); err != nil {
			return WindowResult[K, V]{}, fmt.Errorf("iq: store %q partition %d: decode key: %w", store, raw.Provenance.Partition, err)
		}
		if err := json.Unmarshal(rw.Value, &win.Value); err != nil {
			return WindowResult[K, V]{}, fmt.Errorf("iq: store %q partition %d: decode value: %w", store, raw.Provenance.Partition, err)
		}
		res.Windows = append(res.Windows, win)
	}
	return res, nil
}

// ClientWindowFetch asks a Client for a typed key's windows starting in
// [from, to] (the zero time leaves either side open). The key is written
// in the URL with fmt.Sprint and serialized with keySerde to find its
// partition, as ClientGet does; keys and values are decoded from the JSON
// answer.
func ClientWindowFetch[K, V any](ctx context.Context, c *Client, store string, key K, from, to time.Time, keySerde serde.Serde[K], opts ...QueryOption) (WindowResult[K, V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return WindowResult[K, V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := c.WindowFetch(ctx, store, fmt.Sprint(key), kb, timeMillis(from), toMillis(to), opts...)
	if err != nil {
		return WindowResult[K, V]{}, err
	}
	return decodeClientWindows[K, V](store, raw)
}

// ClientSessionFetch asks a Client for a typed key's live sessions, as
// ClientWindowFetch does.
func ClientSessionFetch[K, V any](ctx context.Context, c *Client, store string, key K, keySerde serde.Serde[K], opts ...QueryOption) (WindowResult[K, V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return WindowResult[K, V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := c.SessionFetch(ctx, store, fmt.Sprint(key), kb, opts...)
	if err != nil {
		return WindowResult[K, V]{}, err
	}
	return decodeClientWindows[K, V](store, raw)
}

// WindowFetchAll asks for every key's windows starting in [from, to]
// (milliseconds, both included) in each partition of the store, or in the
// one WithPartition names. Each partition is asked on its own and routed
// as Get routes a key's partition (active first, then the replicas the
// bound allows; the routing table refreshed while a partition moves;
// monotonic per partition), at most ClientOptions.FanOut partitions at
// once, and comes back with its own provenance. WithLimit caps the windows
// per partition (the servers cap it at their MaxRangeEntries; Truncated
// says so). A partition no replica could answer is listed in Refused; an
// invalid query, an unknown store, a cancelled context or a single
// asked-for partition that cannot answer fail the call.
func (c *Client) WindowFetchAll(ctx context.Context, store string, from, to int64, opts ...QueryOption) (WindowRangeResult[json.RawMessage, json.RawMessage], error) {
	type result = WindowRangeResult[json.RawMessage, json.RawMessage]
	type partition = PartitionWindows[json.RawMessage, json.RawMessage]
	if from > to {
		return result{}, invalidf("time range from %d to %d ms: from is after to", from, to)
	}
	o := buildOptions(opts)
	m, _, err := c.metadata(ctx, false)
	if err != nil {
		return result{}, &UnavailableError{Store: store, Partition: -1, Bound: o.bound, Cause: err}
	}
	n, ok := m.Partitions[store]
	if !ok {
		return result{}, fmt.Errorf("%w: %q is not in the routing table", ErrUnknownStore, store)
	}
	parts := make([]int32, 0, n)
	switch {
	case o.hasPartition && (o.partition < 0 || o.partition >= n):
		return result{}, fmt.Errorf("%w: partition %d of store %q, which has %d", ErrUnknownPartition, o.partition, store, n)
	case o.hasPartition:
		parts = append(parts, o.partition)
	default:
		for p := range n {
			parts = append(parts, p)
		}
	}
	ask := func(part int32) (partition, error) {
		popts := append(slices.Clone(opts), WithPartition(part))
		return clientLookup(ctx, c, store, nil, popts, func(q url.Values) string {
			q.Set("from", strconv.FormatInt(from, 10))
			q.Set("to", strconv.FormatInt(to, 10))
			if o.limit > 0 {
				q.Set("limit", strconv.Itoa(o.limit))
			}
			return "/v1/stores/" + url.PathEscape(store) + "/windows?" + q.Encode()
		}, func(st int, body []byte) (partition, Provenance, error) {
			w, prov, err := decodeOnePartition(part, func(w wirePartitionWindows) *wireServedBy { return w.ServedBy })(st, body)
			if err != nil {
				return partition{}, Provenance{}, err
			}
			pw := partition{Provenance: prov, Truncated: w.Truncated, Windows: make([]Window[json.RawMessage, json.RawMessage], 0, len(w.Windows))}
			for _, ww := range w.Windows {
				pw.Windows = append(pw.Windows, Window[json.RawMessage, json.RawMessage]{Key: ww.Key, Start: ww.StartMs, End: ww.EndMs, Value: ww.Value, Timestamp: ww.TimestampMs})
			}
			return pw, prov, nil
		})
	}
	answers := make([]partition, len(parts))
	errs := make([]error, len(parts))
	sem := make(chan struct{}, c.opts.FanOut)
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			answers[i], errs[i] = ask(part)
		}()
	}
	wg.Wait()
	var res result
	for i, part := range parts {
		err := errs[i]
		switch {
		case err == nil:
			res.Partitions = append(res.Partitions, answers[i])
		case o.hasPartition || ctx.Err() != nil || errors.Is(err, ErrInvalidQuery) || errors.Is(err, ErrUnknownStore):
			return result{}, err
		default:
			res.Refused = append(res.Refused, PartitionError{Partition: part, Err: err})
		}
	}
	return res, nil
}

// ClientWindowFetchAll asks a Client for every typed key's windows
// starting in [from, to] (the zero time leaves either side open), as
// WindowFetchAll does; keys and values are decoded from the JSON answers.
func ClientWindowFetchAll[K, V any](ctx context.Context, c *Client, store string, from, to time.Time, opts ...QueryOption) (WindowRangeResult[K, V], error) {
	raw, err := c.WindowFetchAll(ctx, store, timeMillis(from), toMillis(to), opts...)
	if err != nil {
		return WindowRangeResult[K, V]{}, err
	}
	res := WindowRangeResult[K, V]{Refused: raw.Refused}
	for _, pw := range raw.Partitions {
		typed, err := decodeClientWindows[K, V](store, WindowResult[json.RawMessage, json.RawMessage]{Windows: pw.Windows, Truncated: pw.Truncated, Provenance: pw.Provenance})
		if err != nil {
			return WindowRangeResult[K, V]{}, err
		}
		res.Partitions = append(res.Partitions, PartitionWindows[K, V]{Provenance: pw.Provenance, Windows: typed.Windows, Truncated: pw.Truncated})
	}
	return res, nil
}
