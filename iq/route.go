package iq

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxAnswerBytes bounds how much of another instance's answer a router
// reads, so a misbehaving peer cannot exhaust memory.
const maxAnswerBytes = 64 << 20

// fingerprint identifies a routing table's content, so suspicion can end
// at the next assignment without the backend exposing a generation.
func fingerprint(m Metadata) uint64 {
	h := fnv.New64a()
	var buf [4]byte
	str := func(s string) {
		binary.BigEndian.PutUint32(buf[:], uint32(len(s)))
		h.Write(buf[:])
		io.WriteString(h, s)
	}
	sps := func(tag string, l []StorePartition) {
		str(tag)
		for _, sp := range l {
			str(sp.Store)
			binary.BigEndian.PutUint32(buf[:], uint32(sp.Partition))
			h.Write(buf[:])
		}
	}
	for _, hm := range m.Hosts {
		str(hm.Host)
		sps("a", hm.Active)
		sps("s", hm.Standby)
		sps("w", hm.Warmup)
	}
	stores := make([]string, 0, len(m.Partitions))
	for s := range m.Partitions {
		stores = append(stores, s)
	}
	sort.Strings(stores)
	for _, s := range stores {
		str(s)
		binary.BigEndian.PutUint32(buf[:], uint32(m.Partitions[s]))
		h.Write(buf[:])
	}
	for _, g := range m.Global {
		str("g")
		str(g)
	}
	return h.Sum64()
}

// suspects remembers hosts whose forwards failed at the transport level,
// so routers skip them at once. Suspicion ends after a while or as soon as
// the routing table changes, whichever comes first.
type suspects struct {
	dur time.Duration
	now func() time.Time

	mu    sync.Mutex
	fp    uint64
	until map[string]time.Time
}

func newSuspects(d time.Duration) *suspects {
	return &suspects{dur: d, now: time.Now, until: make(map[string]time.Time)}
}

func (s *suspects) mark(host string, fp uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fp != fp {
		clear(s.until)
		s.fp = fp
	}
	s.until[host] = s.now().Add(s.dur)
}

// suspect reports whether host is suspect under the routing table whose
// fingerprint fp returns (called only when something is suspect at all).
func (s *suspects) suspect(host string, fp func() uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.until) == 0 {
		return false
	}
	if f := fp(); f != s.fp {
		clear(s.until)
		s.fp = f
		return false
	}
	t, ok := s.until[host]
	if !ok {
		return false
	}
	if !s.now().Before(t) {
		delete(s.until, host)
		return false
	}
	return true
}

// router asks other instances, one after another, until one answers.
type router struct {
	hc       *http.Client
	timeout  time.Duration
	suspects *suspects
	// scheme is "https" when instances serve TLS, and token the bearer
	// token sent with every request ("" sends none).
	scheme, token string
}

