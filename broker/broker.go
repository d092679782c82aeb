// Package broker runs an embedded, single-node Kafka-protocol broker built on
// franz-go's kfake, for the demo and for tests.
//
// The broker speaks enough of the Kafka protocol for Eddy's needs: produce and
// fetch, classic consumer groups, the admin requests used to create and check
// topics (including topic configs such as cleanup.policy=compact),
// idempotent and transactional producers, and read_committed fetches. Topics
// are created automatically when a client asks for them in a metadata
// request that permits it.
//
// It is not a replacement for a real cluster: there is one node and no
// replication. Where Eddy depends on how a real Kafka behaves, the broker is
// made to behave that way, through kfake's request hooks and settings rather
// than changes to kfake:
//
//   - Members waiting at the coordinator are kept alive. Kafka never expires
//     a member whose JoinGroup or SyncGroup is waiting for its answer; kfake
//     expires it at its session timeout, which let repeated kills wedge a
//     group (the live members, waiting for a dead one, expired in turn, and
//     the rebalance started over). The broker heartbeats on behalf of
//     waiting members.
//   - Group metadata is bounded. Kafka stores a group's subscriptions and
//     assignments as one record and fails a SyncGroup whose record would
//     exceed message.max.bytes with UNKNOWN_SERVER_ERROR; so does the broker
//     (Config.MessageMaxBytes; it estimates the record as the members'
//     subscriptions and assignments plus a fixed overhead per member).
//   - Compaction leaves the log start offset alone. kfake's compactor moves
//     a partition's log start offset to the first batch it keeps; Kafka's
//     log cleaner never moves it (only DeleteRecords and retention do). A
//     store whose changelog position falls below the log start is rebuilt
//     from scratch, so on kfake a restart after a compaction rebuilt what a
//     real cluster lets it restore from its position. The broker runs
//     compaction itself (every Config.CompactionInterval, or on demand with
//     Broker.Compact) and keeps, for every partition of a compacted topic,
//     the log start Kafka would have, persisted in the DataDir: ListOffsets
//     for the earliest offset answers it, a fetch from an offset compaction
//     removed is served from the next record kept, and a fetch below it
//     fails with OFFSET_OUT_OF_RANGE.
//   - DeleteRecords below the log start succeeds and changes nothing, as on
//     Kafka; kfake fails it with OFFSET_OUT_OF_RANGE.
//   - Read-committed fetches report every aborted transaction among the
//     records they return. kfake, when a response reaches the request's
//     max_bytes inside a partition, returns that partition's records
//     without the aborted transactions among them, and a read_committed
//     client takes those records for committed ones; the broker lifts
//     the response limit of read_committed fetches (see keepAbortedTxns).
//   - A transaction a crash left open ends with an ABORT marker. kfake,
//     restarted on the data of a broker that was killed, takes such a
//     transaction for aborted but writes no marker after it, so
//     read_committed clients dropped the producer's next, committed,
//     transaction in that partition too; a reader waiting for the end of
//     a log ending with one never reached it (a restoring instance stayed
//     restoring); and at the next restart kfake read the aborted records
//     as part of the producer's next transaction, committed. Start writes
//     the missing markers first (see crashtxns.go).
//   - Compaction never cleans past the last stable offset. kfake compacts
//     every batch but a partition's last, open transactions included: an
//     open transaction's records superseded committed records of the same
//     keys, and when it aborted, read_committed readers found neither (a
//     store restoring its changelog lost those keys' latest values). The
//     broker compacts only at a moment no compacted partition has a
//     transaction open, and holds transactional writes from that check
//     until kfake has compacted (see logStarts.compact).
//   - Compaction keeps what aborted transactions mean. kfake drops a
//     producer's ABORT markers once none of its data survives, but goes
//     on listing the aborted transaction to read-committed fetches, and a
//     reader then drops that producer's later, committed, batches until a
//     marker it never meets. The broker writes such a marker again after
//     each run (see abortmarks.go).
//   - An idempotent producer's retry of a batch written just before a
//     crash is not written again. kfake keeps producers' sequence
//     numbers only across a Close; Kafka rebuilds them from the log.
//     Start rebuilds them from the segment files (see seqwindows.go).
//   - Compacted topics are not subject to retention. kfake applies the
//     broker's default retention (7 days) to every topic, deleting records
//     of compacted topics by their timestamps; Kafka applies retention only
//     where cleanup.policy includes delete. The broker's default retention
//     is therefore off (see below); retention.ms and retention.bytes set on
//     a topic apply at each compaction run.
//   - Every client can authenticate. kfake serves SaslHandshake from v1
//     only and closes the connection on a failed SaslAuthenticate; Kafka
//     serves v0 too (after which the SASL tokens go bare, as kafka-python
//     sends them), lists it in ApiVersions (librdkafka refuses to
//     authenticate otherwise) and its mechanisms in every handshake
//     response, and answers a failed authentication with
//     SASL_AUTHENTICATION_FAILED before closing. An adapter between the
//     listener and kfake does the same until a connection has
//     authenticated (see saslconn.go).
//   - Group members outlive a broker that was killed. kfake saves members
//     only on Close, so after a kill the first member to rejoin formed a
//     generation alone and was given partitions that members still within
//     their session held and went on writing to; Kafka reloads a group with
//     its members and drops each a session timeout after its last
//     heartbeat. The broker keeps the members in the DataDir as they change
//     and hands them to kfake at the next start (see members.go).
//   - __consumer_offsets exists and holds every group's commits. kfake keeps
//     groups in memory only; lag monitors such as Burrow learn groups and
//     their offsets from that topic. The broker writes it with Kafka's
//     record schemas (see offsetstopic.go), within a quarter of a second of
//     a commit (commits of a partition in between are written as one, the
//     last), and refuses clients' produce to it.
//
// Divergences that remain, and what a real cluster does instead:
//
//   - One node and no replication. A real cluster has several brokers and
//     replicates every partition.
//   - Topics are created on metadata requests that allow it. Managed
//     clusters usually set auto.create.topics.enable=false.
//   - No default retention. A topic without retention.ms or
//     retention.bytes keeps its records forever; Kafka deletes them after
//     log.retention.ms (7 days) where cleanup.policy includes delete.
//   - Compaction is eager. Each run cleans every batch but a partition's
//     last, and waits up to a second for no transaction to be open on a
//     compacted partition, else skips the run; Kafka cleans only rolled
//     segments, each up to the first unstable offset (segment.ms 7 days,
//     segment.bytes 1 GiB) past min.cleanable.dirty.ratio, so superseded
//     records stay readable far longer on a real cluster.
//   - Transactional writes wait out each compaction run: they are answered
//     REQUEST_TIMED_OUT from the check that no transaction is open until
//     kfake has compacted, and producers retry after their backoff.
//   - Tombstones expire by their timestamp. A tombstone whose timestamp is
//     older than delete.retention.ms (1 day) goes at the next compaction;
//     Kafka keeps every tombstone for delete.retention.ms after the cleaner
//     first reaches it.
//   - Retention does not see what compaction removed. On a topic whose
//     cleanup.policy is compact,delete, records that expire after
//     compaction removed them leave the log start where it was; Kafka
//     moves it past every expired segment.
//   - Fetch responses report kfake's log start. Their log_start_offset
//     field, and ListOffsets for the earliest offset when the same request
//     also asks other timestamps, give the first batch compaction kept;
//     Kafka gives the log start offset. Eddy reads the log start only
//     through ListOffsets asking the earliest offsets alone.
//   - DeleteRecords into a compacted range reports kfake's start. The log
//     start moves where Kafka moves it, but the response's low watermark is
//     the first batch compaction kept; Kafka answers the new log start.
//   - Compaction and deletions made on the kfake cluster itself
//     (Broker.Cluster) bypass the broker: they move the log start as kfake
//     does.
//   - Read-committed fetches share max_bytes out among the partitions they
//     name. Each named partition's partition_max_bytes is cut to its share
//     of the request's max_bytes (in proportion to their limits) and the
//     response gets no overall limit (see above); partitions an incremental
//     fetch leaves out keep their last share, so a response can exceed
//     max_bytes by theirs. Kafka fills partitions in order until max_bytes,
//     so the first ones can take more and the last ones nothing.
//   - Stable offset fetches wait on the whole group. An OffsetFetch asking for
//     stable offsets (as transactional consumers do) fails every partition
//     it names with UNSTABLE_OFFSET_COMMIT while any open transaction has
//     offsets pending for the group; Kafka fails only the partitions whose
//     offsets are pending. No offset a pending transaction may still replace
//     is returned either way, but a member can wait (kgo retries every
//     second) for another member's transaction to end.
//   - ApiVersions after authentication list SaslHandshake from v1. The
//     adapter above passes an authenticated connection's bytes through
//     untouched; clients ask ApiVersions before they authenticate.
//   - Group metadata records leave out what kfake does not expose. In
//     __consumer_offsets, a group's metadata record has no leader, a state
//     timestamp of -1 and member timeouts of 0; Kafka writes them.
//   - Short session timeouts are accepted. The group minimum session
//     timeout defaults to 500 ms (DefaultGroupMinSessionTimeout); Kafka's
//     group.min.session.timeout.ms is 6 s.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	// DefaultListen binds a random free port on the loopback interface.
	DefaultListen = "127.0.0.1:0"
	// DefaultPartitions is the partition count of automatically created
	// topics and of topics created with a partition count of -1.
	DefaultPartitions int32 = 6
	// DefaultGroupMinSessionTimeout is well below Kafka's 6 s so that tests
	// and the demo can use short session timeouts and notice a member that
	// died without leaving quickly. A client config tuned against this
	// minimum may be rejected by a real cluster, whose minimum is 6 s.
	DefaultGroupMinSessionTimeout = 500 * time.Millisecond
	// DefaultGroupMaxSessionTimeout matches Kafka's default.
	DefaultGroupMaxSessionTimeout = 5 * time.Minute
	// DefaultCompactionInterval is how often compacted topics are cleaned,
	// often enough for the demo to show compaction at work. Compaction no
	// longer moves the log start offset clients see (see the package doc),
	// so it costs restarted stores nothing.
	DefaultCompactionInterval = 30 * time.Second
	// DefaultMessageMaxBytes is Kafka's default message.max.bytes, which
	// also bounds a group's metadata record.
	DefaultMessageMaxBytes = 1048588
)

