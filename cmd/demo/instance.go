package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// Names the word-count application uses.
const (
	inputTopic  = "text"
	outputTopic = "word-counts"
	countsStore = "counts"
	// minuteTopic gets each word's final count of each minute, once the
	// minute has closed (emit-final, after minuteGrace).
	minuteTopic = "word-counts-per-minute"
	// minuteStore is the queryable per-minute count, updated as words
	// arrive; it keeps minuteStoreGrace of closed minutes besides the
	// current one.
	minuteStore = "counts-per-minute"
	// minuteFinalStore holds the minutes whose final count is not out yet.
	minuteFinalStore = "counts-per-minute-final"
	// deadLetterTopic gets the input lines the instances skip: lines that
	// cannot be counted, such as one whose word is too large for the
	// repartition topic's records.
	deadLetterTopic = "word-counts-dead-letters"
)

// Grace periods of the per-minute counts: how late (in event time) a word
// may arrive and still count in its minute. The queryable store's is long
// so that it keeps the last minutes to query.
const (
	minuteGrace      = 10 * time.Second
	minuteStoreGrace = 10 * time.Minute
)

// wordCount is the demo's topology: lines in, a count per word in the store
// "counts", every new count out to "word-counts"; and per minute (tumbling
// one-minute windows of event time), each word's count so far in the
// window store "counts-per-minute" and its final count, once the minute
// has closed, out to "word-counts-per-minute".
func wordCount() (*topology.Topology, error) {
	b := topology.NewBuilder()
	lines := topology.Stream(b, inputTopic, serde.Bytes, serde.String)
	ws := topology.FlatMapValues(lines, func(_ []byte, line string) []string { return words(line) })
	// The three counts share the grouping's repartition topic, which
	// therefore carries every word: topology.WithCombining does not apply
	// to a grouping aggregated more than once.
	grouped := topology.GroupBy(ws, func(_ []byte, w string) string { return w }, "words", serde.String, serde.String)
	counts := grouped.Count(countsStore)
	counts.ToStream().To(outputTopic, serde.String, serde.Int64)
	topology.WindowedBy(grouped, topology.TumblingWindows(time.Minute).Grace(minuteStoreGrace)).Count(minuteStore)
	final := topology.TumblingWindows(time.Minute).Grace(minuteGrace)
	topology.WindowedBy(grouped, final).EmitFinal().Count(minuteFinalStore).ToStream().
		To(minuteTopic, topology.TimeWindowedSerde(serde.String, final.Size()), serde.Int64)
	return b.Build()
}