// newTransport is the transport routers use when not given one: short
// connect timeouts so a dead host is found out fast, and enough idle
// connections per host that a busy router keeps its connections warm.
func newTransport(tc *tls.Config) *http.Transport {
	return &http.Transport{
		TLSClientConfig:       tc,
		DialContext:           (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
	}
}

// newRouter returns a router over rt, or over a transport of its own
// verifying servers with tc when rt is nil. Requests use https when useTLS
// is set, and carry token as a bearer token when it is not empty.
func newRouter(rt http.RoundTripper, useTLS bool, tc *tls.Config, token string, timeout, suspectFor time.Duration) *router {
	if rt == nil {
		rt = newTransport(tc)
	}
	r := &router{hc: &http.Client{Transport: rt}, timeout: timeout, suspects: newSuspects(suspectFor), scheme: "http", token: token}
	if useTLS {
		r.scheme = "https"
	}
	return r
}

func (r *router) close() { r.hc.CloseIdleConnections() }

// get sends one GET to host and reads the answer. An error means no HTTP
// answer came back; it is a *transportError unless ctx ended first.
func (r *router) get(ctx context.Context, host, pathQuery string) (int, []byte, error) {
	return r.getWithin(ctx, host, pathQuery, r.timeout)
}

// getWithin is get bounded by timeout instead of the router's own.
func (r *router) getWithin(ctx context.Context, host, pathQuery string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.scheme+"://"+host+pathQuery, nil)
	if err != nil {
		return 0, nil, &transportError{host: host, err: err}
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, &transportError{host: host, err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return 0, nil, &transportError{host: host, err: fmt.Errorf("read answer: %w", err)}
	}
	return resp.StatusCode, body, nil
}

// try asks hosts in order for pathQuery until accept takes an answer
// (returns nil), skipping suspects and marking as suspect those that do
// not answer at all. It returns every attempt that did not succeed and
// whether one did. It stops early, without success, when ctx ends.
func (r *router) try(ctx context.Context, hosts []string, fp func() uint64, pathQuery string, accept func(host string, status int, body []byte) error) ([]Attempt, bool) {
	var tried []Attempt
	for _, h := range hosts {
		if ctx.Err() != nil {
			tried = append(tried, Attempt{Host: h, Err: ctx.Err()})
			return tried, false
		}
		if r.suspects.suspect(h, fp) {
			tried = append(tried, Attempt{Host: h, Err: errSuspect})
			continue
		}
		status, body, err := r.get(ctx, h, pathQuery)
		if err != nil {
			if ctx.Err() == nil {
				r.suspects.mark(h, fp())
			}
			tried = append(tried, Attempt{Host: h, Err: err})
			continue
		}
		if err := accept(h, status, body); err != nil {
			tried = append(tried, Attempt{Host: h, Err: err})
			continue
		}
		return tried, true
	}
	return tried, false
}

// memoFingerprint computes a routing table's fingerprint at most once.
func memoFingerprint(m Metadata) func() uint64 {
	var (
		done bool
		fp   uint64
	)
	return func() uint64 {
		if !done {
			fp, done = fingerprint(m), true
		}
		return fp
	}
}

// decodeErrorAnswer turns a non-success answer into the error it carries.
func decodeErrorAnswer(status int, body []byte) error {
	var w wireError
	if err := json.Unmarshal(body, &w); err != nil || (w.Error == "" && w.Reason == "") {
		return &remoteError{status: status, msg: fmt.Sprintf("iq: HTTP %d %s: %s", status, http.StatusText(status), snippet(body)), kind: kindOfStatus(status)}
	}
	return fromWireError(status, w)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// reroutable reports whether another replica might answer where this error
// came back: everything except what is wrong with the query itself.
func reroutable(err error) bool {
	if _, ok := errors.AsType[*transportError](err); ok {
		// A host that did not answer, whatever the cause: its own
		// time-outs (a paused process keeps the connection and sends
		// no headers) wrap context.DeadlineExceeded, which is not the
		// caller's deadline. Callers check their own context apart.
		return true
	}
	return !(errors.Is(err, ErrInvalidQuery) || errors.Is(err, ErrUnknownStore) ||
		errors.Is(err, ErrUnknownPartition) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded))
}

// normalizeAddr accepts host:port or an http:// or https:// URL with no
// path (the scheme comes from the client's options, see ClientOptions.TLS).
func normalizeAddr(a string) (string, error) {
	a = strings.TrimSpace(a)
	a = strings.TrimPrefix(a, "http://")
	a = strings.TrimPrefix(a, "https://")
	a = strings.TrimSuffix(a, "/")
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("iq: address %q is not host:port: %w", a, err)
	}
	return a, nil
}

