package changelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// Mode says how far the Reader reads a registered partition.
type Mode int8

const (
	// Restore reads from the store's position to the end offset listed
	// when restoration began, then reports the partition complete and
	// forgets it. Records written after that listing are not waited for:
	// the active task that owns the store will process (and log) them.
	Restore Mode = iota
	// Follow reads from the store's position for as long as the partition
	// is registered, keeping a standby replica current.
	Follow
)

// String returns "restore" or "follow".
func (m Mode) String() string {
	switch m {
	case Restore:
		return "restore"
	case Follow:
		return "follow"
	default:
		return fmt.Sprintf("Mode(%d)", int8(m))
	}
}

// Partition is one changelog partition to read into one store.
//
// The store's Position is where reading starts, provided the changelog
// still holds it. A position past the changelog's end (the topic was
// deleted and created again, or the broker lost data: the store holds
// another history) or below its log start (records the store never saw
// were deleted, tombstones among them) means the store cannot be brought
// up to date by reading on. The Reader then empties it with Store.Reset
// and reads the changelog from its start, as it does when the log moves
// away under a partition being read.
type Partition struct {
	Topic     string
	Partition int32
	// Store receives the records.
	Store statestore.Store
	Mode  Mode
	// Task and StoreName name the owner in logs only.
	Task      string
	StoreName string
}

// Progress is a registered partition's reading state.
type Progress struct {
	Mode Mode
	// Restored counts records (puts and deletes) applied since the
	// partition was registered.
	Restored int64
	// Position is the offset of the next record to apply, or
	// statestore.NoPosition if the store had none and nothing has been
	// applied yet.
	Position int64
	// End is, in Restore mode, the offset restoration reads up to; in
	// Follow mode, the newest high watermark seen (the last stable offset
	// when reading committed). -1 while unknown.
	End int64
	// Lag is End minus Position (a missing position counts as 0), or -1
	// while End is unknown.
	Lag int64
	// Rebuilding is set while the store is read from empty — registered
	// without a position, or reset because its position did not fit —
	// and its position has not yet reached RebuildTarget. A compacted
	// changelog read part way holds the latest value of some keys and
	// none yet of others: no offset's snapshot. Once the position reaches
	// the target the store is consistent at its position, and stays so.
	Rebuilding bool
	// RebuildTarget is the changelog end offset listed when a rebuild
	// began (-1 while not yet listed, or when the store was not rebuilt).
	RebuildTarget int64
	// EndConfirmed is when the broker last confirmed the partition's end:
	// when the last listing of its offsets that was answered was sent,
	// so everything the changelog held then lies below End. Zero if
	// never. A fetch raises End but confirms nothing: its answer may have
	// waited, in a socket or the client's buffer, for as long as the
	// process was paused or the network held it, so the time it is taken
	// says nothing of when the broker gave it. A Reader cut off from the
	// broker stops confirming, so a lag computed from an old confirmation
	// may be far from the truth.
	EndConfirmed time.Time
}

// Completed reports a partition the Reader has finished with and no longer
// holds: a restoration that reached its end offset, or a partition of
// either mode that failed.
type Completed struct {
	Topic     string
	Partition int32
	Task      string
	Store     statestore.Store
	Mode      Mode
	// Restored counts records applied since registration.
	Restored int64
	// Position is the store's position when the Reader let go of it.
	Position int64
	// Duration is the time since registration.
	Duration time.Duration
	// Err, when non-nil, is why the partition was dropped: a store write
	// or reset failure, or a fatal fetch error. The store may then be
	// behind (never inconsistent: each batch is written atomically with
	// its position, and a reset empties data and position together).
	Err error
}

// Errors callers may branch on.
var (
	// ErrClosed is returned by a closed Reader.
	ErrClosed = errors.New("changelog: reader is closed")
	// ErrAlreadyRegistered is returned by Register for a partition that
	// is already registered.
	ErrAlreadyRegistered = errors.New("changelog: partition already registered")
)