// ensureTopics creates the input and output topics if they are missing, with
// the broker's default partition count. While no broker can be reached (an
// instance started before its broker) it tries again, every 250 ms at
// first and every 5 s at most, as long as ctx allows, as App.Start does.
func ensureTopics(ctx context.Context, log *slog.Logger, brokers []string, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var resp kadm.CreateTopicResponses
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		resp, err = adm.CreateTopics(ctx, -1, -1, nil, inputTopic, outputTopic, minuteTopic, deadLetterTopic)
		if err == nil || !runtime.IsUnreachable(err) {
			break
		}
		log.Warn("no broker reachable; retrying", "brokers", brokers, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topics: no broker reachable (%w): %w", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// countsServer serves the instance's query API for the "counts" and
// "counts-per-minute" stores, with the security settings of cfg, reporting
// every key query and every request to m.
func countsServer(app *runtime.App, cfg iq.ServerConfig, m *instanceMetrics) *iq.Server {
	cfg.Observe, cfg.ObserveRequest = m.observe, m.observeRequest
	return iq.NewServer(app.Queries(), cfg, iq.CodecFor(countsStore, serde.String, serde.Int64, nil),
		iq.CodecFor(minuteStore, serde.String, serde.Int64, nil))
}

// instanceOptions are the settings of one word-count instance.
type instanceOptions struct {
	brokers   []string
	stateDir  string
	http      string
	app       string
	logger    *slog.Logger
	standbys  int
	guarantee runtime.ProcessingGuarantee
	tags      map[string]string
	rackTags  []string
	// sessionTimeout and transactionTimeout, when non-zero, override the
	// runtime defaults.
	sessionTimeout     time.Duration
	transactionTimeout time.Duration
	// probingInterval, when non-zero, overrides how soon after an
	// assignment with warmups the group rebalances to check on them.
	probingInterval time.Duration
	// staticMembership makes the instance's stream threads static group
	// members (runtime.Config.StaticMembership).
	staticMembership bool
	// keepRepartition turns purging of the repartition topic off.
	keepRepartition bool
	// failOnRecordError stops the instance on a line it cannot count
	// instead of skipping it to deadLetterTopic.
	failOnRecordError bool
	// tls and sasl, when set, secure the connections to the brokers.
	tls  *tls.Config
	sasl sasl.Mechanism
	// query holds the query server's TLS and bearer token settings.
	query iq.ServerConfig
	// dialVia, when set, is where every connection to a broker is made,
	// whichever broker it is meant for: a fault-testing proxy.
	dialVia string
}

// dialer returns the dial function of --broker-dial-via, or nil. The
// brokers advertise their own addresses in metadata, so a proxy given only
// as a seed would be left after the first request: every dial goes to it
// instead.
func (o instanceOptions) dialer() func(ctx context.Context, network, address string) (net.Conn, error) {
	if o.dialVia == "" {
		return nil
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, o.dialVia)
	}
}

// instance is a running word-count instance with its HTTP server.
type instance struct {
	app     *runtime.App
	srv     *http.Server
	iq      *iq.Server
	metrics *instanceMetrics
	web     *webUI
	addr    string
	scheme  string // "https" when the query server serves TLS
}

func startInstance(ctx context.Context, o instanceOptions) (*instance, error) {
	dial := o.dialer()
	topicOpts := clientOpts(o.tls, o.sasl)
	if dial != nil {
		// runInstance refuses --broker-dial-via with TLS, which kgo
		// cannot combine with a dialer of ours.
		topicOpts = append(topicOpts, kgo.Dialer(dial))
	}
	if err := ensureTopics(ctx, o.logger, o.brokers, topicOpts...); err != nil {
		return nil, runtime.AuthFailure(err, o.brokers, o.sasl)
	}
	topo, err := wordCount()
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if o.http != "" {
		if ln, err = net.Listen("tcp", o.http); err != nil {
			return nil, fmt.Errorf("listen on --http %s: %w", o.http, err)
		}
	}
	cfg := runtime.Config{
		ApplicationID:            o.app,
		Brokers:                  o.brokers,
		StateDir:                 o.stateDir,
		Logger:                   o.logger,
		SessionTimeout:           o.sessionTimeout,
		TransactionTimeout:       o.transactionTimeout,
		ProbingRebalanceInterval: o.probingInterval,
		NumStandbys:              o.standbys,
		ProcessingGuarantee:      o.guarantee,
		Tags:                     o.tags,
		RackAwareTags:            o.rackTags,
		StaticMembership:         o.staticMembership,
		TLS:                      o.tls,
		SASL:                     o.sasl,
	}
	cfg.Dial = dial
	if o.keepRepartition {
		cfg.RepartitionPurgeInterval = runtime.NoRepartitionPurge
	}
	if !o.failOnRecordError {
		// A line that fails would fail every instance that takes its
		// task over, one after the other: the demo is about staying
		// available, so it skips the line, logs it and keeps it.
		cfg.ProcessingErrors = runtime.ProcessingLogAndContinue
		cfg.DeadLetterTopic = deadLetterTopic
	}
	if ln != nil {
		cfg.Endpoint = ln.Addr().String()
	}
	app, err := runtime.New(topo, cfg)
	var metrics *instanceMetrics
	if err == nil && ln != nil {
		metrics, err = newInstanceMetrics(app, o.app)
	}
	if err == nil {
		err = app.Start(ctx)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	in := &instance{app: app, metrics: metrics, scheme: "http"}
	if ln != nil {
		in.addr = ln.Addr().String()
		in.iq = countsServer(app, o.query, metrics)
		in.web = newWebUI(in.addr, peerClient(o.query.TLS != nil, o.query.ForwardTLS, o.query.Token), metrics)
		in.srv = in.iq.HTTPServer(in.addr)
		in.srv.Handler = in.handler()
		if o.query.TLS != nil {
			in.scheme = "https"
			go in.srv.ServeTLS(ln, "", "")
		} else {
			go in.srv.Serve(ln)
		}
	}
	return in, nil
}

// close stops the HTTP server and the instance, leaving the group cleanly.
func (in *instance) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if in.srv != nil {
		in.srv.Shutdown(ctx)
		in.iq.Close()
		in.web.close()
	}
	return in.app.Close(ctx)
}

// kill stops the instance the way a crash would: its query endpoint stops
// answering at once, and the App is killed (network cut, no commit, no
// leave-group), so the group notices only after the session timeout.
func (in *instance) kill() {
	if in.srv != nil {
		in.srv.Close()
		in.iq.Close()
		in.web.close()
	}
	in.app.Kill()
}

// runInstance is `demo instance`: one word-count instance, until ctx is
// cancelled or the instance fails.
func runInstance(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("instance", instanceSynopsis, s)
	brokers := fs.String("brokers", "", "comma-separated `HOST:PORT` list of brokers (required)")
	stateDir := fs.String("state-dir", "", "`DIR` for this instance's state stores (required)")
	httpAddr := fs.String("http", "", "`HOST:PORT` to serve queries on (required)")
	appID := fs.String("app", "wordcount", "application ID: the consumer group and internal topic prefix")
	standbys := fs.Int("standbys", 0, "standby replicas per task")
	guarantee := fs.String("guarantee", "at-least-once", "processing guarantee: at-least-once or exactly-once")
	sessionTimeout := fs.Duration("session-timeout", 0, "group session timeout: how soon the others take over after this instance dies (default 10s)")
	keepRepartition := fs.Bool("keep-repartition-records", false, "never purge the repartition topic (for audits that read it afterwards); by default records the group has committed are deleted every 30s")
	failOnRecordError := fs.Bool("fail-on-record-error", false, "stop the instance on an input line it cannot count (a word too large for a Kafka record, say); by default the line is skipped, logged and written to "+deadLetterTopic)
	static := fs.Bool("static-membership", false, "join the group as a static member (KIP-345), so that a restart on the same --state-dir takes its place back without waiting out the session timeout")
	tags := tagFlag{}
	fs.Var(tags, "tag", "rack-awareness tag `KEY=VALUE[,KEY=VALUE]` of this instance (repeatable)")
	rackTags := fs.String("rack-tags", "", "comma-separated tag `KEY[,KEY]` names to spread replicas over")
	var logs logFlags
	logs.add(fs, "info")
	dialVia := fs.String("broker-dial-via", "", "make every broker connection to `HOST:PORT`, whatever broker it is for (a fault-testing aid: one proxy per instance that can cut or delay its traffic)")
	sec := addSecurityFlags(fs)
	qsec := addQueryServerFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsCfg, mech, err := sec.resolve()
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	var qcfg iq.ServerConfig
	if err := qsec.serverConfig(&qcfg); err != nil {
		return usageErrorf(fs, "%v", err)
	}
	seeds := splitBrokers(*brokers)
	switch {
	case len(seeds) == 0:
		return usageErrorf(fs, "--brokers is required")
	case *stateDir == "":
		return usageErrorf(fs, "--state-dir is required")
	case *httpAddr == "":
		return usageErrorf(fs, "--http is required")
	case *standbys < 0:
		return usageErrorf(fs, "--standbys must not be negative")
	case *dialVia != "" && tlsCfg != nil:
		return usageErrorf(fs, "--broker-dial-via is a fault-testing aid for plaintext brokers: not with TLS")
	}
	g, err := runtime.ParseProcessingGuarantee(*guarantee)
	if err != nil {
		return usageErrorf(fs, "--guarantee: %v", err)
	}
	logger, err := logs.logger(s.err)
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	logSettings(logger, fs)
	in, err := startInstance(ctx, instanceOptions{
		brokers:           seeds,
		stateDir:          *stateDir,
		http:              *httpAddr,
		app:               *appID,
		standbys:          *standbys,
		guarantee:         g,
		sessionTimeout:    *sessionTimeout,
		staticMembership:  *static,
		keepRepartition:   *keepRepartition,
		failOnRecordError: *failOnRecordError,
		tags:              tags,
		rackTags:          splitBrokers(*rackTags),
		logger:            logger,
		tls:               tlsCfg,
		sasl:              mech,
		query:             qcfg,
		dialVia:           *dialVia,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "instance %s serving on %s://%s\n", in.app.ProcessID(), in.scheme, in.addr)
	select {
	case <-ctx.Done():
	case <-in.app.Done():
	}
	err = in.close()
	if ferr := in.app.Err(); ferr != nil {
		return ferr
	}
	return err
}

// tagFlag collects repeated --tag KEY=VALUE flags; one may carry several,
// comma-separated, as $EDDY_TAG does.
type tagFlag map[string]string

func (t tagFlag) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t)) {
		parts = append(parts, k+"="+t[k])
	}
	return strings.Join(parts, ",")
}

func (t tagFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", kv)
		}
		if _, dup := t[k]; dup {
			return fmt.Errorf("tag %q given twice", k)
		}
		t[k] = val
	}
	return nil
}
