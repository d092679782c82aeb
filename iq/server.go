package iq

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// StoreCodec tells the HTTP server how to turn a key written in a URL into
// a store key, and stored keys and values into JSON.
type StoreCodec struct {
	Name string
	// EncodeKey parses a key as written in a URL into the store's key
	// bytes (the key serde's encoding).
	EncodeKey func(string) ([]byte, error)
	// DecodeKey turns a stored key into a JSON-encodable value for range
	// answers. Nil renders the key bytes as a string.
	DecodeKey func([]byte) (any, error)
	// DecodeValue turns a stored value into a JSON-encodable value.
	DecodeValue func([]byte) (any, error)
}

// CodecFor builds a StoreCodec from a store's serdes. parseKey reads a key
// as written in a URL; nil handles string, int64, int32 and int keys (as
// decimal), the forms the routing Client writes with fmt.Sprint.
func CodecFor[K, V any](name string, keySerde serde.Serde[K], valueSerde serde.Serde[V], parseKey func(string) (K, error)) StoreCodec {
	if parseKey == nil {
		parseKey = parseKeyText[K]
	}
	return StoreCodec{
		Name: name,
		EncodeKey: func(s string) ([]byte, error) {
			k, err := parseKey(s)
			if err != nil {
				return nil, err
			}
			return keySerde.Encode(k)
		},
		DecodeKey:   func(b []byte) (any, error) { return keySerde.Decode(b) },
		DecodeValue: func(b []byte) (any, error) { return valueSerde.Decode(b) },
	}
}

func parseKeyText[K any](s string) (K, error) {
	var k K
	var err error
	switch p := any(&k).(type) {
	case *string:
		*p = s
	case *int64:
		*p, err = strconv.ParseInt(s, 10, 64)
	case *int32:
		var n int64
		n, err = strconv.ParseInt(s, 10, 32)
		*p = int32(n)
	case *int:
		*p, err = strconv.Atoi(s)
	default:
		err = fmt.Errorf("no parser for keys of type %T (give CodecFor a parseKey)", k)
	}
	return k, err
}

// ServerConfig tunes a Server. Zero fields take the defaults documented on
// each.
type ServerConfig struct {
	// ForwardTimeout bounds one forwarded request. Default 2s.
	ForwardTimeout time.Duration
	// SuspectFor is how long a host whose forward failed at the transport
	// level is routed around, unless the routing table changes first.
	// Default 5s.
	SuspectFor time.Duration
	// MaxRangeEntries caps the entries one partition contributes to a
	// range answer (the limit= parameter may only lower it). Default
	// 10000.
	MaxRangeEntries int
	// FanOut is how many partitions a routed range asks at once.
	// Default 8.
	FanOut int
	// ActiveFirstTimeout bounds the wait for a partition's active before
	// a routed query falls back to the other replicas within its bound
	// (the whole ForwardTimeout applies when nobody else could answer).
	// An active that does not answer in time is routed around like a
	// host that did not answer at all (see SuspectFor). Default 300ms.
	ActiveFirstTimeout time.Duration
	// RebalanceWait is how long a routed query whose routing table names
	// no replica that holds the partition now (the table names none
	// within the bound, or every one asked said it is not hosted there,
	// is rebalancing or did not answer) keeps rereading the table and the
	// local replica and asking again before refusing, as a routing
	// Client's ClientOptions.RebalanceWait does: a rebalance moving the
	// partition, or the instance still learning the new table, is over
	// within moments. A replica that refuses for staleness ends the wait
	// at once, but for the active bound's two cases of a hand-over (the
	// table's active still restoring, and this instance's own standby)
	// and a replica refusing a lag or age bound because the broker has
	// not confirmed its changelog's end since it opened: its refusal says
	// nothing of the others, which are asked before the query is refused.
	// Default 500ms; a negative value does not wait.
	RebalanceWait time.Duration
	// MaxConcurrentRanges caps the range queries the server works on at
	// once, local and routed, its answers to other instances included;
	// past it a range query is answered 429 with a Retry-After header.
	// Each may hold up to MaxRangeEntries entries per partition in
	// memory. Default 4.
	MaxConcurrentRanges int
	// MaxConcurrentForwards caps the key lookups the server is routing to
	// other instances at once; past it a lookup that needs another
	// instance is answered 429 with a Retry-After header. Default 256.
	MaxConcurrentForwards int
	// RetryAfter is what a 429 answer's Retry-After header says, rounded
	// up to whole seconds. Default 1s.
	RetryAfter time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are
	// the http.Server timeouts HTTPServer sets: how long a client may
	// take to send its headers, its whole request, how long an answer
	// may take to write (routing and range scans included), and how long
	// an idle keep-alive connection is kept. Defaults 5s, 10s, 30s, 60s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Transport carries forwarded requests. Nil uses a private transport
	// with a 1s connect timeout (and ForwardTLS).
	Transport http.RoundTripper
	// TLS, when set, is the server side of HTTPS: HTTPServer's server
	// carries it (serve with ListenAndServeTLS("", "") or
	// ServeTLS(listener, "", "")), and requests forwarded to other
	// instances use https, since they serve alike. Without TLS and Token
	// anyone who reaches the port reads every store: keep it private.
	TLS *tls.Config
	// ForwardTLS verifies the other instances when forwarding over HTTPS
	// (RootCAs for a private CA; Certificates when they require client
	// certificates). Nil trusts the system's roots.
	ForwardTLS *tls.Config
	// Token, when set, is a bearer token every request must carry
	// ("Authorization: Bearer TOKEN") except GET /healthz, which probes
	// use; others are answered 401 with reason "unauthorized". Forwarded
	// requests carry it, so every instance of an application needs the
	// same token. Send it over TLS only: it is a password.
	Token string
	// Observe, when set, is called once for every key lookup the server
	// finishes, answered or refused, just before the answer is written
	// (so a caller that has the answer knows it was observed). It runs on
	// the request's goroutine, concurrently with other requests: it must
	// be safe for concurrent use and quick, such as incrementing a
	// metric. Range queries and metadata requests are not observed.
	Observe func(KeyQuery)
	// ObserveRequest, when set, is called once for every request the
	// server finishes, of every endpoint, once its answer is written: for
	// latency histograms by endpoint, role served and outcome. It runs on
	// the request's goroutine and must be safe for concurrent use and
	// quick.
	ObserveRequest func(Request)
}