// idleCleaner is the interval given to kfake's own cleaner, which the broker
// replaces with its own: long enough never to run.
const idleCleaner = 10 * 365 * 24 * time.Hour

// Config configures an embedded broker. The zero value is valid: a
// non-persistent broker on a random loopback port.
type Config struct {
	// Listen is the TCP address to listen on, as HOST:PORT. Empty means
	// DefaultListen. Port 0 picks a free port; read it back with
	// Broker.Addrs. The broker advertises the address it is bound to, so
	// an unspecified host (":9092", "0.0.0.0:9092") is advertised as such;
	// that works for clients on the same machine only.
	Listen string

	// DataDir, if set, makes the broker persist topics, records, committed
	// offsets and producer state under this directory and reload them on
	// the next Start with the same directory. Empty keeps everything in
	// memory (in this process's heap) and loses it on Close. Only one
	// broker may use a directory at a time; nothing enforces this.
	DataDir string

	// Partitions is the partition count of automatically created topics.
	// Zero means DefaultPartitions.
	Partitions int32

	// Logger receives the broker's own logs. Nil discards them.
	Logger *slog.Logger

	// GroupMinSessionTimeout and GroupMaxSessionTimeout bound the session
	// timeout a group member may ask for; a JoinGroup outside them fails
	// with INVALID_SESSION_TIMEOUT. Zero means the Default* constants.
	GroupMinSessionTimeout time.Duration
	GroupMaxSessionTimeout time.Duration

	// CompactionInterval is how often the broker compacts topics whose
	// cleanup.policy includes compact and applies the retention.ms and
	// retention.bytes set on topics. Zero means DefaultCompactionInterval.
	CompactionInterval time.Duration

	// MessageMaxBytes bounds a consumer group's metadata (subscriptions and
	// assignments), as message.max.bytes does on Kafka. Zero means
	// DefaultMessageMaxBytes.
	MessageMaxBytes int

	// TLS, when set, makes the listener speak only TLS, with this
	// configuration (GenerateCerts makes one for tests). The broker's own
	// clients trust the certificates it serves.
	TLS *tls.Config

	// Users, when not empty, makes the broker require SASL: each client
	// authenticates as one of them (ClientMechanism gives the client side).
	// They are the broker's users: with a DataDir, each Start replaces
	// those kept there (credentials clients altered included).
	Users []User

	// EnableACLs makes the broker check every request against the users'
	// ACLs, as a Kafka broker with an authorizer does: what no ACL allows
	// is refused with an authorization error. Superusers pass every check.
	// The users' ACLs are the broker's: with a DataDir, each Start
	// replaces the ACLs kept there (ACLs clients created included) with
	// them, so that a rule taken out of the configuration is gone.
	// Needs Users. The broker's own clients (see the package doc)
	// authenticate as a superuser of their own. One gap: a ListOffsets
	// for the earliest offsets of a compacted topic's partitions, which
	// the broker answers itself (see the package doc), is answered
	// before kfake's authentication and ACL checks, so it is never
	// refused.
	EnableACLs bool

	// SyncWrites fsyncs every produced batch. Without it, records reach the
	// OS page cache at once (so they survive the process being killed) but
	// are only synced to disk on segment roll and Close. Only meaningful
	// with DataDir.
	SyncWrites bool
}

