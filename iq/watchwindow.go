package iq

// Window watches. A window store's changelog carries one record per
// window, keyed by the record key and the window's start (the layout
// statestore documents for window stores: the key with every 00 byte
// written 00 ff, then 00 01, then the start as 8 big-endian bytes), so a
// key's windows are the changelog keys with one prefix, in the key's
// partition, and a window watch is a key watch that matches that prefix
// and a range of starts.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/eddystreams/eddy/statestore"
)

// WatchedWindow is the window an update of a window watch is of, [Start,
// End) in milliseconds since the epoch.
type WatchedWindow struct {
	Start, End int64
}

// windowSel selects the changelog keys of one record key's windows that
// start in [from, to].
type windowSel struct {
	key      []byte
	prefix   []byte
	from, to int64
	opts     statestore.WindowOptions
}

func newWindowSel(key []byte, from, to int64, opts statestore.WindowOptions) *windowSel {
	p := make([]byte, 0, len(key)+2)
	for _, b := range key {
		if b == 0 {
			p = append(p, 0, 0xff)
			continue
		}
		p = append(p, b)
	}
	return &windowSel{key: bytes.Clone(key), prefix: append(p, 0, 1), from: from, to: to, opts: opts}
}

// start returns the window start a changelog key of the selected record
// key carries.
func (s *windowSel) start(k []byte) (int64, bool) {
	if len(k) != len(s.prefix)+8 || !bytes.HasPrefix(k, s.prefix) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(k[len(s.prefix):])), true
}

func (s *windowSel) holds(k []byte) bool {
	t, ok := s.start(k)
	return ok && t >= s.from && t <= s.to
}

func (s *windowSel) window(k []byte) *WatchedWindow {
	t, _ := s.start(k)
	return &WatchedWindow{Start: t, End: t + s.opts.WindowSize}
}

// current reads the key's windows the store holds, as changes keyed as
// the changelog keys them.
func (s *windowSel) current(st statestore.Store) ([]Change, error) {
	ws, err := statestore.NewWindowStore(st, s.opts)
	if err != nil {
		return nil, err
	}
	it, err := ws.Fetch(s.key, s.from, s.to)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Change
	for it.Next() {
		k := binary.BigEndian.AppendUint64(bytes.Clone(s.prefix), uint64(it.Start()))
		out = append(out, Change{Key: k, Value: bytes.Clone(it.Value())})
	}
	return out, it.Err()
}

// WatchWindowBytes watches the windows of a serialized key of a window
// store that start in [from, to] (milliseconds, both included; MinTime and
// MaxTime leave a side open), on the local replica of the key's partition:
// every committed change of such a window, each Update naming its Window.
// opts are as for WatchBytes; Current delivers the key's windows the
// replica holds first. Windows leave the store by expiry, which writes no
// changelog record, so a watch says nothing of it.
func (q *Querier) WatchWindowBytes(ctx context.Context, store string, key []byte, from, to int64, opts WatchOptions) (*Watch, error) {
	wb, l, err := q.watchable(store, KindWindow)
	if err != nil {
		return nil, err
	}
	if from > to {
		return nil, invalidf("time range from %d to %d ms: from is after to", from, to)
	}
	p, err := q.b.KeyPartition(store, key)
	if err != nil {
		return nil, err
	}
	w := newWatch(partKey{store, p}, key, nil, opts)
	w.f.win = newWindowSel(key, from, to, l.Window)
	return q.watch(ctx, wb, w, opts)
}

// windowWatchPath is the request of a window watch from position from.
func windowWatchPath(store, keyText string, tFrom, tTo int64, o WatchOptions, from int64) string {
	q := watchFlags(o)
	q.Set("key", keyText)
	q.Set("from", strconv.FormatInt(tFrom, 10))
	q.Set("to", strconv.FormatInt(tTo, 10))
	setWatchStart(q, "resume", o, from, formatPosition)
	return "/v1/stores/" + url.PathEscape(store) + "/windows/watch?" + q.Encode()
}

// parseWindowWatch reads a window watch's parameters: from and to are
// times, as for a window fetch, so where it starts is resume=.
func parseWindowWatch(v url.Values) (o WatchOptions, from, to int64, route bool, err error) {
	if o, route, err = parseWatchFlags(v); err != nil {
		return o, 0, 0, false, err
	}
	if from, to, err = parseTimeRange(v); err != nil {
		return o, 0, 0, false, err
	}
	switch s := v.Get("resume"); s {
	case "", "now":
	case "start":
		o.From = FromStart
	default:
		if o.From, err = strconv.ParseInt(s, 10, 64); err != nil || o.From < 0 {
			return o, 0, 0, false, invalidf("resume=%q: want now, start or a changelog position", s)
		}
	}
	if o.Current && o.From != FromNow {
		return o, 0, 0, false, invalidf("current=true needs resume=now: a watch from a position delivers the changes after it")
	}
	return o, from, to, route, nil
}

func (s *Server) handleWindowWatch(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	c, ok := s.codecs[store]
	if !ok {
		refuseWatch(w, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
		return
	}
	if _, err := s.q.watchKind(store, KindWindow); err != nil {
		refuseWatch(w, err)
		return
	}
	o, from, to, route, err := parseWindowWatch(r.URL.Query())
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
		func(ctx context.Context) (*Watch, error) { return s.q.WatchWindowBytes(ctx, store, kb, from, to, o) },
		func(pos int64) string { return windowWatchPath(store, keyText, from, to, o, pos) })
}

// WatchWindows follows the windows of a key of a window store that start
// in [from, to] (milliseconds, both included) from outside the
// application, as Watch follows a key: each update names its Window, and
// carries the value as the JSON the server rendered.
func (c *Client) WatchWindows(ctx context.Context, store, keyText string, keyBytes []byte, from, to int64, opts WatchOptions) (*RemoteWatch, error) {
	if from > to {
		return nil, invalidf("time range from %d to %d ms: from is after to", from, to)
	}
	return c.watchKey(ctx, store, keyBytes, opts, func(pos int64) string { return windowWatchPath(store, keyText, from, to, opts, pos) })
}
