package iq

// Range and prefix watches over HTTP, as Server-Sent Events:
//
//	GET /v1/stores/{store}/range/watch ?from=KEY &to=KEY | ?prefix=KEY
//	    &resume=now|start|TOKEN (default now) &partition=P &current=true
//	    &staleness= &prefer= &route= (default true) &coalesce=true &buffer=N
//
// The stream is a key watch's but for where it stands: the "start" event's
// data is {"resume","positions"} (the resume token and each partition's
// start position), each "update" event's id is the resume token after it
// (an EventSource sends it back as Last-Event-ID when it reconnects, and a
// request that carries one resumes from it, whatever its resume= says),
// and the "end" event's "resume" is the token to resume from, its
// "partition" the partition that ended the watch. Every
// partition of the store is watched, or the one partition= names; each is
// served by the local replica or, routed, relayed from another instance's
// and resumed elsewhere as a key watch is.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// wireRangeStart is the data of a range watch's "start" event.
type wireRangeStart struct {
	Resume    string          `json:"resume"`
	Positions map[int32]int64 `json:"positions"`
}

// wireRangeWatchEnd is the data of a range watch's "end" event.
type wireRangeWatchEnd struct {
	wireError
	Resume string `json:"resume"`
}

// textRange is a range watch's keys as written in a URL.
type textRange struct{ from, to, prefix string }

func (t textRange) set(q url.Values) {
	for name, v := range map[string]string{"from": t.from, "to": t.to, "prefix": t.prefix} {
		if v != "" {
			q.Set(name, v)
		}
	}
}

// encode turns the range's keys into the store's key bytes.
func (t textRange) encode(c StoreCodec) (KeyRange, error) {
	var rng KeyRange
	for _, b := range []struct {
		name, text string
		dst        *[]byte
	}{{"from", t.from, &rng.From}, {"to", t.to, &rng.To}, {"prefix", t.prefix, &rng.Prefix}} {
		if b.text == "" {
			continue
		}
		k, err := c.EncodeKey(b.text)
		if err != nil {
			return rng, invalidf("malformed %s=%q for store %q: %v", b.name, b.text, c.Name, err)
		}
		*b.dst = k
	}
	return rng, rng.validate()
}

func rangeWatchPath(store string, t textRange, part int32, o WatchOptions, from int64) string {
	q := watchFlags(o)
	t.set(q)
	q.Set("partition", strconv.Itoa(int(part)))
	setWatchStart(q, "resume", o, from, func(p int64) string { return RangeResume{part: p}.String() })
	return "/v1/stores/" + url.PathEscape(store) + "/range/watch?" + q.Encode()
}

// parseRangeWatch reads a range watch's parameters but its keys.
func parseRangeWatch(r *http.Request) (WatchOptions, RangeResume, bool, error) {
	v := r.URL.Query()
	o, route, err := parseWatchFlags(v)
	if err != nil {
		return o, nil, false, err
	}
	// A reconnecting EventSource sends back the id of the last update it
	// received, and reconnects to the same URL: the id wins over the
	// URL's resume=, which would start again from where the stream began.
	token := r.Header.Get("Last-Event-ID")
	if token != "" {
		o.Current = false
	} else {
		token = v.Get("resume")
	}
	var resume RangeResume
	switch token {
	case "", "now":
	case "start":
		o.From = FromStart
	default:
		if resume, err = ParseRangeResume(token); err != nil {
			return o, nil, false, err
		}
	}
	if o.Current && (o.From != FromNow || resume != nil) {
		return o, nil, false, invalidf("current=true needs resume=now: a watch from a resume token delivers the changes after it")
	}
	return o, resume, route, nil
}

// partitionWatch is one partition's part of a range watch. Once merged
// (mergeWatches), the goroutine that reads it closes it.
type partitionWatch struct {
	part  int32
	start int64
	next  func(context.Context) (Update, error)
	close func()
}

// partUpdate is what one partition's watch delivered to a range watch.
type partUpdate struct {
	part int32
	u    Update
	err  error
}

func (s *Server) handleRangeWatch(w http.ResponseWriter, r *http.Request) {
	store := r.PathValue("store")
	c, ok := s.codecs[store]
	if !ok {
		refuseWatch(w, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
		return
	}
	if _, err := s.q.watchKind(store, KindKeyValue); err != nil {
		refuseWatch(w, err)
		return
	}
	v := r.URL.Query()
	t := textRange{from: v.Get("from"), to: v.Get("to"), prefix: v.Get("prefix")}
	rng, err := t.encode(c)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	o, resume, route, err := parseRangeWatch(r)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	p := params{bound: o.Staleness}
	if s := v.Get("partition"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			refuseWatch(w, invalidf("partition=%q: want a partition number", s))
			return
		}
		p.partition, p.hasPartition = int32(n), true
	}
	parts, err := s.partitionsAsked(store, p)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	starts, err := startsOf(parts, resume, o.From)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	ctx := r.Context()
	var pws []*partitionWatch
	for _, part := range parts {
		pw, err := s.watchPartition(ctx, store, t, rng, part, o, starts[part], route)
		if err != nil {
			for _, pw := range pws {
				pw.close()
			}
			refuseWatch(w, err)
			return
		}
		pws = append(pws, pw)
	}
	at := RangeResume{}
	for _, pw := range pws {
		at[pw.part] = pw.start
	}
	sse := startEvents(w, s.cfg.WriteTimeout)
	sse.send("start", "", wireRangeStart{Resume: at.String(), Positions: at})
	s.streamRangeWatch(ctx, sse, c, at, pws)
}