// KeyQuery describes one key lookup an HTTP server finished, for
// ServerConfig.Observe.
//
// A lookup routed to another instance is observed twice, by two servers:
// the one that forwarded it (Forwarded set, ServedBy naming the other
// host) and the one that answered it locally. Counting only lookups with
// Forwarded unset counts each answer once across a cluster.
type KeyQuery struct {
	// Store is the store named in the request's URL, which may not exist
	// (Reason unknown_store).
	Store string
	// Err is why the lookup was refused; nil when a replica answered,
	// whether or not it found the key.
	Err error
	// Reason is the code the error answer carries in its "reason" field
	// (too_stale, not_available, rebalancing, invalid_query, ...); "" when
	// a replica answered.
	Reason string
	// ServedBy is the replica that answered, when Err is nil.
	ServedBy Provenance
	// Found is whether the answering replica held the key.
	Found bool
	// Forwarded is set when another instance answered and this server
	// passed its answer on.
	Forwarded bool
}

func (s *Server) observe(w http.ResponseWriter, q KeyQuery) {
	if q.Err == nil {
		noteRole(w, q.ServedBy.Role)
	}
	if s.cfg.Observe == nil {
		return
	}
	if q.Err != nil {
		_, q.Reason = classify(q.Err)
	}
	s.cfg.Observe(q)
}

// refuseKey writes err as the answer to a key lookup, observing it.
func (s *Server) refuseKey(w http.ResponseWriter, store string, err error) {
	s.observe(w, KeyQuery{Store: store, Err: err})
	s.writeErr(w, err)
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.ForwardTimeout <= 0 {
		c.ForwardTimeout = 2 * time.Second
	}
	if c.SuspectFor <= 0 {
		c.SuspectFor = 5 * time.Second
	}
	if c.MaxRangeEntries <= 0 {
		c.MaxRangeEntries = 10000
	}
	if c.FanOut <= 0 {
		c.FanOut = 8
	}
	if c.ActiveFirstTimeout <= 0 {
		c.ActiveFirstTimeout = 300 * time.Millisecond
	}
	switch {
	case c.RebalanceWait == 0:
		c.RebalanceWait = 500 * time.Millisecond
	case c.RebalanceWait < 0:
		c.RebalanceWait = 0
	}
	if c.MaxConcurrentRanges <= 0 {
		c.MaxConcurrentRanges = 4
	}
	if c.MaxConcurrentForwards <= 0 {
		c.MaxConcurrentForwards = 256
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.ReadHeaderTimeout, 5 * time.Second}, {&c.ReadTimeout, 10 * time.Second}, {&c.WriteTimeout, 30 * time.Second}, {&c.IdleTimeout, time.Minute}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	return c
}

