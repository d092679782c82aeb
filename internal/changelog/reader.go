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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Seeds are the bootstrap brokers. Required unless ClientOpts names
	// them.
	Seeds []string
	// ClientOpts are appended to the Reader's own kgo options, for TLS,
	// SASL, client ID and the like. They must not set a consumer group.
	ClientOpts []kgo.Opt
	// ReadCommitted reads only committed transactional data (for
	// exactly-once); ends and lag are then measured to the last stable
	// offset. Default: read uncommitted.
	ReadCommitted bool
	// ThroughOpenTransactions, with ReadCommitted, sets a Restore
	// partition's end at the high watermark instead of the last stable
	// offset, so that a restoration ends only once every transaction
	// open at the listing has committed or aborted (its marker read) and
	// the store holds whatever those that committed wrote. An active
	// task needs this: the group's committed offsets may already cover
	// input whose results lie past the last stable offset, in a previous
	// owner's transaction that ends late or in transactions committed
	// behind another producer's open one.
	ThroughOpenTransactions bool
	// MaxBatchRecords caps the records of one store write. A Poll takes
	// that many, or up to four times as many when that empties the
	// client's buffer (see Poll). Default DefaultMaxBatchRecords.
	MaxBatchRecords int
	// RetryBackoff is how long Poll waits before retrying a failed
	// end-offset listing. Default 1s.
	RetryBackoff time.Duration
	// FetchMaxWait is how long the broker may hold a fetch that has no
	// data. A partition registered while such a fetch is in flight is
	// first fetched when it returns, so this bounds how long a new
	// restoration can wait to start. Default 500ms (Kafka's consumer
	// default; kgo's own is 5s).
	FetchMaxWait time.Duration
	// ConfirmInterval is how often the Reader lists the end offsets of
	// the partitions it reads: the listings are what confirms an end
	// (see Progress.EndConfirmed). Default 1s.
	ConfirmInterval time.Duration
	// Logger receives progress logs. Nil discards them.
	Logger *slog.Logger
	// Applied, when set, receives the data records of each store write
	// once the write and its position are in (Progress shows the new
	// position), in offset order, from the goroutine that wrote them.
	// Live queries follow a replica through it. It must not block.
	Applied func(topic string, partition int32, recs []*kgo.Record)
}

// Defaults used when ReaderConfig leaves a field zero.
const (
	// DefaultMaxBatchRecords keeps one store write of small records within
	// one badger transaction (3,275 entries and ~300 KiB with the stores'
	// default 2 MiB memtable), so it is atomic across a crash too; a
	// larger one is written torn (statestore.TornStore), which a crash
	// leaves for the next restoration to repair.
	DefaultMaxBatchRecords = 3000
	DefaultRetryBackoff    = time.Second
	DefaultFetchMaxWait    = 500 * time.Millisecond
	DefaultConfirmInterval = time.Second
	// FetchPartitionBytes and FetchMaxBytes bound one fetch of a Reader
	// (per partition and in all); the runtime uses them for its group
	// consumers too.
	FetchPartitionBytes = 256 << 10
	FetchMaxBytes       = 4 << 20
)

// Validate reports whether the config is usable.
func (c ReaderConfig) Validate() error {
	if len(c.Seeds) == 0 && len(c.ClientOpts) == 0 {
		return errors.New("changelog: reader config needs Seeds or ClientOpts")
	}
	if c.MaxBatchRecords < 0 {
		return fmt.Errorf("changelog: MaxBatchRecords must not be negative, got %d", c.MaxBatchRecords)
	}
	if c.RetryBackoff < 0 {
		return fmt.Errorf("changelog: RetryBackoff must not be negative, got %v", c.RetryBackoff)
	}
	if c.FetchMaxWait < 0 {
		return fmt.Errorf("changelog: FetchMaxWait must not be negative, got %v", c.FetchMaxWait)
	}
	if c.ConfirmInterval < 0 {
		return fmt.Errorf("changelog: ConfirmInterval must not be negative, got %v", c.ConfirmInterval)
	}
	return nil
}

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