// Reader reads changelog partitions into stores, in the spirit of Kafka
// Streams' StoreChangelogReader. It owns a group-less consumer: partitions
// are assigned to it directly, so reading never joins or disturbs the
// application's consumer group.
//
// One goroutine drives it by calling Poll in a loop; Register, Unregister
// and Progress may be called from any goroutine at any time.
type Reader struct {
	cfg ReaderConfig
	log *slog.Logger
	cl  *kgo.Client

	pollMu sync.Mutex // one Poll at a time; Close waits on it

	mu     sync.Mutex
	parts  map[TopicPartition]*partState
	epoch  uint64             // bumped whenever consumption of a partition starts or stops
	wake   context.CancelFunc // interrupts a blocked Poll; nil when not polling
	closed bool
	// listDue is set by Register and cleared when listPending gathers the
	// partitions to list.
	listDue bool
	// confirmedAt is when Poll last listed the ends of the partitions
	// being read; only Poll touches it.
	confirmedAt time.Time

	resets atomic.Int64 // stores emptied because their position did not fit

	// round is closed when the store writes a Poll handed to a goroutine
	// of their own are done; nil when none were. Only Poll and Close,
	// holding pollMu, touch it. The next Poll fetches meanwhile, and
	// waits for the round before it writes anything itself.
	round chan struct{}
	// finished holds the completions of the last round not yet returned
	// by Poll.
	finished []Completed
}

type partState struct {
	tp      TopicPartition
	reg     Partition
	started time.Time

	// Guarded by Reader.mu.
	consumedAt uint64 // epoch at which consumption started; 0 = not consuming
	needOffs   bool   // start and end offsets not listed yet
	retryAt    time.Time
	// pastEnd is set when a listing found the position past the end under
	// read committed; the store is reset only if the next listing agrees.
	pastEnd  bool
	pos      int64
	end      int64
	restored int64
	// rebuilding is set while the store is read from empty and has not
	// reached target, the end listed when reading began (-1 until
	// listed).
	rebuilding bool
	target     int64
	// torn is where a torn store (statestore.TornStore) must be read to
	// before it is consistent, -1 if it was not torn when registered.
	torn int64
	// confirmed is when the broker last confirmed end.
	confirmed time.Time

	// applyMu is held across a store write, so that Unregister can wait
	// for one in flight. pos, restored and the fields a write updates are
	// written under mu by the write's goroutine; the writes of one
	// partition never overlap (see Reader.round).
	applyMu sync.Mutex
}

// NewReader creates a Reader and its consumer client.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBatchRecords == 0 {
		cfg.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.FetchMaxWait == 0 {
		cfg.FetchMaxWait = DefaultFetchMaxWait
	}
	if cfg.ConfirmInterval == 0 {
		cfg.ConfirmInterval = DefaultConfirmInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	iso := kgo.ReadUncommitted()
	if cfg.ReadCommitted {
		iso = kgo.ReadCommitted()
	}
	opts := []kgo.Opt{
		kgo.FetchIsolationLevel(iso),
		// An offset the log no longer holds must come back as an error, not
		// be silently replaced by another: what the store holds was built
		// from records that are gone, so it must be rebuilt.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		// Transaction markers must come back as records: a restoration
		// whose end offset sits just past a commit marker finishes only
		// when the position moves past the marker, and kgo does not
		// surface a fetch that held nothing but markers.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(cfg.FetchMaxWait),
		// kgo decodes a whole fetch into records at once, ~150 bytes of
		// heap per record whatever its size; with the 1 MiB per partition
		// default, small changelog records cost ~50k structs per partition
		// in flight. Smaller fetches keep an instance's memory bounded.
		kgo.FetchMaxPartitionBytes(FetchPartitionBytes),
		kgo.FetchMaxBytes(FetchMaxBytes),
	}
	if len(cfg.Seeds) > 0 {
		opts = append(opts, kgo.SeedBrokers(cfg.Seeds...))
	}
	opts = append(opts, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("changelog: creating reader client: %w", err)
	}
	return &Reader{
		cfg:   cfg,
		log:   log,
		cl:    cl,
		parts: make(map[TopicPartition]*partState),
	}, nil
}

// Register starts reading p.Topic/p.Partition into p.Store from the
// store's position (from the beginning if it has none). Reading starts once
// Poll has listed the partition's start and end offsets, which also tell
// whether the position still fits the changelog (see Partition); a Restore
// partition whose store is already at the end is reported complete without
// fetching.
func (r *Reader) Register(p Partition) error {
	if p.Store == nil {
		return fmt.Errorf("changelog: register %s[%d]: nil store", p.Topic, p.Partition)
	}
	if p.Mode != Restore && p.Mode != Follow {
		return fmt.Errorf("changelog: register %s[%d]: unknown mode %v", p.Topic, p.Partition, p.Mode)
	}
	pos, err := p.Store.Position()
	if err != nil {
		return fmt.Errorf("changelog: register %s[%d]: reading store position: %w", p.Topic, p.Partition, err)
	}
	tp := TopicPartition{p.Topic, p.Partition}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.parts[tp]; ok {
		return fmt.Errorf("%w: %s[%d]", ErrAlreadyRegistered, p.Topic, p.Partition)
	}
	st := &partState{tp: tp, reg: p, started: time.Now(), needOffs: true, pos: pos, end: -1,
		rebuilding: pos == statestore.NoPosition, target: -1, torn: -1}
	if t, torn := statestore.TornUntil(p.Store); torn {
		// Part of a Write past pos is in the store: it is no snapshot
		// until the replay passes that Write, and fits the changelog
		// only if the changelog holds that Write.
		st.rebuilding, st.target, st.torn = true, t, t
	}
	r.parts[tp] = st
	r.listDue = true
	r.wakeLocked()
	return nil
}