// Server is the HTTP API of one instance. It serves:
//
//	GET /v1/stores/{store}/keys?key=   ?staleness= &route= (default true) &prefer=freshest|spread &min_position= &partition= &as_of=
//	GET /v1/stores/{store}/keys/{key}  the same, with the key as a path segment (keys such as ".." or "a/b" need the form above)
//	    200 {"key","value","partition","served_by":{"host","role","position","lag","rebuilding","lag_confirmed_ms_ago","age_ms","input_committed_ms_ago"}}
//	        a versioned store's answer adds "valid_from" and, but for its latest version, "valid_to" (ms); as_of (RFC 3339 or ms)
//	        asks it for the value at that time, and is refused (400) by other stores
//	        (position is null while rebuilding; lag, and each _ms figure, null when unknown)
//	    404 the same without "value" when the key is absent on the answering replica
//	    409 {"reason":"behind"} when the replica asked (route=false) is below min_position
//	    429 {"reason":"overloaded"} with Retry-After past MaxConcurrentForwards
//	    503 {"error","reason","tried":[{"host","error","reason"}]} when no replica within the bound answered
//	GET /v1/stores/{store}/range        ?from= &to= &staleness= &route= (default false) &prefer= &partition= &limit= &min_position=
//	    200 {"store","partitions":[{"partition","served_by","entries":[{"key","value"}],"truncated"}],"failed":[...]}
//	    429 past MaxConcurrentRanges
//	GET /v1/stores/{store}/windows?key= &from= &to=  a key's windows (and /keys/{key}/windows), as key lookups; see the package doc
//	GET /v1/stores/{store}/windows      ?from= &to= every key's windows, as ranges
//	GET /v1/stores/{store}/sessions?key= a key's sessions (and /keys/{key}/sessions)
//	GET /v1/metadata/stores/{store}/keys?key=  {"partition","active":"h:p"|null,"standbys":[...],"warmups":[...],"global":true (global store only)}
//	GET /v1/metadata/stores/{store}/keys/{key}  the same
//	GET /v1/metadata/stores/{store}     {"store","partitions","instances":[...]}
//	GET /v1/metadata                    {"instances":[{"host","active":[{"store","partition"}],"standby":[...],"warmup":[...]}],"partitions":{"store":N},"global":[...],"unassigned":true (before the first assignment)}
//	GET /v1/lags                        [{"store","partition","role","position","end","lag","rebuilding","restored","lag_confirmed_ms_ago","since_caught_up_ms","input_committed_ms_ago","age_ms"}]
//	GET /healthz                        200 when the routing table is known, no local replica is restoring and not every local active is unconfirmed, else 503
//
// Errors are {"error": message, "reason": code, ...} with the status
// StatusFor gives. A min_position no replica has reached is answered 409
// (reason behind) by a replica asked with route=false; routed, it is a 503
// whose tried list gives reason behind for each replica that refused so.
//
// With route=true (and prefer=freshest, the default) a key lookup is
// answered locally when the local replica is the running active, or is
// caught up (a confirmed lag of 0) and within the bound; otherwise the
// active is asked first (for ActiveFirstTimeout when others may answer),
// then every standby and warmup the bound allows at once, and the
// freshest answer, the local replica's included, is served. prefer=spread
// picks among all of them at random instead. Forwarded requests carry
// route=false, so they never travel further. A host whose forward fails
// without an HTTP answer is skipped for a while (see
// ServerConfig.SuspectFor). Routed ranges do the same for each partition.
type Server struct {
	b      Backend
	q      *Querier
	cfg    ServerConfig
	codecs map[string]StoreCodec
	rt     *router
	mux    *http.ServeMux
	// ranges and forwards hold one token per range query and per routed
	// key lookup in progress.
	ranges, forwards chan struct{}
}

// NewServer returns the HTTP API of the instance b describes, for the
// stores named by codecs, tuned by cfg (ServerConfig{} for the defaults).
func NewServer(b Backend, cfg ServerConfig, codecs ...StoreCodec) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		b:      b,
		q:      NewQuerier(b),
		cfg:    cfg,
		codecs: make(map[string]StoreCodec, len(codecs)),
		rt:     newRouter(cfg.Transport, cfg.TLS != nil, cfg.ForwardTLS, cfg.Token, cfg.ForwardTimeout, cfg.SuspectFor),
		mux:    http.NewServeMux(),

		ranges:   make(chan struct{}, cfg.MaxConcurrentRanges),
		forwards: make(chan struct{}, cfg.MaxConcurrentForwards),
	}
	for _, c := range codecs {
		s.codecs[c.Name] = c
	}
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /v1/metadata", s.handleMetadata)
	s.mux.HandleFunc("GET /v1/metadata/stores/{store}", s.handleStoreMetadata)
	s.mux.HandleFunc("GET /v1/metadata/stores/{store}/keys/{key}", func(w http.ResponseWriter, r *http.Request) {
		s.handleKeyMetadata(w, r, r.PathValue("key"))
	})
	s.mux.HandleFunc("GET /v1/metadata/stores/{store}/keys", func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("key") {
			writeErr(w, invalidf("key metadata needs a key: /v1/metadata/stores/%s/keys?key=KEY", r.PathValue("store")))
			return
		}
		s.handleKeyMetadata(w, r, r.URL.Query().Get("key"))
	})
	s.mux.HandleFunc("GET /v1/lags", s.handleLags)
	s.mux.HandleFunc("GET /v1/tasks", s.handleTasks)
	s.mux.HandleFunc("GET /v1/stores/{store}/keys/{key}", func(w http.ResponseWriter, r *http.Request) {
		s.handleKey(w, r, r.PathValue("key"))
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/keys", func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("key") {
			s.refuseKey(w, r.PathValue("store"), invalidf("a key lookup needs a key: /v1/stores/%s/keys?key=KEY", r.PathValue("store")))
			return
		}
		s.handleKey(w, r, r.URL.Query().Get("key"))
	})
	s.mux.HandleFunc("GET /v1/stores/{store}/range", s.handleRange)
	s.registerWindows()
	s.registerWatches()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, invalidf("%s %s is no endpoint of the query API (a key that is empty or holds \"/\" goes in ?key=)", r.Method, r.URL.EscapedPath()))
	})
	return s
}