// Poll does one round of reading: it lists end offsets for newly
// registered partitions, waits for fetched records (until some arrive, ctx
// ends, or a Register or Unregister interrupts the wait), and applies
// them, each partition's in store writes of at most MaxBatchRecords. It
// takes MaxBatchRecords records, or all the client holds if that is at
// most four times as many (see takeSize). It returns the partitions
// finished since the last call. Concurrent calls are
// serialized; one polling goroutine is the intended use.
//
// The writes of a round go on after Poll returns, on a goroutine of their
// own, so that the next round's fetch overlaps them; the next Poll waits
// for them before it writes, and reports what they finished. A store is
// therefore written by one round at a time, each partition's batches in
// order, and no batch is written after an earlier one of its partition
// failed. Unregister, Release and Close wait for a write under way, and
// Poll waits for its round before it returns an error.
//
// Poll returns ctx's error when ctx ends, and ErrClosed once the Reader is
// closed; records fetched before either are still applied.
func (r *Reader) Poll(ctx context.Context) ([]Completed, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()

	done, retryPending := r.listPending(ctx)
	r.confirmEnds(ctx)

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return append(done, r.waitRound()...), ErrClosed
	}
	// Records taken from the client belong to the registration that was
	// consuming when they were taken. Any partition whose consumption
	// (re)started after this point is ambiguous and is re-sought below.
	epoch := r.epoch
	var pctx context.Context
	var cancel context.CancelFunc
	switch {
	case len(done) > 0 || len(r.finished) > 0:
		// Report completions now; take only what is already buffered.
		// (The last round adds to finished and wakes the wait under mu,
		// so a completion never waits for a confirmation interval.)
		pctx, cancel = nil, func() {}
	case r.listDue:
		// Registered after listPending looked, before there was a wait
		// to interrupt: list it in the next round rather than wait for
		// records that may never come.
		pctx, cancel = nil, func() {}
	case retryPending:
		pctx, cancel = context.WithTimeout(ctx, min(r.cfg.RetryBackoff, r.untilConfirm()))
	default:
		// Wake for the next confirmation of the ends even if no
		// record comes.
		pctx, cancel = context.WithTimeout(ctx, r.untilConfirm())
	}
	r.wake = cancel
	r.mu.Unlock()

	fetches := r.cl.PollRecords(pctx, r.takeSize())

	r.mu.Lock()
	r.wake = nil
	closed := r.closed
	r.mu.Unlock()
	cancel()
	done = append(done, r.waitRound()...)
	if closed {
		return done, ErrClosed
	}

	done = append(done, r.apply(fetches, epoch)...)
	for _, fe := range fetches.Errors() {
		if errors.Is(fe.Err, kgo.ErrClientClosed) {
			return append(done, r.waitRound()...), ErrClosed
		}
	}
	if err := ctx.Err(); err != nil {
		return append(done, r.waitRound()...), err
	}
	return done, nil
}

// drainBatches bounds how many batches' worth of records (MaxBatchRecords
// each) a Poll takes to empty the client's buffer.
const drainBatches = 4

// takeSize is how many records Poll takes from the client: a batch, or all
// it holds if that is at most drainBatches batches. The client fetches
// again only once its buffer is empty, so emptying it while a few batches
// remain to be written lets the next fetch (and its decoding) overlap
// those writes instead of following them.
func (r *Reader) takeSize() int {
	n := r.cfg.MaxBatchRecords
	if buf := r.cl.BufferedFetchRecords(); buf > int64(n) && buf <= int64(drainBatches*n) {
		n = int(buf)
	}
	return n
}

// waitRound waits for the store writes of the last round and returns the
// partitions they finished. The caller holds pollMu.
func (r *Reader) waitRound() []Completed {
	if r.round == nil {
		return nil
	}
	<-r.round
	r.round = nil
	r.mu.Lock()
	defer r.mu.Unlock()
	done := r.finished
	r.finished = nil
	return done
}

