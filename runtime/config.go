// Package runtime runs a topology as one instance of an Eddy application:
// it owns the configuration, the state directory and its lock, the stream
// threads (poll → process → commit), the tasks they own, restoration of
// state from changelogs, and the group membership that spreads tasks over
// the application's instances.
package runtime

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/internal/changelog"
)

// Defaults for Config fields left zero.
const (
	DefaultCommitInterval     = time.Second
	DefaultEOSCommitInterval  = 100 * time.Millisecond
	DefaultDrainedCommitDelay = 100 * time.Millisecond
	DefaultTransactionTimeout = 10 * time.Second
	DefaultCacheMaxBytes      = 10 << 20
	DefaultSessionTimeout     = 10 * time.Second
	DefaultRebalanceTimeout   = 30 * time.Second
	DefaultHeartbeatInterval  = time.Second
	DefaultMaxPollRecords     = 100_000
	// DefaultBufferedRecordsPerPartition is Kafka Streams' default
	// buffered.records.per.partition.
	DefaultBufferedRecordsPerPartition = 1000
	DefaultNumStreamThreads            = 1
	DefaultReplicationFactor           = -1
	DefaultStateCleanupDelay           = 10 * time.Minute
	DefaultPartitions                  = -1
	// DefaultRepartitionPurgeInterval is Kafka Streams' default
	// repartition.purge.interval.ms.
	DefaultRepartitionPurgeInterval = 30 * time.Second
)

// NoRepartitionPurge, as Config.RepartitionPurgeInterval, turns purging
// off: the repartition topics then keep every record for ever. It is meant
// for audits that read a repartition topic after the fact.
const NoRepartitionPurge time.Duration = -1

// NeverWaitForInput, as Config.TaskIdleTime, lets a task reading several
// partitions process whatever it holds without waiting for an empty partition
// (Kafka Streams' max.task.idle.ms of -1): records of a partition that arrive
// in a later poll may then go after later-stamped records of the others.
const NeverWaitForInput time.Duration = -1