// dotOrEmptySegment reports whether an escaped path has a segment that is
// empty, "." or "..". ServeMux answers such a path with a redirect to its
// cleaned form, which names another key or endpoint: /keys/../windows
// would become every key's windows.
func dotOrEmptySegment(escaped string) bool {
	for _, seg := range strings.Split(strings.TrimPrefix(escaped, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// ServeHTTP implements http.Handler. With a Token configured it refuses
// requests without it, /healthz excepted.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.observed(w, r, s.serve)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token != "" && r.URL.Path != "/healthz" && !bearerMatches(r, s.cfg.Token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="eddy"`)
		writeErr(w, ErrUnauthorized)
		return
	}
	if p := r.URL.EscapedPath(); p != "/" && dotOrEmptySegment(p) {
		writeErr(w, invalidf("path %q has an empty, \".\" or \"..\" segment; put such a key in the query string (?key=)", p))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// bearerMatches reports whether r carries token as its bearer token,
// comparing in constant time so the answer's timing does not reveal how
// much of a guess was right.
func bearerMatches(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// HTTPServer returns an http.Server serving s on addr with the timeouts of
// the ServerConfig, so that slow or idle clients cannot hold connections
// open. Replace its Handler to serve more than the query API (wrapping s).
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s,
		TLSConfig:         s.cfg.TLS,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
}

// acquire takes a token of sem, or fails with ErrOverloaded at once.
func acquire(sem chan struct{}, what string) (release func(), err error) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	default:
		return nil, fmt.Errorf("%w: %d %s already in progress", ErrOverloaded, cap(sem), what)
	}
}

// writeErr writes an error answer, with the Retry-After an overloaded
// answer promises.
func (s *Server) writeErr(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrOverloaded) {
		w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	writeErr(w, err)
}

// Querier returns the in-process query API the server answers from.
func (s *Server) Querier() *Querier { return s.q }

// Close releases the idle connections the server keeps to other
// instances. The server stays usable; call Close when the instance stops.
func (s *Server) Close() { s.rt.close() }

func (s *Server) self() string {
	if h := s.b.Self(); h != "" {
		return h
	}
	return "local"
}

func (s *Server) codec(w http.ResponseWriter, store string) (StoreCodec, bool) {
	c, ok := s.codecs[store]
	if !ok {
		writeErr(w, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
	}
	return c, ok
}

// params are a query's URL parameters.
type params struct {
	bound        Staleness
	route        bool
	partition    int32
	hasPartition bool
	minPos       int64
	hasMin       bool
	limit        int
	prefer       Preference
	asOf         int64
	hasAsOf      bool
}

// parseAsOf reads an as_of time: RFC 3339, or milliseconds since the
// epoch.
func parseAsOf(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, invalidf("as_of=%q: want an RFC 3339 time or milliseconds since the epoch", s)
	}
	return t.UnixMilli(), nil
}

func parseParams(v url.Values, routeDefault bool, maxLimit int) (params, error) {
	p := params{route: routeDefault, limit: maxLimit}
	var err error
	if p.bound, err = ParseStaleness(v.Get("staleness")); err != nil {
		return p, err
	}
	if s := v.Get("route"); s != "" {
		if p.route, err = strconv.ParseBool(s); err != nil {
			return p, invalidf("route=%q: want true or false", s)
		}
	}
	if s := v.Get("partition"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return p, invalidf("partition=%q: want a non-negative partition number", s)
		}
		p.partition, p.hasPartition = int32(n), true
	}
	if s := v.Get("min_position"); s != "" {
		if p.minPos, err = strconv.ParseInt(s, 10, 64); err != nil || p.minPos < 0 {
			return p, invalidf("min_position=%q: want a changelog offset, 0 or more", s)
		}
		p.hasMin = true
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return p, invalidf("limit=%q: want a positive count", s)
		}
		p.limit = min(n, maxLimit)
	}
	if p.prefer, err = ParsePreference(v.Get("prefer")); err != nil {
		return p, err
	}
	if s := v.Get("as_of"); s != "" {
		if p.asOf, err = parseAsOf(s); err != nil {
			return p, err
		}
		p.hasAsOf = true
	}
	return p, nil
}

func (p params) options() []QueryOption {
	opts := []QueryOption{WithStaleness(p.bound)}
	if p.hasPartition {
		opts = append(opts, WithPartition(p.partition))
	}
	if p.hasMin {
		opts = append(opts, WithMinPosition(p.minPos))
	}
	if p.limit > 0 {
		opts = append(opts, WithLimit(p.limit))
	}
	if p.hasAsOf {
		opts = append(opts, AsOfMillis(p.asOf))
	}
	return opts
}

// forwardQuery is the query of a forwarded request: the same bound,
// minimum position and partition, never routed again.
func (p params) forwardQuery() url.Values {
	v := url.Values{}
	v.Set("staleness", p.bound.String())
	v.Set("route", "false")
	if p.hasMin {
		v.Set("min_position", strconv.FormatInt(p.minPos, 10))
	}
	if p.hasPartition {
		v.Set("partition", strconv.Itoa(int(p.partition)))
	}
	if p.hasAsOf {
		v.Set("as_of", strconv.FormatInt(p.asOf, 10))
	}
	return v
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if md, err := s.b.Metadata(); err != nil || md.Unassigned {
		if err == nil {
			// Routing through the group, but holding nothing yet.
			err = ErrNotStarted
		}
		writeErr(w, err)
		return
	}
	confirmed, unconfirmed := 0, 0
	for _, i := range s.b.LocalReplicas() {
		switch i.Role {
		case RoleRestoring:
			writeErr(w, fmt.Errorf("%w: store %q partition %d is restoring (lag %d)", ErrRebalancing, i.Store, i.Partition, i.Lag))
			return
		case RoleActive:
			confirmed++
		case RoleUnconfirmed:
			unconfirmed++
		}
	}
	// An instance the group has not confirmed lately (cut off from the
	// broker, or just resumed from a pause) answers for none of its
	// partitions as the active: not ready, so that load balancers send
	// queries elsewhere. Some actives unconfirmed (one stream thread's
	// member among several) leaves it serving the others: degraded.
	switch {
	case unconfirmed > 0 && confirmed == 0:
		writeErr(w, fmt.Errorf("%w: the group has not confirmed this instance lately (cut off from the broker, or paused): its %d active store partitions are unconfirmed",
			ErrRebalancing, unconfirmed))
	case unconfirmed > 0:
		writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "unconfirmed": unconfirmed})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func (s *Server) handleMetadata(w http.ResponseWriter, _ *http.Request) {
	m, err := s.b.Metadata()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireMetadata(m))
}