// startRound writes batches, in order, on a goroutine of their own. The
// caller holds pollMu and has waited for the previous round.
func (r *Reader) startRound(batches []*batch) {
	if len(batches) == 0 {
		return
	}
	ch := make(chan struct{})
	r.round = ch
	go func() {
		defer close(ch)
		var done []Completed
		for _, b := range batches {
			if c, ok := r.applyBatch(b); ok {
				done = append(done, c)
			}
		}
		if len(done) > 0 {
			r.mu.Lock()
			r.finished = append(r.finished, done...)
			r.wakeLocked()
			r.mu.Unlock()
		}
	}()
}

// untilConfirm is how long until confirmEnds is due, at least a
// millisecond. Only Poll calls it.
func (r *Reader) untilConfirm() time.Duration {
	return max(r.cfg.ConfirmInterval-time.Since(r.confirmedAt), time.Millisecond)
}

// confirmEnds lists the end offsets of the partitions being read, once per
// ConfirmInterval, and records them as confirmed: a Follow partition's end
// moves up to the listing; a Restore partition keeps its target, but its
// lag to it is known to be current. Only these listings confirm an end:
// they are dated by their sending, which a fetch, taken from the client's
// buffer at some later time, cannot be. A listing that fails (the broker
// is unreachable) confirms nothing, and the confirmations age.
func (r *Reader) confirmEnds(ctx context.Context) {
	if time.Since(r.confirmedAt) < r.cfg.ConfirmInterval {
		return
	}
	now := time.Now()
	r.confirmedAt = now
	r.mu.Lock()
	var sts []*partState
	var tps []TopicPartition
	for _, st := range r.parts {
		if st.consumedAt != 0 && !st.needOffs {
			sts = append(sts, st)
			tps = append(tps, st.tp)
		}
	}
	r.mu.Unlock()
	if len(tps) == 0 {
		return
	}
	// Bounded, so that an unreachable broker delays the next fetch by one
	// interval at most.
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ConfirmInterval)
	ends, err := r.listOffsets(lctx, tps, -1, r.cfg.ReadCommitted)
	cancel()
	if err != nil {
		r.log.Debug("changelog end confirmation failed", slog.Any("error", err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range sts {
		end, ok := ends[st.tp]
		if !ok || r.parts[st.tp] != st || st.consumedAt == 0 {
			continue
		}
		if st.reg.Mode == Follow {
			st.end = max(st.end, end)
		}
		// The time before the request: the end was at least this then.
		st.confirmed = now
	}
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

// listPending lists start and end offsets for partitions registered (or
// reset) since the last round, checks that each store's position fits its
// changelog, resetting the store if it does not, and starts reading, or
// completes a Restore partition with nothing to read. It reports whether
// some listing failed, or must be repeated, and so needs a retry.
func (r *Reader) listPending(ctx context.Context) (done []Completed, retry bool) {
	now := time.Now()
	r.mu.Lock()
	r.listDue = false
	var pending []*partState
	var tps []TopicPartition
	for _, st := range r.parts {
		if !st.needOffs {
			continue
		}
		if now.Before(st.retryAt) {
			retry = true
			continue
		}
		pending = append(pending, st)
		tps = append(tps, st.tp)
	}
	r.mu.Unlock()
	if len(pending) == 0 {
		return nil, retry
	}
	// What follows may reset stores: not while the last round writes
	// (a store may back several partitions, as a global store does).
	done = r.waitRound()

	// Only writes change pos, and none is under way: no lock needed to
	// read it.
	starts, startErr := r.listOffsets(ctx, tps, -2, false)
	ends, endErr := r.listOffsets(ctx, tps, -1, r.cfg.ReadCommitted)
	// Under read committed the end is the last stable offset, which an
	// open transaction holds back, maybe below positions that are fine:
	// whether a position is past the log is a question for the high
	// watermark, and so is a restoration's end through open
	// transactions.
	var hwms map[TopicPartition]int64
	var hwmErr error
	if r.cfg.ReadCommitted {
		var need []TopicPartition
		for _, st := range pending {
			if end, ok := ends[st.tp]; ok && st.fitPos() > end || r.throughOpen(st) {
				need = append(need, st.tp)
			}
		}
		if len(need) > 0 {
			hwms, hwmErr = r.listOffsets(ctx, need, -1, false)
		}
	}

	type unfit struct {
		st         *partState
		why        string
		start, end int64
		readTo     int64 // the end reading starts towards after the reset
	}
	var resets []unfit
	r.mu.Lock()
	for _, st := range pending {
		if r.parts[st.tp] != st {
			continue // unregistered meanwhile
		}
		start, sok := starts[st.tp]
		end, eok := ends[st.tp]
		hwm, hok := end, true
		if r.cfg.ReadCommitted && eok && (st.fitPos() > end || r.throughOpen(st)) {
			hwm, hok = hwms[st.tp]
		}
		lso := end
		if r.throughOpen(st) {
			end = hwm
		}
		if !sok || !eok || !hok {
			st.retryAt = now.Add(r.cfg.RetryBackoff)
			retry = true
			r.log.Warn("changelog offset listing failed; will retry",
				logAttrs(st, slog.Any("error", errors.Join(startErr, endErr, hwmErr)))...)
			continue
		}
		switch {
		case st.fitPos() > hwm && r.cfg.ReadCommitted && !st.pastEnd:
			// The transaction coordinator writes commit markers after
			// the commit returns, and a position after a commit is past
			// its marker (see the runtime's commit): for a moment the
			// position may be one past the high watermark. The next
			// listing settles it.
			st.pastEnd = true
			st.retryAt = now.Add(r.cfg.RetryBackoff)
			retry = true
			r.log.Info("changelog store position is past the changelog end; listing again before resetting the store",
				logAttrs(st, slog.Int64("position", st.pos), slog.Int64("end", hwm))...)
		case st.fitPos() > hwm:
			resets = append(resets, unfit{st, "position beyond the changelog end", start, hwm, end})
		case st.pos > 0 && st.pos < start:
			resets = append(resets, unfit{st, "position below the changelog start", start, hwm, end})
		default:
			if lso < end && st.fitPos() < end {
				r.log.Info("changelog restore waits for the transactions open on the changelog",
					logAttrs(st, slog.Int64("position", st.pos), slog.Int64("last_stable", lso), slog.Int64("end", end))...)
			}
			if c, ok := r.startLocked(st, start, end, now); ok {
				done = append(done, c)
			}
		}
	}
	r.mu.Unlock()

	for _, u := range resets {
		failed, ready := r.resetStore(u.st, u.why, u.start, u.end)
		if failed != nil {
			done = append(done, *failed)
		}
		if !ready {
			continue
		}
		r.mu.Lock()
		if r.parts[u.st.tp] == u.st {
			// The log did not change with the store: this listing holds.
			if c, ok := r.startLocked(u.st, u.start, u.readTo, now); ok {
				done = append(done, c)
			}
		}
		r.mu.Unlock()
	}
	return done, retry
}

// throughOpen reports whether st's restoration reads up to the high
// watermark through open transactions (ReaderConfig.ThroughOpenTransactions).
func (r *Reader) throughOpen(st *partState) bool {
	return r.cfg.ReadCommitted && r.cfg.ThroughOpenTransactions && st.reg.Mode == Restore
}

// fitPos is the position checked against the changelog's end: a torn
// store holds data up to its torn Write's position.
func (st *partState) fitPos() int64 { return max(st.pos, st.torn) }

// startLocked starts reading a listed partition whose position fits its
// changelog, or completes a Restore partition with nothing to read. listed
// is when the offsets were listed.
func (r *Reader) startLocked(st *partState, start, end int64, listed time.Time) (Completed, bool) {
	st.needOffs = false
	st.pastEnd = false
	st.confirmed = listed
	from := max(st.pos, start)
	if st.rebuilding {
		// Reading from empty: consistent only once everything the log
		// held now has been read, whatever compaction left of it.
		if st.target < 0 {
			st.target = end
		}
		if from >= st.target {
			st.rebuilding = false
		}
	}
	if st.reg.Mode == Follow {
		st.end = max(st.end, end)
		r.log.Info("changelog follow started", logAttrs(st, slog.Int64("from", from))...)
		r.consumeLocked(st, from)
		return Completed{}, false
	}
	st.end = end
	if from >= end {
		return r.completeLocked(st, nil), true
	}
	r.log.Info("changelog restore started", logAttrs(st, slog.Int64("from", from), slog.Int64("to", end))...)
	r.consumeLocked(st, from)
	return Completed{}, false
}

// resetStore empties st's store because its position does not fit the
// changelog, and reports whether st is still registered and ready to read
// from the start. A failed reset drops st and is returned as its
// completion. The caller must have stopped consumption of st and must not
// hold r.mu. start and end are for the log (-1 if unknown).
func (r *Reader) resetStore(st *partState, why string, start, end int64) (failed *Completed, ready bool) {
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	r.mu.Lock()
	live := r.parts[st.tp] == st
	pos := st.pos
	r.mu.Unlock()
	if !live {
		return nil, false
	}
	r.log.Warn("changelog store does not fit its changelog; resetting the store and reading the changelog from its start",
		logAttrs(st, slog.String("reason", why), slog.Int64("position", pos), slog.Int64("start", start), slog.Int64("end", end))...)
	err := st.reg.Store.Reset()
	if err == nil {
		r.resets.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts[st.tp] != st {
		return nil, false
	}
	if err != nil {
		c := r.completeLocked(st, fmt.Errorf("changelog: resetting the store of %s[%d]: %w", st.tp.Topic, st.tp.Partition, err))
		return &c, false
	}
	st.pos = statestore.NoPosition
	st.end = -1
	st.pastEnd = false
	st.rebuilding, st.target, st.torn = true, -1, -1
	return nil, true
}

// completeLocked drops st and describes it.
func (r *Reader) completeLocked(st *partState, err error) Completed {
	r.dropLocked(st)
	c := Completed{
		Topic:     st.tp.Topic,
		Partition: st.tp.Partition,
		Task:      st.reg.Task,
		Store:     st.reg.Store,
		Mode:      st.reg.Mode,
		Restored:  st.restored,
		Position:  st.pos,
		Duration:  time.Since(st.started),
		Err:       err,
	}
	if err != nil {
		r.log.Error("changelog reading failed", logAttrs(st, slog.Any("error", err))...)
	} else {
		r.log.Info("changelog restore completed", logAttrs(st,
			slog.Int64("records", c.Restored), slog.Int64("position", c.Position),
			slog.Duration("duration", c.Duration))...)
	}
	return c
}

type batch struct {
	st   *partState
	recs []*kgo.Record
	hwm  int64
}

// apply starts writing fetched records to their stores, partition by
// partition, as a round (see startRound). The caller holds pollMu and has
// waited for the previous round.
func (r *Reader) apply(fetches kgo.Fetches, epoch uint64) []Completed {
	var done []Completed
	var batches []*batch
	byTP := make(map[TopicPartition]*batch)

	type lost struct {
		st         *partState
		err        error
		start, end int64
	}
	var losses []lost
	r.mu.Lock()
	var reseek []*partState
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		st := r.parts[TopicPartition{p.Topic, p.Partition}]
		if st == nil || st.consumedAt == 0 {
			return // unregistered since the fetch; nothing to apply to
		}
		if st.consumedAt > epoch {
			// Taken from a consumption that predates this
			// registration (or its re-seek): neither its records nor
			// its error are this registration's.
			if len(p.Records) > 0 {
				reseek = append(reseek, st)
			}
			return
		}
		if p.Err != nil {
			var loss *kgo.ErrDataLoss
			if errors.As(p.Err, &loss) || errors.Is(p.Err, kerr.OffsetOutOfRange) {
				// The log moved away under the position: records were
				// deleted before they were read, or the log was cut
				// back or replaced after they were. Stop; the store is
				// reset below and read again from the start. Stopping
				// voids anything else taken for st in this round.
				r.stopLocked(st)
				start, end := int64(-1), int64(-1)
				if loss == nil {
					start, end = p.LogStartOffset, p.HighWatermark
				}
				losses = append(losses, lost{st, p.Err, start, end})
				return
			}
			// Dropping st also voids any batch already gathered for it:
			// applyBatch skips partitions no longer registered.
			done = append(done, r.completeLocked(st, fmt.Errorf("changelog: fetching %s[%d]: %w", p.Topic, p.Partition, p.Err)))
			return
		}
		b := byTP[st.tp]
		if b == nil {
			b = &batch{st: st, hwm: -1}
			byTP[st.tp] = b
			batches = append(batches, b)
		}
		b.recs = append(b.recs, p.Records...)
		hwm := p.HighWatermark
		if r.cfg.ReadCommitted {
			hwm = p.LastStableOffset
		}
		b.hwm = max(b.hwm, hwm)
	})
	// A partition stopped by a later fetch's loss must not get the records
	// an earlier fetch of this round held: they would land after the reset.
	kept := batches[:0]
	for _, b := range batches {
		if b.st.consumedAt != 0 {
			kept = append(kept, b)
		}
	}
	batches = kept
	for _, st := range reseek {
		// These records may predate the current registration; drop them
		// and fetch again from the position we trust.
		if r.parts[st.tp] == st && st.consumedAt != 0 {
			r.cl.RemoveConsumePartitions(map[string][]int32{st.tp.Topic: {st.tp.Partition}})
			r.consumeLocked(st, st.pos)
		}
	}
	r.mu.Unlock()

	// A lost partition's batches were dropped above, so its reset need
	// not wait for the others' writes; it goes first, as nothing else
	// writes while it runs.
	for _, l := range losses {
		failed, ready := r.resetStore(l.st, "the changelog no longer holds the position: "+l.err.Error(), l.start, l.end)
		if failed != nil {
			done = append(done, *failed)
		}
		if ready {
			// Listed again at the next Poll, which starts it from the
			// start of the log as it is now.
			r.mu.Lock()
			if r.parts[l.st.tp] == l.st {
				l.st.needOffs = true
				l.st.retryAt = time.Time{}
			}
			r.mu.Unlock()
		}
	}
	r.startRound(batches)
	return done
}

// applyBatch writes b's records in order, in writes of at most
// MaxBatchRecords records, each with its position.
func (r *Reader) applyBatch(b *batch) (Completed, bool) {
	st := b.st
	st.applyMu.Lock()
	defer st.applyMu.Unlock()
	recs := b.recs
	for {
		// Unregister drops st from the map before waiting on applyMu,
		// so checking here, under applyMu, means a write never starts
		// after Unregister has returned.
		r.mu.Lock()
		live := r.parts[st.tp] == st
		r.mu.Unlock()
		if !live {
			return Completed{}, false
		}
		// Only this partition's writes change pos, one at a time, and
		// this goroutine makes them: no lock needed to read it.
		pos := st.pos
		last := int64(-1)
		n := min(len(recs), r.cfg.MaxBatchRecords)
		entries := make([]statestore.Entry, 0, n)
		offsets := make([]int64, 0, n)
		var applied []*kgo.Record
		if r.cfg.Applied != nil {
			applied = make([]*kgo.Record, 0, n)
		}
		taken := 0
		for _, rec := range recs {
			if taken == r.cfg.MaxBatchRecords {
				break
			}
			taken++
			if rec.Offset < pos {
				continue // already applied
			}
			last = rec.Offset
			if rec.Attrs.IsControl() {
				continue // a transaction marker: moves the position, holds no data
			}
			entries = append(entries, entryOf(rec))
			offsets = append(offsets, rec.Offset)
			if applied != nil {
				applied = append(applied, rec)
			}
		}
		recs = recs[taken:]
		var werr error
		if last >= 0 {
			werr = r.writeWaitingForSpace(st, entries, last+1)
		}

		r.mu.Lock()
		if werr != nil {
			defer r.mu.Unlock()
			if r.parts[st.tp] != st {
				return Completed{}, false
			}
			where := ""
			if ee := (*statestore.EntryError)(nil); errors.As(werr, &ee) && ee.Index < len(offsets) {
				where = fmt.Sprintf(" (the record at offset %d cannot be stored)", offsets[ee.Index])
			}
			return r.completeLocked(st, fmt.Errorf("changelog: writing %d records from %s[%d] to store%s: %w",
				len(entries), st.tp.Topic, st.tp.Partition, where, werr)), true
		}
		if last >= 0 {
			st.pos = last + 1
			st.restored += int64(len(entries))
		}
		if r.parts[st.tp] != st {
			r.mu.Unlock()
			return Completed{}, false // unregistered during the write
		}
		if st.rebuilding && st.target >= 0 && st.pos >= st.target {
			st.rebuilding = false
			r.log.Info("changelog store rebuilt: consistent from here on", logAttrs(st, slog.Int64("position", st.pos))...)
		}
		if len(applied) > 0 {
			// After the position is in and outside mu: a live query
			// that missed these records sees a position past them.
			r.mu.Unlock()
			r.cfg.Applied(st.tp.Topic, st.tp.Partition, applied)
			r.mu.Lock()
			if r.parts[st.tp] != st {
				r.mu.Unlock()
				return Completed{}, false
			}
		}
		if len(recs) > 0 {
			r.mu.Unlock()
			continue
		}
		defer r.mu.Unlock()
		if st.reg.Mode == Follow {
			st.end = max(st.end, b.hwm)
			return Completed{}, false
		}
		if st.pos >= st.end {
			return r.completeLocked(st, nil), true
		}
		return Completed{}, false
	}
}

// A store write refused for a full disk is retried after diskFullFirstWait,
// doubling up to diskFullMaxWait (kept short so that Close and Unregister,
// which wait for the write, are not held long), and logged at most once per
// diskFullLogEvery.
const (
	diskFullFirstWait = 100 * time.Millisecond
	diskFullMaxWait   = time.Second
	diskFullLogEvery  = 30 * time.Second
)

// writeWaitingForSpace writes entries into st's store at position pos, and
// writes them again for as long as the store refuses them for a full disk,
// the partition is registered and the reader open. A refusal for a full
// disk leaves the store unchanged (statestore.ErrDiskFull), so the same
// write is simply tried again; failing instead would stop a standby
// following its changelog for good, or fail the restoration of an active
// task, and with it its stream thread, for a condition that passes once
// space is freed.
func (r *Reader) writeWaitingForSpace(st *partState, entries []statestore.Entry, pos int64) error {
	if len(entries) > 0 {
		// Before every write, as a Reset in between gives the store a
		// new filter.
		statestore.Restoring(st.reg.Store)
	}
	wait := diskFullFirstWait
	var since, logged time.Time
	for attempt := 1; ; attempt++ {
		err := st.reg.Store.Write(entries, pos)
		if err == nil || !errors.Is(err, statestore.ErrDiskFull) {
			if err == nil && attempt > 1 {
				r.log.Info("disk space freed; changelog records stored", logAttrs(st, slog.Duration("waited", time.Since(since).Round(time.Millisecond)))...)
			}
			return err
		}
		r.mu.Lock()
		live := r.parts[st.tp] == st && !r.closed
		r.mu.Unlock()
		if !live {
			return err
		}
		now := time.Now()
		if attempt == 1 {
			since = now
		}
		if now.Sub(logged) >= diskFullLogEvery {
			logged = now
			r.log.Error("disk full: changelog records cannot enter their store; the write is retried until space is freed",
				logAttrs(st, slog.Any("error", err), slog.Duration("waited", now.Sub(since).Round(time.Millisecond)))...)
		}
		time.Sleep(wait)
		wait = min(2*wait, diskFullMaxWait)
	}
}

// listOffsets lists, per partition, the offset for timestamp (-1 end, -2
// start); the end is the last stable offset if committed is set, the high
// watermark otherwise. Partitions that could not be listed are missing
// from the result; the error says why.
func (r *Reader) listOffsets(ctx context.Context, tps []TopicPartition, timestamp int64, committed bool) (map[TopicPartition]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	if committed {
		req.IsolationLevel = 1
	}
	idx := make(map[string]int)
	for _, tp := range tps {
		i, ok := idx[tp.Topic]
		if !ok {
			i = len(req.Topics)
			idx[tp.Topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition = tp.Partition
		p.Timestamp = timestamp
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	out := make(map[TopicPartition]int64, len(tps))
	var errs []error
	for _, shard := range r.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			errs = append(errs, shard.Err)
			continue
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
					continue
				}
				out[TopicPartition{t.Topic, p.Partition}] = p.Offset
			}
		}
	}
	return out, errors.Join(errs...)
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
