package iq

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
	// closing ends when Close is called, and with it every watch stream.
	closing     context.Context
	closeStream context.CancelFunc
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
	s.closing, s.closeStream = context.WithCancel(context.Background())
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
// open, and whose Shutdown closes s first (Close), ending its watch
// streams rather than waiting for their clients. Replace its Handler to
// serve more than the query API (wrapping s).
func (s *Server) HTTPServer(addr string) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           s,
		TLSConfig:         s.cfg.TLS,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
	srv.RegisterOnShutdown(s.Close)
	return srv
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

// Close ends the watch streams in progress, each with an end event that
// says the server is shutting down and where to resume (a client resumes
// on another replica), and releases the idle connections the server keeps
// to other instances. An http.Server's Shutdown waits for its handlers, a
// watch stream's included, so Close must come first: register it with
// RegisterOnShutdown, or call it before. Other queries are still answered
// after Close; a watch started later ends at once.
func (s *Server) Close() {
	s.closeStream()
	s.rt.close()
}

// errServerClosing ends the watch streams when the server closes.
var errServerClosing = fmt.Errorf("%w: the query server is closing", ErrShuttingDown)

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

// isGlobal reports whether store is a global store, which every instance
// holds whole: it is answered where it is asked, never routed.
func (s *Server) isGlobal(store string) bool {
	m, err := s.b.Metadata()
	return err == nil && m.IsGlobal(store)
}