func (s *Server) handleStoreMetadata(w http.ResponseWriter, r *http.Request) {
	sm, err := s.q.StoreMetadata(r.PathValue("store"))
	if err != nil {
		writeErr(w, err)
		return
	}
	wm := toWireMetadata(Metadata{Hosts: sm.Hosts})
	writeJSON(w, http.StatusOK, struct {
		Store      string         `json:"store"`
		Partitions int32          `json:"partitions"`
		Instances  []wireInstance `json:"instances"`
		Global     bool           `json:"global,omitempty"`
	}{sm.Store, sm.Partitions, wm.Instances, sm.Global})
}

func (s *Server) handleKeyMetadata(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	c, ok := s.codec(w, store)
	if !ok {
		return
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		writeErr(w, invalidf("malformed key %q for store %q: %v", keyText, store, err))
		return
	}
	km, err := s.q.KeyMetadata(store, kb)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := wireKeyMetadata{Partition: km.Partition, Standbys: nonNil(km.Standbys), Warmups: nonNil(km.Warmups), Global: km.Global}
	if km.Active != "" {
		out.Active = &km.Active
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleLags(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, lagsOf(s.b.LocalReplicas()))
}

// isGlobal reports whether store is a global store, which every instance
// holds whole: it is answered where it is asked, never routed.
func (s *Server) isGlobal(store string) bool {
	m, err := s.b.Metadata()
	return err == nil && m.IsGlobal(store)
}

func (s *Server) handleKey(w http.ResponseWriter, r *http.Request, keyText string) {
	store := r.PathValue("store")
	v := r.URL.Query()
	c, ok := s.codecs[store]
	if !ok {
		s.refuseKey(w, store, fmt.Errorf("%w: %q is not served over HTTP", ErrUnknownStore, store))
		return
	}
	p, err := parseParams(v, true, 0)
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	kb, err := c.EncodeKey(keyText)
	if err != nil {
		s.refuseKey(w, store, invalidf("malformed key %q for store %q: %v", keyText, store, err))
		return
	}
	o := buildOptions(p.options())
	if err := s.q.checkKeyQuery(store, &o); err != nil {
		s.refuseKey(w, store, err)
		return
	}
	part := p.partition
	if !p.hasPartition {
		if part, err = s.b.KeyPartition(store, kb); err != nil {
			s.refuseKey(w, store, err)
			return
		}
	}
	ctx := r.Context()
	rep, info, localErr := s.q.replica(store, part, &o)
	var local *Provenance
	if localErr == nil {
		lp := provenanceOf(s.b.Self(), part, info)
		local = &lp
		if !p.route || lp.Role == RoleGlobal || (p.prefer == PreferFreshest && lp.caughtUp()) {
			s.answerKeyLocally(w, c, keyText, rep, info, part, kb, p.bound, o.at(), nil)
			return
		}
	}
	if !p.route || !reroutable(localErr) || s.isGlobal(store) {
		s.refuseKey(w, store, localErr)
		return
	}
	release, err := acquire(s.forwards, "forwarded key lookups")
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	defer release()
	type keyAnswer struct {
		status int
		body   []byte
	}
	ch, rep, info, err := routeRechecked(ctx, s, store, part, p, &o, local, localErr, keyPath(store, keyText, p.forwardQuery()), func(st int, body []byte) (keyAnswer, Provenance, error) {
		if st == http.StatusOK || st == http.StatusNotFound {
			var k wireKey
			if json.Unmarshal(body, &k) == nil && k.ServedBy != nil {
				return keyAnswer{st, body}, k.ServedBy.provenance(k.Partition), nil
			}
		}
		return keyAnswer{}, Provenance{}, decodeErrorAnswer(st, body)
	})
	if err != nil {
		s.refuseKey(w, store, err)
		return
	}
	if ch.local {
		s.answerKeyLocally(w, c, keyText, rep, info, part, kb, p.bound, o.at(), ch.tried)
		return
	}
	s.observe(w, KeyQuery{Store: store, ServedBy: ch.prov, Found: ch.val.status == http.StatusOK, Forwarded: true})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ch.val.status)
	w.Write(ch.val.body)
}

// answerKeyLocally reads a key from the local replica. tried, the
// attempts of a router that fell back on it, make up the refusal if the
// replica moved away meanwhile.
func (s *Server) answerKeyLocally(w http.ResponseWriter, c StoreCodec, keyText string, rep Replica, info ReplicaInfo, part int32, kb []byte, bound Staleness, at int64, tried []Attempt) {
	res, err := s.q.getFrom(rep, info, bound, c.Name, part, kb, at)
	if err != nil {
		if tried != nil {
			err = &UnavailableError{Store: c.Name, Partition: part, Bound: bound, Tried: append(tried, Attempt{Host: s.self(), Err: err})}
		}
		s.refuseKey(w, c.Name, err)
		return
	}
	s.writeKey(w, c, keyText, res)
}