// Config configures one instance of an application. The zero value of every
// optional field selects the default documented on it.
type Config struct {
	// ApplicationID names the application: its consumer group, the prefix
	// of its internal topics and its folder in StateDir. Required; letters,
	// digits, '.', '_' and '-' only.
	ApplicationID string
	// Brokers are the seed brokers, host:port each. Required.
	Brokers []string
	// StateDir holds one folder per application with its task stores.
	// Default: $TMPDIR/eddy.
	StateDir string
	// NumStreamThreads is how many threads process records; each is a
	// member of the group. Default 1.
	NumStreamThreads int
	// ProcessingGuarantee is AtLeastOnce (the default) or ExactlyOnce.
	ProcessingGuarantee ProcessingGuarantee
	// CommitInterval is how often a thread commits. Default 1s, or 100ms
	// with ExactlyOnce, where output becomes visible only at commit.
	CommitInterval time.Duration
	// DrainedCommitDelay bounds how often a thread commits before its
	// CommitInterval because its input is drained: it has consumed records
	// since its last commit and has reached the end of every input
	// partition it fetched (the high watermark, or the last stable offset
	// under ExactlyOnce). Results are then committed soon after input
	// stops rather than up to a commit interval later. A thread may begin
	// three commits back to back, so that a topology whose results pass
	// through up to three stages (sub-topologies joined by repartition
	// topics, each made final by its own commit) settles at once; beyond
	// that it waits until fewer than three of its commits began in the
	// last 3×DrainedCommitDelay, so a thread kept just behind the end by a
	// trickle of input commits on average at most once per
	// DrainedCommitDelay. A value at or above CommitInterval turns early
	// commits off. Default 100ms.
	DrainedCommitDelay time.Duration
	// TransactionTimeout bounds a transaction under ExactlyOnce. It is also
	// how long the partitions of an instance that died mid-transaction stay
	// blocked for its successor (unless the instance restarts first, which
	// aborts its open transaction at once). Default 10s.
	TransactionTimeout time.Duration
	// CacheMaxBytes bounds, across all threads, the bytes of store writes
	// held in record caches between commits. A thread whose cache fills up
	// commits early. It bounds as much again of values kept from store
	// reads by running tasks' key-value stores, which never cause a commit.
	// Default 10 MiB.
	CacheMaxBytes int64
	// MaxPollRecords caps the records a thread processes between two
	// checks of its commit timer. Default 100,000, which is more than one
	// fetch (at most 1 MiB for a stream thread) holds of all but near-empty
	// records: the client sends its next fetch only once the last one has
	// been polled to the end, so a cap below a fetch's records leaves the
	// thread waiting for a fetch round trip every time it runs dry, where a
	// whole fetch per poll lets the next one arrive while this one is
	// processed. A thread polls fewer records when they are slow to
	// process: no more than it processes in a quarter of TransactionTimeout
	// (under ExactlyOnce) or of RebalanceTimeout, whichever is shorter, at
	// what its records have cost lately, and 1,000 before it knows. A poll
	// is processed whole before the thread commits, so a longer one would
	// keep its transaction open until the broker aborts it (the thread is
	// fenced and processes the same records again) or hold a rebalance
	// up. While a thread's share of CacheMaxBytes is filling up, it polls
	// fewer records too (as many as the share has room for at 80 bytes an
	// entry, at least 1,000): the budget is checked between polls, and a
	// whole poll of new keys would overrun it several times over.
	MaxPollRecords int
	// TaskIdleTime is how long a task that reads several partitions (a
	// join, a merge, a stream–table join) waits for input on an empty
	// partition before it processes the records of the others, as Kafka
	// Streams' max.task.idle.ms. Such a task always takes the earliest
	// stamped of its partitions' next records; while one partition holds
	// none, it waits as long as the partition's lag is unknown (no fetch
	// nor end-offset lookup has answered for it yet) or positive (records
	// are on the broker that it has not fetched), whatever TaskIdleTime
	// says. Once every empty partition is known to be at its end, the task
	// waits TaskIdleTime more for records to be produced to them, then
	// processes the others anyway (enforced processing, counted in
	// Stats.EnforcedProcessing). Default 0: no wait beyond fetching what
	// the broker holds. NeverWaitForInput never waits. Tasks of one
	// partition never wait.
	TaskIdleTime time.Duration
	// BufferedRecordsPerPartition bounds the records a task reading several
	// partitions holds unprocessed per partition, as Kafka Streams'
	// buffered.records.per.partition: a partition holding more is not
	// fetched until its task has processed it back down to the bound. One
	// poll may add up to MaxPollRecords beyond it. Default 1,000.
	BufferedRecordsPerPartition int
	// SessionTimeout is the group session timeout: how long the group waits
	// for a silent member before moving its tasks. Default 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member heartbeats; it is also how
	// soon a member learns that the group is rebalancing, so it bounds how
	// fast work moves after an instance leaves. Must be below
	// SessionTimeout. Default 1s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout bounds how long a member may take to rejoin during a
	// rebalance. Default 30s.
	RebalanceTimeout time.Duration
	// DeserializationErrors chooses how undecodable input is handled.
	// Default DeserializationFail.
	DeserializationErrors DeserializationHandling
	// ProcessingErrors says what a stream thread does when a processor
	// returns an error or panics on a record. Default ProcessingFail.
	ProcessingErrors ProcessingErrorHandling
	// DeadLetterTopic, when set, receives every record skipped under
	// ProcessingLogAndContinue or DeserializationLogAndSkip: its key,
	// value and headers as read, with headers naming the error, its
	// source topic, partition and offset, the task and the node (the
	// DeadLetterHeader* constants; a record too large to produce whole
	// with them goes without its value, or its key and value, marked by
	// DeadLetterHeaderOmitted). Under exactly-once it is written in
	// the same transaction as the rest of the commit. Like the topology's
	// own sink topics, it must exist before Start unless
	// CreateMissingTopics is set.
	DeadLetterTopic string
	// StaticMembership makes every stream thread a static group member
	// (KIP-345), with an instance ID derived from the state directory's
	// process ID and the thread's index. A restarted instance then takes
	// its threads' places back at once, without waiting out the session
	// timeout of the members it left behind, and, if nothing else changed,
	// without a rebalance. Close still leaves the group, so the other
	// instances take over at once. Off by default: two instances sharing
	// a state directory's process ID (a copied directory) would fence each
	// other.
	StaticMembership bool
	// MaxGroupMetadataBytes is the brokers' message.max.bytes: the largest
	// record in which the group coordinator stores the group's
	// subscriptions and assignments. The leader refuses (and its instance
	// stops with an *assignor.GroupMetadataTooLargeError naming the sizes)
	// an assignment that would not fit, since the group could never
	// settle. Default 1048588, Kafka's default.
	MaxGroupMetadataBytes int
	// BareGroupFormat makes the stream threads join the group in the bare
	// format of Eddy builds that did not yet frame their group data in the
	// standard consumer protocol. Set it on every instance for the first
	// rolling bounce of an upgrade from such a build, while an old
	// instance may lead the group, and remove it in a second bounce; the
	// group reads both formats either way, but tools that describe groups
	// only read the framed one.
	BareGroupFormat bool
	// EagerRebalancing makes the stream threads rebalance eagerly, as
	// Eddy builds before cooperative rebalancing did: every rebalance
	// revokes every task, so processing stops until the group has
	// settled. By default they rebalance cooperatively (KIP-429): a
	// thread keeps processing the tasks it keeps, and a task that moves
	// is committed and revoked in one rebalance and assigned in a second
	// one. A group cannot mix members of an eager build with cooperative
	// ones, so upgrading from an eager build takes two rolling bounces:
	// the first with EagerRebalancing set, the second without (see
	// docs/operations.md, Upgrades). BareGroupFormat implies it.
	EagerRebalancing bool
	// OnStreamThreadError says what happens when a stream thread stops on
	// an error: ShutdownInstance (the default), ReplaceThread or
	// ShutdownApplication.
	OnStreamThreadError StreamThreadErrorPolicy
	// Endpoint is the host:port on which this instance answers queries,
	// advertised to the other instances. Optional.
	Endpoint string
	// ReplicationFactor for the topics Eddy creates (its internal topics,
	// and the user's with CreateMissingTopics); -1 (the default) uses the
	// broker's default.
	ReplicationFactor int16
	// CreateMissingTopics makes Start create the topology's source and
	// sink topics (and DeadLetterTopic) that do not exist, with the
	// broker's default configs. A missing source topic takes the largest
	// partition count of the existing topics it must be co-partitioned
	// with; a missing sink, the largest task count of the sub-topologies
	// writing it; a topic neither decides, DefaultPartitions. Off by
	// default, as in Kafka Streams: a mistyped topic name then stops Start
	// with a *MissingTopicsError naming every missing topic instead of
	// creating a topic nobody writes. Internal topics are always created.
	CreateMissingTopics bool
	// DefaultPartitions is the partition count of a topic created by
	// CreateMissingTopics that no other topic decides; -1 (the default)
	// uses the broker's default (num.partitions).
	DefaultPartitions int32
	// WindowedChangelogRetentionMargin is what the changelog of a window
	// or session store keeps beyond the store's retention (its
	// retention.ms is the sum), so that a restoration or a standby that
	// falls behind still finds every live window. Default one day, as
	// Kafka Streams' windowstore.changelog.additional.retention.ms. Only
	// topics Eddy creates get it; existing ones are left as they are.
	WindowedChangelogRetentionMargin time.Duration
	// RepartitionPurgeInterval is how often each stream thread, after a
	// commit, deletes the records of repartition topics below the group's
	// committed offsets (DeleteRecords). Repartition topics are created
	// with infinite retention, so this is what bounds them. Default 30s;
	// NoRepartitionPurge turns purging off.
	RepartitionPurgeInterval time.Duration
	// Compression is the codec of every record batch Eddy produces (sink,
	// repartition and changelog topics). Default CompressionNone, Kafka's
	// producer default, which every client can read. A compression option
	// in ClientOptions overrides it.
	Compression Compression
	// NumStandbys is how many standby replicas each stateful task has, on
	// other instances, kept current from its changelogs. Default 0.
	NumStandbys int
	// AcceptableRecoveryLag is the largest changelog lag at which a replica
	// counts as caught up: the assignor moves an active only to a caught-up
	// instance. It does not limit queries, whose callers state the
	// staleness they accept (package iq). Default 10 000 records.
	AcceptableRecoveryLag int64
	// MaxWarmups caps the warmup replicas in the group at once. Default 2.
	MaxWarmups int
	// ProbingRebalanceInterval is how long after an assignment with warmups
	// the group rebalances again to check on them. Default 10 minutes.
	ProbingRebalanceInterval time.Duration
	// Tags are this instance's rack-awareness tags, e.g. {"zone": "a"}.
	Tags map[string]string
	// RackAwareTags names the tag keys over whose values each task's
	// replicas are spread.
	RackAwareTags []string
	// ActiveRackTag, if set, names the tag key of Tags that holds this
	// instance's rack (its broker.rack): among clients equally able to run
	// a task without restoring, actives go to one on the rack of the
	// task's input partitions' leaders, saving cross-rack fetch traffic.
	// The leaders' racks come from the brokers' metadata; brokers without
	// racks leave placement as without the tag.
	ActiveRackTag string
	// AssignFunc, if set, replaces assignor.Assign as the group leader's
	// placement of tasks (a custom assignor, as KIP-924 allows). It gets
	// the same Config and Input and must give every task exactly one
	// active; an invalid output stops the instance with the reason. Every
	// instance of the application should set the same function: whichever
	// is leader places the tasks.
	AssignFunc assignor.AssignFunc
	// StateCleanupDelay is how long a task directory left on disk after its
	// task moved away is kept (so that a task coming back restores only
	// the tail) before it is deleted. Default 10 minutes.
	StateCleanupDelay time.Duration
	// StoreLayout is how the persistent stores of the instance's tasks
	// lie on disk: StoreLayoutShared (the default) keeps them all in one
	// badger database in the state directory, StoreLayoutPerStore gives
	// each a database of its own. Start moves stores it finds in the
	// other layout into the configured one (see layout.go).
	StoreLayout StoreLayout
	// Logger receives the runtime's logs. Default: info level and above,
	// as text, to standard error, which says what the App does (started,
	// each assignment, rebalances, state changes, restorations, failures);
	// pass slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
	// StateListener, when set, hears of every change of the App's State,
	// exactly once and in the order they happen, with the state left and
	// the state entered. It is called by the goroutine making the change
	// (Start, Close, or a stream thread's group callback or loop) with no
	// lock of the App held; while another goroutine is still calling it
	// for an earlier change, that goroutine calls it for this change too,
	// once the earlier call returns. It may call State, Err, Done,
	// ProcessID, Stats and Tasks, start Close on another goroutine, and
	// wait for the State to move on. It delays the goroutine calling it,
	// often a stream thread, so hand long work to a goroutine; and never
	// wait in it for Close to return: Close waits for the stream threads.
	StateListener func(old, new State)
	// TLS, when set, makes every client Eddy creates connect to the
	// brokers over TLS with this configuration. The handshake runs inside
	// Eddy's own dialer, which tracks every connection. A config
	// without ServerName verifies each broker's certificate against the
	// host it is dialed at, as franz-go's DialTLSConfig does. Use this
	// rather than kgo.DialTLSConfig, which New refuses.
	TLS *tls.Config
	// SASL, when set, authenticates every client Eddy creates with this
	// mechanism, e.g. from franz-go's pkg/sasl/plain or pkg/sasl/scram:
	//
	//	scram.Auth{User: "eddy", Pass: pw}.AsSha512Mechanism()
	//
	// It runs over whatever connection the dialer makes, TLS or not.
	// kgo.SASL in ClientOptions works as well.
	SASL sasl.Mechanism
	// Dial, when set, makes the TCP connections to the brokers in place
	// of a plain net.Dialer: through a SOCKS or test proxy, say. Eddy
	// still tracks what it returns (so a crash-stop cuts it) and runs TLS
	// over it when TLS is set. It is given the address a broker is to be
	// reached at (a seed, or one the cluster's metadata advertises).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// ClientOptions are extra franz-go options given to every client Eddy
	// creates (client ID, SASL and so on). Options that Eddy sets itself
	// (group, partitioner, isolation level) must not be overridden, and
	// neither may the dialer: New refuses kgo.Dialer and kgo.DialTLSConfig
	// here (set TLS instead): every connection goes through Eddy's own
	// dialer, which tracks them so that a crash-stop cuts them all at once.
	ClientOptions []kgo.Opt
}

