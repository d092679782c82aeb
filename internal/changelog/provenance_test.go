package changelog

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// rebuildHistory is a changelog that rewrites the same keys, as a compacted
// changelog does: read part way, a store holds the newest value of some keys
// and an older one of others, which no offset of the log ever held.
func rebuildHistory() []statestore.Entry {
	var out []statestore.Entry
	for round := range 4 {
		for _, e := range numbered(0, 15) {
			out = append(out, kv(string(e.Key), string(e.Value)+"-"+string(rune('a'+round))))
		}
	}
	return out
}

// stepUntilTarget polls r one round at a time, checking at every step that
// the partition reports Rebuilding exactly while its position is short of
// the target, until the position reaches target. It returns how many
// rounds reported Rebuilding.
func stepUntilTarget(t *testing.T, r *Reader, target int64) int {
	t.Helper()
	rebuilding := 0
	pollUntil(t, r, func([]Completed) bool {
		p, ok := r.Progress(clTopic, 0)
		if !ok {
			return true // a restoration completed and was forgotten
		}
		if p.RebuildTarget < 0 {
			return false // not listed (or not reset) yet
		}
		require.Equal(t, target, p.RebuildTarget)
		require.Equal(t, p.Position < target, p.Rebuilding, "rebuilding exactly while short of the target: %+v", p)
		if p.Rebuilding {
			rebuilding++
		}
		return p.Position >= target
	})
	return rebuilding
}

// A store read from empty is no snapshot of any offset until it has read
// everything its changelog held when reading began; from then on it is
// consistent at its position, in Restore and Follow mode alike.
func TestRebuildFromEmptyUntilTarget(t *testing.T) {
	history := rebuildHistory()
	end := int64(len(history))
	for _, mode := range []Mode{Restore, Follow} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			prod := newProducer(t, c)
			produce(t, prod, clTopic, 0, history...)

			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 7 })
			store := newFakeStore()
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: mode, Task: "0_0"}))
			p, ok := r.Progress(clTopic, 0)
			require.True(t, ok)
			require.True(t, p.Rebuilding, "registered without a position")

			require.Positive(t, stepUntilTarget(t, r, end), "some rounds were part way")
			require.Equal(t, expectMap(history...), store.snapshot())
			if mode == Restore {
				return
			}
			// Records written after the target do not make it rebuild
			// again: the store is consistent at every later position.
			produce(t, prod, clTopic, 0, kv("k0001", "later"))
			pollUntil(t, r, func([]Completed) bool {
				p, _ := r.Progress(clTopic, 0)
				require.False(t, p.Rebuilding)
				return p.Position == end+1
			})
		})
	}
}

// A store with a position that fits its changelog is consistent from the
// start: it never reports Rebuilding.
func TestStoreWithPositionIsNotRebuilding(t *testing.T) {
	history := rebuildHistory()
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	produce(t, prod, clTopic, 0, history...)
	store := newFakeStore()
	require.NoError(t, store.Write(history[:10], 10))
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 7 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow, Task: "0_0"}))
	pollUntil(t, r, func([]Completed) bool {
		p, _ := r.Progress(clTopic, 0)
		require.False(t, p.Rebuilding, "%+v", p)
		require.Equal(t, int64(-1), p.RebuildTarget)
		return p.Position == int64(len(history))
	})
}

// A store reset because its position no longer fits rebuilds like an empty
// one: rebuilding until the end listed after the reset.
func TestResetStoreRebuildsUntilTarget(t *testing.T) {
	history := rebuildHistory()
	end := int64(len(history))
	for _, mode := range []Mode{Restore, Follow} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			prod := newProducer(t, c)
			produce(t, prod, clTopic, 0, history...)
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 7 })
			store := staleStore(t, end+500)
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: mode, Task: "0_0"}))
			p, _ := r.Progress(clTopic, 0)
			require.False(t, p.Rebuilding, "a store with a position is not rebuilding until it is reset")

			require.Positive(t, stepUntilTarget(t, r, end))
			require.Equal(t, 1, store.resetCount())
			require.Equal(t, expectMap(history...), store.snapshot())
		})
	}
}