func dedupe(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// routePlan is who may answer for one partition, as a router sees it.
type routePlan struct {
	// active is the partition's active host when it is another instance.
	active string
	// others are the other instances' standbys and warmups, when the
	// bound allows them.
	others []string
	// local describes the asking instance's own replica when it may
	// answer (within the bound and the minimum position); nil otherwise.
	local *Provenance
	bound Staleness
	// activeFirst bounds the wait for the active when others could answer
	// instead.
	activeFirst time.Duration
	fp          func() uint64
	// askSuspects asks hosts even while they are suspect, each for no
	// longer than activeFirst.
	askSuspects bool
}

// newRoutePlan plans a partition's candidates from its hosts, leaving out
// self (whose replica, if it may answer, is local).
func newRoutePlan(km KeyQueryMetadata, bound Staleness, self string, local *Provenance, activeFirst time.Duration, fp func() uint64) routePlan {
	pl := routePlan{local: local, bound: bound, activeFirst: activeFirst, fp: fp}
	if km.Active != "" && km.Active != self {
		pl.active = km.Active
	}
	if bound.AllowsNonActive() {
		for _, h := range append(slices.Clip(km.Standbys), km.Warmups...) {
			if h != self {
				pl.others = append(pl.others, h)
			}
		}
	}
	return pl
}

// decodeFn turns another instance's HTTP answer into a value and its
// provenance, or the refusal it carries.
type decodeFn[T any] func(status int, body []byte) (T, Provenance, error)

// choice is the answer a router settled on: another host's, or the local
// replica's (which the caller then reads).
type choice[T any] struct {
	local bool
	host  string
	prov  Provenance
	val   T
}

// askHost asks one host within timeout, skipping it if suspect and
// marking it suspect if it gives no HTTP answer.
func askHost[T any](ctx context.Context, r *router, host string, timeout time.Duration, pl routePlan, pathQuery string, decode decodeFn[T]) (T, Provenance, error) {
	var zero T
	if pl.askSuspects {
		// A second look: a host still not answering fails fast.
		timeout = min(timeout, pl.activeFirst)
	} else if r.suspects.suspect(host, pl.fp) {
		return zero, Provenance{}, errSuspect
	}
	status, body, err := r.getWithin(ctx, host, pathQuery, timeout)
	if err != nil {
		if ctx.Err() == nil {
			r.suspects.mark(host, pl.fp())
		}
		return zero, Provenance{}, err
	}
	return decode(status, body)
}

// routeFreshest finds the freshest answer within the plan's bound. The
// active is asked first, for no longer than activeFirst when anyone else
// could answer instead, since a live active's answer is the freshest
// there is. Failing that, every other replica is asked at once and the
// freshest answer wins (Provenance.fresher), the local replica included;
// a caught-up answer ends the wait for the others. It returns every
// failed attempt, in candidate order, and whether some replica answered.
func routeFreshest[T any](ctx context.Context, r *router, pl routePlan, pathQuery string, decode decodeFn[T]) (choice[T], []Attempt, bool) {
	var tried []Attempt
	if pl.active != "" {
		timeout := r.timeout
		if pl.bound.AllowsNonActive() && (len(pl.others) > 0 || pl.local != nil) {
			timeout = min(pl.activeFirst, r.timeout)
		}
		v, prov, err := askHost(ctx, r, pl.active, timeout, pl, pathQuery, decode)
		if err == nil {
			return choice[T]{host: pl.active, prov: prov, val: v}, nil, true
		}
		tried = append(tried, Attempt{Host: pl.active, Err: err})
		if ctx.Err() != nil {
			return choice[T]{}, tried, false
		}
	}
	var best choice[T]
	have := false
	if pl.local != nil {
		best, have = choice[T]{local: true, prov: *pl.local}, true
	}
	if len(pl.others) > 0 {
		type reply struct {
			i    int
			v    T
			prov Provenance
			err  error
		}
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		replies := make(chan reply, len(pl.others))
		for i, h := range pl.others {
			go func() {
				v, prov, err := askHost(fctx, r, h, r.timeout, pl, pathQuery, decode)
				replies <- reply{i, v, prov, err}
			}()
		}
		failed := make([]error, len(pl.others))
		settled := false
		for range pl.others {
			x := <-replies
			if x.err != nil {
				if !settled {
					failed[x.i] = x.err
				}
				continue
			}
			if !have || x.prov.fresher(best.prov) {
				best, have = choice[T]{host: pl.others[x.i], prov: x.prov, val: x.v}, true
			}
			if !settled && best.prov.caughtUp() {
				// Nothing fresher is worth waiting for.
				settled = true
				cancel()
			}
		}
		for i, err := range failed {
			if err != nil {
				tried = append(tried, Attempt{Host: pl.others[i], Err: err})
			}
		}
	}
	return best, tried, have
}

// routeSpread asks the plan's candidates, the local replica and the
// active included, in random order until one answers.
func routeSpread[T any](ctx context.Context, r *router, pl routePlan, pathQuery string, decode decodeFn[T]) (choice[T], []Attempt, bool) {
	var hosts []string
	if pl.active != "" {
		hosts = append(hosts, pl.active)
	}
	hosts = append(hosts, pl.others...)
	if pl.local != nil {
		hosts = append(hosts, "") // the local replica
	}
	rand.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	var tried []Attempt
	for _, h := range hosts {
		if h == "" {
			return choice[T]{local: true, prov: *pl.local}, tried, true
		}
		if err := ctx.Err(); err != nil {
			tried = append(tried, Attempt{Host: h, Err: err})
			return choice[T]{}, tried, false
		}
		v, prov, err := askHost(ctx, r, h, r.timeout, pl, pathQuery, decode)
		if err == nil {
			return choice[T]{host: h, prov: prov, val: v}, tried, true
		}
		tried = append(tried, Attempt{Host: h, Err: err})
	}
	return choice[T]{}, tried, false
}

// routeBy runs the plan under a preference. When that finds no answer
// and some hosts were skipped as suspect, it asks those hosts after all:
// suspicion saves the wait for a host that will not answer, but a host
// suspected a moment ago (one slow answer, or a rebalance that briefly
// made it unreachable) may be the only one holding the partition now, and
// a refusal without asking it would be an outage of the router's making.
// The second look waits no longer than the active-first timeout for each,
// so a host that is really gone costs a refusal little time.
func routeBy[T any](ctx context.Context, r *router, prefer Preference, pl routePlan, pathQuery string, decode decodeFn[T]) (choice[T], []Attempt, bool) {
	route := routeFreshest[T]
	if prefer == PreferSpread {
		route = routeSpread[T]
	}
	ch, tried, ok := route(ctx, r, pl, pathQuery, decode)
	if ok || ctx.Err() != nil {
		return ch, tried, ok
	}
	var skipped []string
	for _, a := range tried {
		if errors.Is(a.Err, errSuspect) {
			skipped = append(skipped, a.Host)
		}
	}
	if len(skipped) == 0 {
		return ch, tried, ok
	}
	again := pl
	again.askSuspects, again.active, again.others = true, "", nil
	for _, h := range skipped {
		if h == pl.active {
			again.active = h
		} else {
			again.others = append(again.others, h)
		}
	}
	ch, more, ok := route(ctx, r, again, pathQuery, decode)
	// The second look's attempts take the skipped ones' places, so the
	// attempts stay in candidate order.
	for i, a := range tried {
		if !errors.Is(a.Err, errSuspect) {
			continue
		}
		if j := slices.IndexFunc(more, func(m Attempt) bool { return m.Host == a.Host }); j >= 0 {
			tried[i] = more[j]
		} else if ok {
			tried[i] = Attempt{}
		}
	}
	return ch, slices.DeleteFunc(tried, func(a Attempt) bool { return a.Host == "" }), ok
}

// partitionMoving reports whether every attempt failed because the
// partition is moving: not hosted there, skipped or unreachable,
// rebalancing, restoring to become its active, its lag not confirmed for
// now (lagUnconfirmedForNow), or the table named nobody at all. Under
// the active bound the asking instance's own replica (self; "" for a
// Client) refusing for staleness is left out too: a standby there never
// passes that bound, so its refusal says nothing of whether the active is
// moving, and must not end the wait for the active a graceful hand-over is
// promoting.
func partitionMoving(tried []Attempt, self string, bound Staleness) bool {
	for _, a := range tried {
		var se *StaleError
		var te *transportError
		switch {
		case errors.Is(a.Err, ErrNotHostedHere), errors.Is(a.Err, errSuspect), errors.As(a.Err, &te), errors.Is(a.Err, ErrRebalancing),
			lagUnconfirmedForNow(a.Err):
		case bound.AllowsNonActive():
			return false
		case errors.As(a.Err, &se) && se.Role == RoleRestoring:
		case errors.Is(a.Err, ErrTooStale) && self != "" && a.Host == self:
		default:
			return false
		}
	}
	return true
}

// LateConfirmation is how long after a replica's lag confirmation lapsed
// its refusal is still taken as a listing running late rather than
// confirmations that stopped: a replica confirms its changelog's end
// every second or so, and reports its lag unknown once the last
// confirmation is a few seconds old, which a loaded machine or a slow
// broker answer can reach for a moment.
const LateConfirmation = 5 * time.Second

// lagUnconfirmedForNow reports whether err is a replica's refusal of a
// lag or age bound only because the broker has not confirmed its
// changelog's end lately: never since the replica opened (a standby or
// restoring active just assigned, or reopened after a restart), or not
// for a moment past its confirmation window (less than
// LateConfirmation ago). Its refusal is honest but says nothing of the
// partition's other replicas, the table that named only it may be the
// instance's own share of a new balance, which an instance routes on until
// it has read the group's table, moments later, and its next confirmation
// may be moments away. So it does not end a router's wait: the other
// replicas, and it again, are asked before a refusal. A replica whose
// confirmations stopped longer ago (cut off from the broker) or that is
// rebuilding refuses for good.
func lagUnconfirmedForNow(err error) bool {
	var se *StaleError
	if !errors.As(err, &se) {
		return false
	}
	return se.Bound.AllowsNonActive() && !se.Rebuilding && se.Lag < 0 && se.LagConfirmedAgo < LateConfirmation &&
		se.Role != RoleActive && se.Role != RoleUnconfirmed
}

// keyPath is the path and query of a key lookup. The key travels as a
// query parameter: as a path segment, keys such as ".." or "a/b" would be
// cleaned or split on the way.
func keyPath(store, keyText string, q url.Values) string {
	q.Set("key", keyText)
	return "/v1/stores/" + url.PathEscape(store) + "/keys?" + q.Encode()
}