// Validate reports whether c is usable. It checks c as given, before
// defaults are applied.
func (c Config) Validate() error {
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("broker: listen address %q: %w", c.Listen, err)
		}
	}
	if c.Partitions < 0 {
		return fmt.Errorf("broker: partitions must be positive, got %d", c.Partitions)
	}
	if c.GroupMinSessionTimeout < 0 || c.GroupMaxSessionTimeout < 0 {
		return errors.New("broker: group session timeouts must not be negative")
	}
	if c.CompactionInterval < 0 {
		return errors.New("broker: compaction interval must not be negative")
	}
	if c.MessageMaxBytes < 0 {
		return errors.New("broker: message max bytes must not be negative")
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	d := c.withDefaults()
	if d.GroupMinSessionTimeout > d.GroupMaxSessionTimeout {
		return fmt.Errorf("broker: group min session timeout %v exceeds max %v",
			d.GroupMinSessionTimeout, d.GroupMaxSessionTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.GroupMinSessionTimeout == 0 {
		c.GroupMinSessionTimeout = DefaultGroupMinSessionTimeout
	}
	if c.GroupMaxSessionTimeout == 0 {
		c.GroupMaxSessionTimeout = DefaultGroupMaxSessionTimeout
	}
	if c.CompactionInterval == 0 {
		c.CompactionInterval = DefaultCompactionInterval
	}
	if c.MessageMaxBytes == 0 {
		c.MessageMaxBytes = DefaultMessageMaxBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Broker is a running embedded broker. Its methods are safe for concurrent
// use.
type Broker struct {
	cluster *kfake.Cluster
	groups  *groupGuard
	starts  *logStarts
	offsets *offsetsWriter
	addrs   []string
	logger  *slog.Logger

	stopCompactor context.CancelFunc
	compactorDone chan struct{}
	stopOnce      sync.Once

	// mu keeps calls into the cluster from racing with Close: kfake serves
	// them on its run loop, which is gone after Close, so a call made then
	// would block forever.
	mu     sync.RWMutex
	closed bool
}

// Start starts a broker and returns once it accepts connections.
func Start(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()

	// kfake only listens on 127.0.0.1; replacing its listen function is
	// how we honour the host part of the configured address.
	listen := func(network, _ string) (net.Listener, error) {
		l, err := net.Listen(network, cfg.Listen)
		if err != nil {
			return nil, err
		}
		return cfg.secureListener(l), nil
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(listen),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(cfg.Partitions)),
		kfake.GroupMinSessionTimeout(cfg.GroupMinSessionTimeout),
		kfake.GroupMaxSessionTimeout(cfg.GroupMaxSessionTimeout),
		kfake.WithLogger(slogAdapter{cfg.Logger}),
		kfake.BrokerConfigs(map[string]string{
			// The broker compacts on its own schedule (see logStarts);
			// kfake's cleaner would move log starts behind its back.
			"log.cleaner.backoff.ms": fmt.Sprint(idleCleaner.Milliseconds()),
			// No default retention: kfake would apply it to compacted
			// topics too, which Kafka never does. Topics with
			// retention.ms or retention.bytes set keep them.
			"log.retention.ms": "-1",
		}),
	}
	secure, internal, err := cfg.securityOpts()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	opts = append(opts, secure...)
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if err := cfg.forgetKeptUsers(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if cfg.DataDir != "" {
		n, err := rebuildSeqWindows(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("broker: rebuild producers' sequence numbers from the log: %w", err)
		}
		if n > 0 {
			cfg.Logger.Info("rebuilt producers' sequence numbers from the log, as the broker stopped without closing", "windows", n)
		}
		n, err = abortCrashedTxns(cfg.DataDir, opts, cfg.secureListener, internal)
		if err != nil {
			return nil, fmt.Errorf("broker: abort transactions left open by a crash: %w", err)
		}
		if n > 0 {
			cfg.Logger.Warn("wrote ABORT markers after transactions left open when the broker stopped without closing", "markers", n)
		}
	}
	var restored map[string]sessionClassicGroup
	if cfg.DataDir != "" {
		var n int
		restored, n, err = restoreKeptMembers(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("broker: group members kept by the broker that stopped: %w", err)
		}
		if n > 0 {
			cfg.Logger.Info("restored group members, as the broker stopped without closing", "members", n)
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start on %s: %w", cfg.Listen, err)
	}
	keepAbortedTxns(c)
	b := &Broker{
		cluster: c,
		addrs:   c.ListenAddrs(),
		logger:  cfg.Logger,
	}
	internal = append([]kgo.Opt{kgo.SeedBrokers(b.addrs...)}, internal...)
	if cfg.DataDir != "" && len(cfg.Users) > 0 {
		if err := cfg.resetACLs(internal); err != nil {
			c.Close()
			return nil, fmt.Errorf("broker: ACLs: %w", err)
		}
	}
	var members *memberFile
	if cfg.DataDir != "" {
		members = newMemberFile(c, cfg.DataDir, restored, b.logger)
	}
	if b.groups, err = newGroupGuard(c, internal, cfg.MessageMaxBytes, members); err != nil {
		if members != nil {
			members.close()
		}
		c.Close()
		return nil, fmt.Errorf("broker: group guard: %w", err)
	}
	if b.starts, err = newLogStarts(c, internal, cfg.DataDir, b.logger); err != nil {
		b.groups.close()
		c.Close()
		return nil, fmt.Errorf("broker: log starts: %w", err)
	}
	if b.offsets, err = newOffsetsWriter(c, internal, b.logger); err != nil {
		b.starts.close()
		b.groups.close()
		c.Close()
		return nil, fmt.Errorf("broker: %s: %w", OffsetsTopic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopCompactor = cancel
	b.compactorDone = make(chan struct{})
	go b.compactEvery(ctx, cfg.CompactionInterval)
	b.logger.Info("embedded broker started",
		"addrs", b.addrs, "data_dir", cfg.DataDir, "partitions", cfg.Partitions)
	return b, nil
}

// Addrs returns the addresses clients should bootstrap from, as HOST:PORT.
// They remain valid to read after Close.
func (b *Broker) Addrs() []string {
	return append([]string(nil), b.addrs...)
}

// Compact applies retention and compacts every topic whose cleanup.policy
// includes compact now, instead of waiting for the next CompactionInterval
// tick. The log start offsets clients see stay where Kafka's cleaner would
// leave them (see the package doc). kfake never compacts a partition's
// last record batch, and drops tombstones once their timestamp is older
// than the topic's delete.retention.ms (default one day). Compact returns
// once compaction is done; it does nothing after Close.
func (b *Broker) Compact() {
	if err := b.compact(context.Background()); err != nil {
		b.logger.Warn("compaction", "err", err)
	}
}

func (b *Broker) compact(ctx context.Context) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil
	}
	return b.starts.compact(ctx)
}

// compactEvery compacts every interval until ctx ends.
func (b *Broker) compactEvery(ctx context.Context, interval time.Duration) {
	defer close(b.compactorDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := b.compact(ctx); err != nil && ctx.Err() == nil {
			b.logger.Warn("compaction", "err", err)
		}
	}
}

// Cluster returns the underlying kfake cluster, for tests that need its
// fault injection or request control hooks (the broker's own hooks on
// JoinGroup, SyncGroup, ListOffsets, Fetch and DeleteRecords run first; a
// ListOffsets the broker answers itself bypasses kfake's faults). Compacting
// or deleting records through it bypasses the broker's log start keeping
// (see the package doc). Calls on it after Close may block forever.
func (b *Broker) Cluster() *kfake.Cluster {
	return b.cluster
}

// Close stops the broker. With a DataDir it first writes the remaining state
// so the next Start with that directory resumes where this one stopped.
// Open client connections are dropped. Close is idempotent.
func (b *Broker) Close() {
	// The compactor goes first, outside mu: a run it has started holds mu
	// for reading until it ends.
	b.stopOnce.Do(func() {
		b.stopCompactor()
		<-b.compactorDone
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	b.offsets.close()
	b.groups.close()
	b.starts.close()
	b.cluster.Close()
	b.logger.Info("embedded broker stopped", "addrs", b.addrs)
}

// slogAdapter forwards kfake's printf-style logs to slog, formatting only the
// messages the handler will keep.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Logf(level kfake.LogLevel, format string, args ...any) {
	var lvl slog.Level
	switch level {
	case kfake.LogLevelNone:
		return
	case kfake.LogLevelError:
		lvl = slog.LevelError
	case kfake.LogLevelWarn:
		lvl = slog.LevelWarn
	case kfake.LogLevelInfo:
		lvl = slog.LevelInfo
	default:
		lvl = slog.LevelDebug
	}
	ctx := context.Background()
	if !a.l.Enabled(ctx, lvl) {
		return
	}
	a.l.Log(ctx, lvl, fmt.Sprintf(format, args...), "component", "kfake")
}