// cutDialer lets a test cut a Reader off from the broker and let it back.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError("cut by test")}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) set(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			c.Close()
		}
		d.conns = nil
	}
}

// An idle followed changelog has its end confirmed again and again by
// listing; cut off from the broker, the confirmation ages.
func TestFollowConfirmsIdleEndAndAgesWhenCutOff(t *testing.T) {
	const interval = 100 * time.Millisecond
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	produce(t, prod, clTopic, 0, numbered(0, 20)...)
	d := &cutDialer{}
	r := newReader(t, c, func(cfg *ReaderConfig) {
		cfg.ConfirmInterval = interval
		cfg.ClientOpts = []kgo.Opt{kgo.Dialer(d.dial), kgo.RetryTimeout(interval)}
	})
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: newFakeStore(), Mode: Follow, Task: "0_0"}))
	runPolling(t, r)
	progress := func() Progress { p, _ := r.Progress(clTopic, 0); return p }
	eventually(t, func() bool { return progress().Lag == 0 }, "caught up")

	// Nothing is produced from here on: only listings can confirm.
	first := progress().EndConfirmed
	require.False(t, first.IsZero())
	eventually(t, func() bool { return progress().EndConfirmed.After(first.Add(2 * interval)) }, "idle end confirmed again")
	eventually(t, func() bool { return time.Since(progress().EndConfirmed) < 3*interval }, "confirmations keep coming")

	d.set(true)
	eventually(t, func() bool { return time.Since(progress().EndConfirmed) > 10*interval }, "confirmation ages while cut off")
	require.Equal(t, int64(0), progress().Lag, "the lag itself is the stale figure; callers judge it by its age")

	d.set(false)
	eventually(t, func() bool { return time.Since(progress().EndConfirmed) < 3*interval }, "confirmed again once reachable")
}

// tornStore is a store left torn by a crash (statestore.TornStore): it
// holds part of a Write up to target under an older position.
type tornStore struct {
	*fakeStore
	target int64
}

func (s *tornStore) TornUntil() (int64, bool) {
	if pos := s.position(); pos >= s.target {
		return statestore.NoPosition, false
	}
	return s.target, true
}

// A torn store is no snapshot until the replay from its position passes
// its torn Write: it reports Rebuilding with that Write's position as the
// target, and ends up holding exactly the changelog's state whatever part
// of the Write it already held.
func TestTornStoreRebuildsUntilItsWrite(t *testing.T) {
	history := rebuildHistory()
	end := int64(len(history))
	for _, mode := range []Mode{Restore, Follow} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			produce(t, newProducer(t, c), clTopic, 0, history...)
			// Committed up to 20; the torn Write was to reach 40 and
			// landed its first half.
			store := &tornStore{fakeStore: newFakeStore(), target: 40}
			require.NoError(t, store.Write(history[:20], 20))
			require.NoError(t, store.Write(history[20:30], 20))
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 7 })
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: mode, Task: "0_0"}))
			p, _ := r.Progress(clTopic, 0)
			require.True(t, p.Rebuilding)
			require.Equal(t, int64(40), p.RebuildTarget)

			require.Positive(t, stepUntilTarget(t, r, 40))
			pollUntil(t, r, func([]Completed) bool {
				p, ok := r.Progress(clTopic, 0)
				return !ok || p.Position == end
			})
			require.Equal(t, expectMap(history...), store.snapshot())
			require.Zero(t, store.resetCount())
		})
	}
}

// A torn Write reaching past the changelog's end is a Write of another
// history: the store is reset, as one whose position is past the end.
func TestTornStorePastEndIsReset(t *testing.T) {
	history := rebuildHistory()
	end := int64(len(history))
	c := newCluster(t, 1, clTopic)
	produce(t, newProducer(t, c), clTopic, 0, history...)
	store := &tornStore{fakeStore: newFakeStore(), target: end + 10}
	require.NoError(t, store.Write([]statestore.Entry{kv("stale-a", "new")}, 20))
	r := newReader(t, c, nil)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore, Task: "0_0"}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	require.Equal(t, 1, store.resetCount())
	require.Equal(t, expectMap(history...), store.snapshot())
}