// watchPartition starts one partition of a range watch from position from:
// on the local replica, or, routed, relayed from another instance's when
// the local one cannot serve it, then or later.
func (s *Server) watchPartition(ctx context.Context, store string, t textRange, rng KeyRange, part int32, o WatchOptions, from int64, route bool) (*partitionWatch, error) {
	po := o
	po.From = from
	path := func(from int64) string { return rangeWatchPath(store, t, part, po, from) }
	local := po
	local.lateReadBack = true
	lw, err := s.q.WatchRangeBytes(ctx, store, part, rng, local)
	if err == nil {
		// The read back the watch owes runs once the stream is open, on
		// the partition's goroutine (mergeWatches).
		localNext := func(ctx context.Context) (Update, error) {
			lw.finishStart(ctx)
			return lw.Next(ctx)
		}
		pw := &partitionWatch{part: part, start: lw.Resume(), next: localNext, close: lw.Close}
		if !route {
			return pw, nil
		}
		var rw *remoteWatch
		pw.close = func() {
			lw.Close()
			if rw != nil {
				rw.Close()
			}
		}
		pw.next = func(ctx context.Context) (Update, error) {
			if rw == nil {
				u, err := localNext(ctx)
				var ee *WatchEndedError
				if !errors.As(err, &ee) || errors.Is(err, ErrWatcherTooSlow) {
					return u, err
				}
				rw = s.relayBy(store, part, po, ee.Resume, "", path)
			}
			return rw.Next(ctx)
		}
		return pw, nil
	}
	if !route || !reroutable(err) {
		return nil, err
	}
	rw := s.relayBy(store, part, po, from, s.b.Self(), path)
	if err := rw.connect(ctx); err != nil {
		return nil, err
	}
	return &partitionWatch{part: part, start: rw.last, next: rw.Next, close: rw.Close}, nil
}