// routed is what routeFor settled on, with the attempts that failed on the
// way (they explain a later failure of the local replica).
type routed[T any] struct {
	choice[T]
	tried []Attempt
}

// routeFor asks the other replicas of a partition for a query the local
// replica did not answer at once: local is that replica when it may
// answer within the bound (a fallback), localErr why it may not. It
// returns the answer chosen, or the *UnavailableError listing every
// attempt. While nobody holds the partition now (moving), it asks again
// every movingRetryPause for up to RebalanceWait, rereading the routing
// table and the local replica.
func routeFor[T any](ctx context.Context, s *Server, store string, part int32, p params, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (routed[T], error) {
	until := time.Now().Add(s.cfg.RebalanceWait)
	var first error
	for {
		r, err, moving := routeOnce(ctx, s, store, part, p, local, localErr, pathQuery, decode)
		if first == nil {
			first = err
		}
		if err == nil || !moving {
			return r, err
		}
		if !time.Now().Before(until) || ctx.Err() != nil {
			// Later rounds skip the hosts the first found unreachable:
			// its attempts say more then.
			var ue *UnavailableError
			if errors.As(err, &ue) && len(ue.Tried) > 0 && allSuspect(ue.Tried) {
				err = first
			}
			return r, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(movingRetryPause):
		}
		o := buildOptions(p.options())
		local = nil
		_, info, lerr := s.q.replica(store, part, &o)
		if localErr = lerr; lerr == nil {
			lp := provenanceOf(s.b.Self(), part, info)
			local = &lp
		}
	}
}

// routeRechecked is routeFor, checking again a local replica it settles
// on, which it returns: routing can take a while, and the replica may have
// changed meanwhile (a standby promoted to a restoring active knows no lag
// until the broker confirms its changelog's end). If that replica no longer
// answers within the bound, the other replicas are asked instead, once.
func routeRechecked[T any](ctx context.Context, s *Server, store string, part int32, p params, o *queryOptions, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (routed[T], Replica, ReplicaInfo, error) {
	for again := true; ; again = false {
		ch, err := routeFor(ctx, s, store, part, p, local, localErr, pathQuery, decode)
		if err != nil || !ch.local {
			return ch, nil, ReplicaInfo{}, err
		}
		rep, info, lerr := s.q.replica(store, part, o)
		if lerr == nil {
			return ch, rep, info, nil
		}
		if !again || !reroutable(lerr) {
			return ch, nil, ReplicaInfo{}, &UnavailableError{Store: store, Partition: part, Bound: p.bound, Tried: append(ch.tried, Attempt{Host: s.self(), Err: lerr})}
		}
		local, localErr = nil, lerr
	}
}

// routeOnce is one round of routeFor. moving reports a failure because
// nobody holds the partition now: no host the table names within the
// bound, or every one asked (the local replica included) not hosting it,
// rebalancing or not answering.
func routeOnce[T any](ctx context.Context, s *Server, store string, part int32, p params, local *Provenance, localErr error, pathQuery string, decode decodeFn[T]) (_ routed[T], _ error, moving bool) {
	ue := &UnavailableError{Store: store, Partition: part, Bound: p.bound}
	if localErr != nil && !errors.Is(localErr, ErrNotHostedHere) {
		ue.Tried = append(ue.Tried, Attempt{Host: s.self(), Err: localErr})
	}
	var km KeyQueryMetadata
	m, err := s.b.Metadata()
	if err == nil {
		km, err = locate(m, store, part)
		var inner *UnavailableError
		if errors.As(err, &inner) {
			err = inner.Cause
		}
	}
	if err != nil {
		if local != nil {
			// Nobody else is known: the local replica is the freshest.
			return routed[T]{choice: choice[T]{local: true, prov: *local}}, nil, false
		}
		ue.Cause = err
		// The table names no host at all for the partition.
		return routed[T]{}, ue, errors.Is(err, errNoHost) && partitionMoving(ue.Tried, s.self(), p.bound)
	}
	pl := newRoutePlan(km, p.bound, s.b.Self(), local, s.cfg.ActiveFirstTimeout, memoFingerprint(m))
	ch, tried, ok := routeBy(ctx, s.rt, p.prefer, pl, pathQuery, decode)
	if ok {
		return routed[T]{choice: ch, tried: append(ue.Tried, tried...)}, nil, false
	}
	ue.Tried = append(ue.Tried, tried...)
	if err := ctx.Err(); err != nil {
		ue.Cause = err
		return routed[T]{}, ue, false
	} else if len(ue.Tried) == 0 {
		ue.Cause = fmt.Errorf("no host within staleness=%s holds the partition (active %q)", p.bound, km.Active)
	}
	return routed[T]{}, ue, partitionMoving(ue.Tried, s.self(), p.bound)
}

func allSuspect(tried []Attempt) bool {
	for _, a := range tried {
		if !errors.Is(a.Err, errSuspect) {
			return false
		}
	}
	return true
}

func (s *Server) writeKey(w http.ResponseWriter, c StoreCodec, keyText string, res Result[[]byte]) {
	out := wireKey{Key: keyText, Partition: res.Provenance.Partition, ServedBy: servedBy(res.Provenance)}
	if !res.Found {
		out.Error = "key not found"
		s.observe(w, KeyQuery{Store: c.Name, ServedBy: res.Provenance})
		writeJSON(w, http.StatusNotFound, out)
		return
	}
	if res.ValidFrom != 0 || res.ValidTo != 0 {
		out.ValidFrom = &res.ValidFrom
		if res.ValidTo != statestore.OpenEnded {
			out.ValidTo = &res.ValidTo
		}
	}
	v, err := c.DecodeValue(res.Value)
	if err == nil {
		out.Value, err = json.Marshal(v)
	}
	if err != nil {
		s.refuseKey(w, c.Name, fmt.Errorf("iq: store %q partition %d: decode value: %w", c.Name, res.Provenance.Partition, err))
		return
	}
	out.TimestampMs = res.Timestamp
	s.observe(w, KeyQuery{Store: c.Name, ServedBy: res.Provenance, Found: true})
	writeJSON(w, http.StatusOK, out)
}

func encodeEntries(c StoreCodec, pe PartitionEntries[[]byte, []byte]) (wirePartitionRange, error) {
	out := wirePartitionRange{Partition: pe.Provenance.Partition, ServedBy: servedBy(pe.Provenance), Entries: make([]wireEntry, 0, len(pe.Entries)), Truncated: pe.Truncated}
	for _, e := range pe.Entries {
		var k any = string(e.Key)
		var err error
		if c.DecodeKey != nil {
			if k, err = c.DecodeKey(e.Key); err != nil {
				return out, fmt.Errorf("iq: store %q partition %d: decode key: %w", c.Name, out.Partition, err)
			}
		}
		v, err := c.DecodeValue(e.Value)
		if err != nil {
			return out, fmt.Errorf("iq: store %q partition %d: decode value: %w", c.Name, out.Partition, err)
		}
		we := wireEntry{TimestampMs: e.Timestamp}
		if we.Key, err = json.Marshal(k); err == nil {
			we.Value, err = json.Marshal(v)
		}
		if err != nil {
			return out, fmt.Errorf("iq: store %q partition %d: %w", c.Name, out.Partition, err)
		}
		out.Entries = append(out.Entries, we)
	}
	return out, nil
}

// encodeAnswered turns a local multi-partition answer into its wire form:
// each answered partition encoded, each refused one listed as a failure.
func encodeAnswered[P, W any](answered []P, refused []PartitionError, encode func(P) (W, error)) ([]W, []wirePartitionError, error) {
	out := make([]W, 0, len(answered))
	for _, p := range answered {
		wp, err := encode(p)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, wp)
	}
	var failed []wirePartitionError
	for _, f := range refused {
		failed = append(failed, partitionFailure(f.Partition, f.Err))
	}
	return out, failed, nil
}

func partitionFailure(p int32, err error) wirePartitionError {
	_, we := toWireError(err)
	return wirePartitionError{Partition: p, wireError: we}
}

// admitRange starts a range-like request (range, all keys' windows) on
// store: its codec, a place among MaxConcurrentRanges (release gives it
// back) and its parameters, bounded by MaxRangeEntries and not routed by
// default. Without ok the refusal is written.
func (s *Server) admitRange(w http.ResponseWriter, r *http.Request, store string) (c StoreCodec, p params, release func(), ok bool) {
	if c, ok = s.codec(w, store); !ok {
		return c, p, nil, false
	}
	release, err := acquire(s.ranges, "range queries")
	if err != nil {
		s.writeErr(w, err)
		return c, p, nil, false
	}
	if p, err = parseParams(r.URL.Query(), false, s.cfg.MaxRangeEntries); err != nil {
		writeErr(w, err)
		release()
		return c, p, nil, false
	}
	return c, p, release, true
}

func (s *Server) handleRange(w http.ResponseWriter, r *http.Request) {
	store := r.PathValue("store")
	c, p, release, ok := s.admitRange(w, r, store)
	if !ok {
		return
	}
	defer release()
	v := r.URL.Query()
	_, err := s.q.requireKind(store, KindKeyValue)
	if err != nil {
		writeErr(w, err)
		return
	}
	var from, to []byte
	for _, b := range []struct {
		name string
		dst  *[]byte
	}{{"from", &from}, {"to", &to}} {
		if t := v.Get(b.name); t != "" {
			if *b.dst, err = c.EncodeKey(t); err != nil {
				writeErr(w, invalidf("malformed %s=%q for store %q: %v", b.name, t, store, err))
				return
			}
		}
	}
	ctx := r.Context()
	out := wireRange{Store: store, Partitions: []wirePartitionRange{}}
	if !p.route || s.isGlobal(store) {
		res, err := s.q.RangeBytes(ctx, store, from, to, p.options()...)
		if err != nil {
			writeErr(w, err)
			return
		}
		out.Partitions, out.Failed, err = encodeAnswered(res.Partitions, res.Refused, func(pe PartitionEntries[[]byte, []byte]) (wirePartitionRange, error) {
			return encodeEntries(c, pe)
		})
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
	out.Partitions, out.Failed = fanOut(s.cfg.FanOut, parts, func(part int32) (wirePartitionRange, error) {
		return s.rangePartition(ctx, c, store, part, from, to, v, p)
	})
	writeJSON(w, http.StatusOK, out)
}

// decodeOnePartition reads another instance's answer to a routed
// range-like query asked of one partition (range, all keys' windows): the
// partition's entries and who served them, or the error the answer carries.
func decodeOnePartition[P any](part int32, servedBy func(P) *wireServedBy) decodeFn[P] {
	return func(st int, body []byte) (P, Provenance, error) {
		var zero P
		if st == http.StatusOK {
			var wr struct {
				Partitions []P                  `json:"partitions"`
				Failed     []wirePartitionError `json:"failed"`
			}
			if json.Unmarshal(body, &wr) == nil && len(wr.Partitions) == 1 {
				if sb := servedBy(wr.Partitions[0]); sb != nil {
					return wr.Partitions[0], sb.provenance(part), nil
				}
			}
			if len(wr.Failed) == 1 {
				return zero, Provenance{}, fromWireError(st, wr.Failed[0].wireError)
			}
		}
		return zero, Provenance{}, decodeErrorAnswer(st, body)
	}
}

// partitionsAsked lists the partitions a routed range-like query covers:
// the one its partition parameter names, or all of the store's.
func (s *Server) partitionsAsked(store string, p params) ([]int32, error) {
	m, err := s.b.Metadata()
	if err != nil {
		return nil, &UnavailableError{Store: store, Partition: -1, Bound: p.bound, Cause: err}
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return nil, err
	}
	if p.hasPartition {
		if p.partition < 0 || p.partition >= n {
			return nil, fmt.Errorf("%w: store %q has %d partitions, asked for %d", ErrUnknownPartition, store, n, p.partition)
		}
		return []int32{p.partition}, nil
	}
	parts := make([]int32, 0, n)
	for i := int32(0); i < n; i++ {
		parts = append(parts, i)
	}
	return parts, nil
}

// askRecovered asks one partition, turning a panic into the partition's
// error. fanOut asks on goroutines of its own, where a panic would end the
// process, not just the request as in a handler (net/http recovers those):
// a store whose files were damaged after it was opened makes badger panic
// when a read reaches the damaged block.
func askRecovered[T any](part int32, ask func(int32) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("iq: partition %d: reading it panicked: %v", part, r)
		}
	}()
	return ask(part)
}

