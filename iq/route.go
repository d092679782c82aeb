package iq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxAnswerBytes bounds how much of another instance's answer a router
// reads, so a misbehaving peer cannot exhaust memory.
const maxAnswerBytes = 64 << 20

// candidates orders the hosts that may answer for a partition under a
// bound: the active first, then standbys, then warmups, leaving out skip
// (the asking instance, which already tried itself).
func candidates(km KeyQueryMetadata, bound Staleness, skip string) []string {
	var hosts []string
	if km.Active != "" && km.Active != skip {
		hosts = append(hosts, km.Active)
	}
	if !bound.AllowsNonActive() {
		return hosts
	}
	for _, h := range km.Standbys {
		if h != skip {
			hosts = append(hosts, h)
		}
	}
	for _, h := range km.Warmups {
		if h != skip {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

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
}

// newTransport is the transport routers use when not given one: short
// connect timeouts so a dead host is found out fast, and enough idle
// connections per host that a busy router keeps its connections warm.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
	}
}

func newRouter(rt http.RoundTripper, timeout, suspectFor time.Duration) *router {
	if rt == nil {
		rt = newTransport()
	}
	return &router{hc: &http.Client{Transport: rt}, timeout: timeout, suspects: newSuspects(suspectFor)}
}

func (r *router) close() { r.hc.CloseIdleConnections() }

// get sends one GET to host and reads the answer. An error means no HTTP
// answer came back; it is a *transportError unless ctx ended first.
func (r *router) get(ctx context.Context, host, pathQuery string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+pathQuery, nil)
	if err != nil {
		return 0, nil, &transportError{host: host, err: err}
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
		return &remoteError{status: status, msg: fmt.Sprintf("iq: HTTP %d %s: %s", status, http.StatusText(status), snippet(body))}
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
	return !(errors.Is(err, ErrInvalidQuery) || errors.Is(err, ErrUnknownStore) ||
		errors.Is(err, ErrUnknownPartition) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded))
}

// normalizeAddr accepts host:port or an http:// URL with no path.
func normalizeAddr(a string) (string, error) {
	a = strings.TrimSpace(a)
	a = strings.TrimPrefix(a, "http://")
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