// Unregister stops reading the partition and reports whether it was
// registered. When it returns, no further write reaches the store: a write
// already under way is waited for.
func (r *Reader) Unregister(topic string, partition int32) bool {
	r.mu.Lock()
	st, ok := r.parts[TopicPartition{topic, partition}]
	if ok {
		r.dropLocked(st)
	}
	r.mu.Unlock()
	if !ok {
		return false
	}
	// Wait for a write that began before st left the map.
	st.applyMu.Lock()
	st.applyMu.Unlock()
	return true
}

// Release is Unregister that also returns how many records were applied to
// the partition's store since it was registered, counted once no further
// write can reach it: what a restoration cut short restored.
func (r *Reader) Release(topic string, partition int32) (restored int64, ok bool) {
	r.mu.Lock()
	st, ok := r.parts[TopicPartition{topic, partition}]
	if ok {
		r.dropLocked(st)
	}
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	st.applyMu.Lock()
	st.applyMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return st.restored, true
}

// Progress returns the partition's reading state, and false if it is not
// registered (a completed restoration is no longer registered).
func (r *Reader) Progress(topic string, partition int32) (Progress, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.parts[TopicPartition{topic, partition}]
	if !ok {
		return Progress{}, false
	}
	return st.progressLocked(), true
}

func (st *partState) progressLocked() Progress {
	p := Progress{Mode: st.reg.Mode, Restored: st.restored, Position: st.pos, End: st.end, Lag: -1,
		Rebuilding: st.rebuilding, RebuildTarget: st.target, EndConfirmed: st.confirmed}
	if st.end >= 0 {
		p.Lag = max(st.end-max(st.pos, 0), 0)
	}
	return p
}

// StoreResets counts the stores the Reader has emptied (with Store.Reset)
// because their position did not fit their changelog.
func (r *Reader) StoreResets() int64 { return r.resets.Load() }

// Close stops the Reader: it interrupts and waits for a running Poll and
// closes the consumer. It does not close the registered stores.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	if r.wake != nil {
		r.wake()
	}
	r.mu.Unlock()
	r.cl.Close()
	// Wait out a Poll that was mid-flight, and the writes of its round:
	// the caller may close the stores next.
	r.pollMu.Lock()
	r.waitRound()
	r.pollMu.Unlock()
	return nil
}

// wakeLocked interrupts a Poll blocked waiting for records, so that it
// notices registration changes promptly.
func (r *Reader) wakeLocked() {
	if r.wake != nil {
		r.wake()
	}
}

// consumeLocked starts fetching st at pos.
func (r *Reader) consumeLocked(st *partState, pos int64) {
	off := kgo.NewOffset().AtStart()
	if pos >= 0 {
		off = kgo.NewOffset().At(pos)
	}
	r.epoch++
	st.consumedAt = r.epoch
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{st.tp.Topic: {st.tp.Partition: off}})
}

// dropLocked forgets st and stops fetching it.
func (r *Reader) dropLocked(st *partState) {
	if r.parts[st.tp] != st {
		return
	}
	delete(r.parts, st.tp)
	r.stopLocked(st)
	r.wakeLocked()
}

// stopLocked stops fetching st. Records already taken for it are then
// ignored: they belong to an earlier epoch.
func (r *Reader) stopLocked(st *partState) {
	if st.consumedAt != 0 {
		r.cl.RemoveConsumePartitions(map[string][]int32{st.tp.Topic: {st.tp.Partition}})
		r.epoch++
		st.consumedAt = 0
	}
}

func logAttrs(st *partState, extra ...any) []any {
	return append([]any{
		slog.String("topic", st.tp.Topic),
		slog.Int("partition", int(st.tp.Partition)),
		slog.String("task", st.reg.Task),
		slog.String("store", st.reg.StoreName),
		slog.String("mode", st.reg.Mode.String()),
	}, extra...)
}