var appIDPattern = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "eddy")
	}
	if c.NumStreamThreads == 0 {
		c.NumStreamThreads = DefaultNumStreamThreads
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
		if c.ProcessingGuarantee == ExactlyOnce {
			c.CommitInterval = DefaultEOSCommitInterval
		}
	}
	if c.DrainedCommitDelay == 0 {
		c.DrainedCommitDelay = DefaultDrainedCommitDelay
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.CacheMaxBytes == 0 {
		c.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.BufferedRecordsPerPartition == 0 {
		c.BufferedRecordsPerPartition = DefaultBufferedRecordsPerPartition
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(DefaultHeartbeatInterval, c.SessionTimeout/3)
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.AcceptableRecoveryLag == 0 {
		c.AcceptableRecoveryLag = assignor.DefaultAcceptableRecoveryLag
	}
	if c.MaxWarmups == 0 {
		c.MaxWarmups = assignor.DefaultMaxWarmups
	}
	if c.ProbingRebalanceInterval == 0 {
		c.ProbingRebalanceInterval = assignor.DefaultProbingRebalanceInterval
	}
	if c.StateCleanupDelay == 0 {
		c.StateCleanupDelay = DefaultStateCleanupDelay
	}
	if c.StoreLayout == StoreLayoutDefault {
		c.StoreLayout = StoreLayoutShared
	}
	if c.DefaultPartitions == 0 {
		c.DefaultPartitions = DefaultPartitions
	}
	if c.WindowedChangelogRetentionMargin <= 0 {
		c.WindowedChangelogRetentionMargin = changelog.DefaultWindowedRetentionMargin
	}
	if c.RepartitionPurgeInterval == 0 {
		c.RepartitionPurgeInterval = DefaultRepartitionPurgeInterval
	}
	if c.MaxGroupMetadataBytes == 0 {
		c.MaxGroupMetadataBytes = assignor.DefaultMaxGroupMetadataBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return c
}

// assignorConfig is the part of the configuration the assignor uses.
func (c Config) assignorConfig() assignor.Config {
	return assignor.Config{
		NumStandbys:              c.NumStandbys,
		AcceptableRecoveryLag:    c.AcceptableRecoveryLag,
		MaxWarmups:               c.MaxWarmups,
		ProbingRebalanceInterval: c.ProbingRebalanceInterval,
		RackAwareTags:            c.RackAwareTags,
		ActiveRackTag:            c.ActiveRackTag,
	}
}