// fanOut asks every partition with ask, at most width at once, and returns
// the answers and the failures, each in partition order.
func fanOut[T any](width int, parts []int32, ask func(int32) (T, error)) ([]T, []wirePartitionError) {
	type slot struct {
		ok   T
		fail *wirePartitionError
	}
	slots := make([]slot, len(parts))
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := askRecovered(part, ask)
			if err != nil {
				f := partitionFailure(part, err)
				slots[i].fail = &f
				return
			}
			slots[i].ok = v
		}()
	}
	wg.Wait()
	oks := make([]T, 0, len(parts)) // an answer lists no partitions as [], not null
	var fails []wirePartitionError
	for _, sl := range slots {
		if sl.fail != nil {
			fails = append(fails, *sl.fail)
		} else {
			oks = append(oks, sl.ok)
		}
	}
	return oks, fails
}

// rangePartition answers one partition of a routed range
// (routePartition).
func (s *Server) rangePartition(ctx context.Context, c StoreCodec, store string, part int32, from, to []byte, v url.Values, p params) (wirePartitionRange, error) {
	p.partition, p.hasPartition = part, true
	readLocal := func() (wirePartitionRange, error) {
		res, err := s.q.RangeBytes(ctx, store, from, to, p.options()...)
		if err != nil {
			return wirePartitionRange{}, err
		}
		return encodeEntries(c, res.Partitions[0])
	}
	q := p.forwardQuery()
	q.Set("limit", strconv.Itoa(p.limit))
	for _, k := range []string{"from", "to"} {
		if t := v.Get(k); t != "" {
			q.Set(k, t)
		}
	}
	pathQuery := "/v1/stores/" + url.PathEscape(store) + "/range?" + q.Encode()
	return routePartition(ctx, s, store, part, p, pathQuery, readLocal,
		func(w wirePartitionRange) *wireServedBy { return w.ServedBy })
}

// routePartition answers one partition of a routed range-like query
// (range, all keys' windows; p names the partition), choosing the replica
// as a routed key lookup does: readLocal reads the local one, pathQuery
// asks another instance, and servedBy finds who served its answer.
func routePartition[P any](ctx context.Context, s *Server, store string, part int32, p params, pathQuery string, readLocal func() (P, error), servedBy func(P) *wireServedBy) (P, error) {
	var zero P
	o := buildOptions(p.options())
	_, info, localErr := s.q.replica(store, part, &o)
	var local *Provenance
	if localErr == nil {
		lp := provenanceOf(s.b.Self(), part, info)
		local = &lp
		if p.prefer == PreferFreshest && lp.caughtUp() {
			return readLocal()
		}
	}
	if !reroutable(localErr) {
		return zero, localErr
	}
	ch, err := routeFor(ctx, s, store, part, p, local, localErr, pathQuery, decodeOnePartition(part, servedBy))
	if err != nil {
		return zero, err
	}
	if ch.local {
		return readLocal()
	}
	return ch.val, nil
}