// mergeWatches runs each partition's watch on a goroutine of its own until
// ctx ends or it fails, and hands what they deliver to out. Each goroutine
// closes its watch as it returns; wg counts them.
func mergeWatches(ctx context.Context, wg *sync.WaitGroup, pws []*partitionWatch, out chan<- partUpdate) {
	for _, pw := range pws {
		wg.Go(func() {
			defer pw.close()
			for {
				u, err := pw.next(ctx)
				select {
				case out <- partUpdate{pw.part, u, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// streamRangeWatch sends the updates of every partition's watch as events
// until one ends or the reader goes away.
func (s *Server) streamRangeWatch(ctx context.Context, sse *events, c StoreCodec, at RangeResume, pws []*partitionWatch) {
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(s.closing, cancel)()
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		sse.pings(ctx, cancel)
	}()
	ups := make(chan partUpdate)
	var wg sync.WaitGroup
	mergeWatches(ctx, &wg, pws, ups)
	// The response must not be written once the handler returns, and the
	// partitions' watches end with it.
	defer func() {
		cancel()
		<-pinging
		wg.Wait()
	}()
	for {
		var pu partUpdate
		select {
		case <-ctx.Done():
		case pu = <-ups:
		}
		if ctx.Err() != nil {
			if s.closing.Err() != nil {
				_, we := toWireError(errServerClosing)
				sse.send("end", "", wireRangeWatchEnd{wireError: we, Resume: at.String()})
			}
			return
		}
		if pu.err != nil {
			_, we := toWireError(pu.err)
			if errors.Is(pu.err, ErrWatcherTooSlow) {
				we.Reason = reasonWatcherTooSlow
			}
			we.Partition = ptr(pu.part)
			sse.send("end", "", wireRangeWatchEnd{wireError: we, Resume: at.String()})
			return
		}
		wu, err := encodeUpdate(c, rangeKeyText(c, pu.u), pu.u)
		if err != nil {
			sse.send("end", "", wireRangeWatchEnd{wireError: wireError{Error: err.Error(), Reason: reasonInternal, Partition: ptr(pu.part)}, Resume: at.String()})
			return
		}
		at[pu.part] = pu.u.Position
		if !sse.send("update", at.String(), wu) {
			return
		}
	}
}

// rangeKeyText renders an update's key as its event carries it.
func rangeKeyText(c StoreCodec, u Update) string {
	if u.json || c.DecodeKey == nil {
		return string(u.Key) // relayed: the other server rendered it
	}
	k, err := c.DecodeKey(u.Key)
	if err != nil {
		return string(u.Key)
	}
	if s, ok := k.(string); ok {
		return s
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// RangeWatchOptions say where a range watch starts and how each of its
// partitions is served. WatchOptions.From is FromNow or FromStart for every
// partition when Resume is nil; Resume, a RangeResume that names every
// partition watched, starts each partition after its own position.
type RangeWatchOptions struct {
	WatchOptions
	Resume RangeResume
}

// WatchRange follows every key in [from, to) of a key-value store (an
// empty bound is open), keys written as Get's keyText, from outside the
// application; WatchPrefix follows those beginning with prefix. Each
// partition is followed on its own replicas, and resumed on another
// whenever the one serving it ends or stops answering, as Watch does for
// one key; updates come in changelog order per partition. It fails at
// once for what is wrong with the query itself. From now, it returns once
// every partition's watch has started on some replica, waiting for those
// none of whose replicas serves yet as long as ctx allows: the resume
// point names a position for every partition from the first, and a watch
// resumed from it skips nothing committed after this one began.
func (c *Client) WatchRange(ctx context.Context, store, from, to string, opts RangeWatchOptions) (*RangeWatch, error) {
	return c.watchRange(ctx, store, textRange{from: from, to: to}, opts)
}

// WatchPrefix follows every key of a key-value store that begins with
// prefix (see WatchRange).
func (c *Client) WatchPrefix(ctx context.Context, store, prefix string, opts RangeWatchOptions) (*RangeWatch, error) {
	if prefix == "" {
		return nil, invalidf("an empty prefix: watch the whole store with WatchRange(ctx, store, \"\", \"\", opts)")
	}
	return c.watchRange(ctx, store, textRange{prefix: prefix}, opts)
}

func (c *Client) watchRange(ctx context.Context, store string, t textRange, opts RangeWatchOptions) (*RangeWatch, error) {
	m, _, err := c.metadata(ctx, false)
	if err != nil {
		return nil, err
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, n)
	for i := range parts {
		parts[i] = int32(i)
	}
	starts, err := startsOf(parts, opts.Resume, opts.From)
	if err != nil {
		return nil, err
	}
	prefer := opts.Prefer
	if prefer == PreferFreshest {
		prefer = c.opts.Prefer
	}
	rws := make([]*remoteWatch, 0, n)
	for _, part := range parts {
		po := opts.WatchOptions
		po.From = starts[part]
		rw := c.remoteWatch(store, part, po, prefer, func(from int64) string { return rangeWatchPath(store, t, part, po, from) })
		rws = append(rws, rw)
		if err := rw.start(ctx); err != nil {
			for _, rw := range rws {
				rw.Close()
			}
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &RangeWatch{store: store, at: RangeResume{}, ups: make(chan partUpdate), cancel: cancel}
	pws := make([]*partitionWatch, len(rws))
	for i, r := range rws {
		w.at[r.part] = r.last
		pws[i] = &partitionWatch{part: r.part, next: r.Next, close: r.Close}
	}
	mergeWatches(wctx, &w.wg, pws, w.ups)
	return w, nil
}

// RangeWatch is a range or prefix watch followed over HTTP
// (Client.WatchRange). Next is called from one goroutine at a time; Close
// from any.
type RangeWatch struct {
	store  string
	at     RangeResume // owned by Next
	ups    chan partUpdate
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ended  error
}

// Next returns the next update of any partition, in changelog order per
// partition. It returns a *WatchEndedError, its Range the resume point,
// when a partition's reader fell behind its serving replica's buffer
// (ErrWatcherTooSlow), and ctx's error when ctx ends first.
func (w *RangeWatch) Next(ctx context.Context) (Update, error) {
	if w.ended != nil {
		return Update{}, w.ended
	}
	select {
	case <-ctx.Done():
		return Update{}, ctx.Err()
	case pu := <-w.ups:
		if pu.err != nil {
			resume := maps.Clone(w.at)
			w.ended = &WatchEndedError{Store: w.store, Partition: pu.part, Resume: resume[pu.part], Range: resume, Err: pu.err}
			w.Close()
			return Update{}, w.ended
		}
		// A relayed stream sends positions after the partition's last
		// only (remoteWatch.Next).
		w.at[pu.part] = pu.u.Position
		return pu.u, nil
	}
}

// Resume returns where the watch stands: every partition's last delivered
// position, or its start.
func (w *RangeWatch) Resume() RangeResume { return maps.Clone(w.at) }

// Close ends the watch, once every partition's stream is closed.
func (w *RangeWatch) Close() {
	w.cancel()
	w.wg.Wait()
}
