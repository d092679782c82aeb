package iq

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKeyRangeContains(t *testing.T) {
	cases := []struct {
		name string
		rng  KeyRange
		in   []string
		out  []string
	}{
		{"closed", KeyRange{From: []byte("b"), To: []byte("d")}, []string{"b", "bz", "c"}, []string{"a", "d", "da"}},
		{"open start", KeyRange{To: []byte("b")}, []string{"", "a", "az"}, []string{"b", "c"}},
		{"open end", KeyRange{From: []byte("b")}, []string{"b", "zzz"}, []string{"a", ""}},
		{"every key", KeyRange{}, []string{"", "a", "\xff"}, nil},
		{"prefix", KeyRange{Prefix: []byte("ab")}, []string{"ab", "abc", "ab\xff"}, []string{"a", "ac", "b", "xab"}},
	}
	for _, c := range cases {
		for _, k := range c.in {
			require.True(t, c.rng.Contains([]byte(k)), "%s holds %q", c.name, k)
		}
		for _, k := range c.out {
			require.False(t, c.rng.Contains([]byte(k)), "%s does not hold %q", c.name, k)
		}
	}
	// A store's Range over a prefix's bounds covers exactly its keys.
	for _, c := range []struct{ prefix, end string }{{"ab", "ac"}, {"a\xff", "b"}, {"\xff\xff", ""}} {
		from, to := (&KeyRange{Prefix: []byte(c.prefix)}).bounds()
		require.Equal(t, c.prefix, string(from))
		require.Equal(t, c.end, string(to), "end of prefix %q", c.prefix)
	}
	require.ErrorIs(t, (&KeyRange{From: []byte("b"), To: []byte("b")}).validate(), ErrInvalidQuery)
	require.ErrorIs(t, (&KeyRange{From: []byte("c"), To: []byte("b")}).validate(), ErrInvalidQuery)
	require.ErrorIs(t, (&KeyRange{From: []byte("a"), Prefix: []byte("a")}).validate(), ErrInvalidQuery)
	require.NoError(t, (&KeyRange{From: []byte("a"), To: []byte("b")}).validate())
}

// The resume token names every partition's position, reads back to the
// same positions, and refuses what it cannot read rather than start a
// partition somewhere else.
func TestRangeResumeToken(t *testing.T) {
	r := RangeResume{2: FromNow, 0: 41, 1: FromStart}
	require.Equal(t, "v1:0=41,1=-1,2=now", r.String())
	back, err := ParseRangeResume(r.String())
	require.NoError(t, err)
	require.Equal(t, r, back)
	empty, err := ParseRangeResume("v1:")
	require.NoError(t, err)
	require.Empty(t, empty)
	for _, bad := range []string{"", "0=41", "v2:0=41", "v1:0=41,0=42", "v1:0=-2", "v1:x=1", "v1:0", "v1:-1=3", "v1:0=start"} {
		_, err := ParseRangeResume(bad)
		require.ErrorIs(t, err, ErrInvalidQuery, "token %q", bad)
	}

	starts, err := startsOf([]int32{0, 1}, nil, FromStart)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: FromStart, 1: FromStart}, starts)
	_, err = startsOf([]int32{0, 1}, nil, 7)
	require.ErrorIs(t, err, ErrInvalidQuery, "a single position means nothing across partitions")
	starts, err = startsOf([]int32{1}, RangeResume{0: 3, 1: 9}, FromNow)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{1: 9}, starts)
	_, err = startsOf([]int32{0, 1, 2}, RangeResume{0: 3, 1: 9}, FromNow)
	require.ErrorIs(t, err, ErrInvalidQuery, "a token that leaves out a partition")
}

// feedKeys drains a feed and returns its changes as key@position.
func feedKeys(f *feed) []string {
	updates, _, _ := takeAll(f)
	var out []string
	for _, u := range updates {
		out = append(out, string(u.Key)+"@"+strconv.FormatInt(u.Position, 10))
	}
	return out
}

// takeAll takes what a feed of any kind holds, as updates of their
// changelog keys.
func takeAll(f *feed) (updates []Update, skipped, slow bool) {
	if f.sub != nil {
		taken, skipped, slow, _ := f.takeUpdates(nil)
		for _, u := range taken {
			updates = append(updates, *u)
		}
		return updates, skipped, slow
	}
	changes, skipped, slow, _ := f.take(nil)
	for _, b := range changes {
		updates = append(updates, updateOf(b.c, f.host, f.pk.partition, b.info, f.timestamped))
	}
	return updates, skipped, slow
}

// A hub hands each change of a partition to the range and prefix watches
// that hold its key, in changelog order, beside the key watches; another
// partition's changes reach none of them.
func TestHubPublishesToRanges(t *testing.T) {
	var h Hub
	r := &fakeReplica{info: ReplicaInfo{Store: "s", Partition: 0, Role: RoleActive, Position: 100}}
	opts := WatchOptions{Staleness: AnyStaleness()}
	pk := partKey{"s", 0}
	rng := newFeed(pk, nil, &KeyRange{From: []byte("b"), To: []byte("d")}, opts)
	prefix := newFeed(pk, nil, &KeyRange{Prefix: []byte("c")}, opts)
	key := newFeed(pk, []byte("c1"), nil, opts)
	other := newFeed(partKey{"s", 1}, nil, &KeyRange{}, opts)
	for _, f := range []*feed{rng, prefix, key, other} {
		h.subscribe(f, r)
	}
	require.True(t, h.Watching("s"))
	ch := func(k string, pos int64) Change { return Change{Key: []byte(k), Value: []byte("v"), Position: pos} }
	// What the dispatcher does with what Publish queued.
	publish := func(store string, p int32, changes ...Change) {
		h.deliver([]published{{partKey{store, p}, changes}})
	}
	publish("s", 0, ch("a", 10), ch("b", 11), ch("c1", 12), ch("d", 13), ch("c2", 14), ch("bb", 15))
	publish("t", 0, ch("b", 16))
	require.Equal(t, []string{"b@11", "c1@12", "c2@14", "bb@15"}, feedKeys(rng))
	require.Equal(t, []string{"c1@12", "c2@14"}, feedKeys(prefix))
	require.Equal(t, []string{"c1@12"}, feedKeys(key))
	require.Empty(t, feedKeys(other))

	h.unsubscribe(rng)
	h.unsubscribe(rng) // twice is harmless
	publish("s", 0, ch("b", 17), ch("c1", 18))
	require.Empty(t, feedKeys(rng))
	require.Equal(t, []string{"c1@18"}, feedKeys(prefix))
	require.Equal(t, []string{"c1@18"}, feedKeys(key))
	for _, f := range []*feed{prefix, key, other} {
		h.unsubscribe(f)
	}
	require.False(t, h.HasWatchers())
	require.False(t, h.Watching("s"))
}

// A coalescing range feed keeps the latest change of each key, in
// changelog order; once its reader is behind on more keys than the buffer
// holds it ends as too slow.
func TestRangeFeedCoalescesPerKey(t *testing.T) {
	f := newFeed(partKey{"s", 0}, nil, &KeyRange{}, WatchOptions{Buffer: 3, Coalesce: true})
	info := &ReplicaInfo{}
	for i, k := range []string{"a", "b", "a", "c", "b", "a"} {
		f.offer(Change{Key: []byte(k), Position: int64(10 + i)}, info)
	}
	changes, skipped, slow, _ := f.take(nil)
	require.True(t, skipped)
	require.False(t, slow)
	var got []string
	for _, b := range changes {
		got = append(got, string(b.c.Key)+"@"+strconv.FormatInt(b.c.Position, 10))
	}
	require.Equal(t, []string{"c@13", "b@14", "a@15"}, got)

	for i, k := range []string{"a", "b", "c", "d"} {
		f.offer(Change{Key: []byte(k), Position: int64(20 + i)}, info)
	}
	_, _, slow, _ = f.take(nil)
	require.True(t, slow, "four keys behind a buffer of three")

}

// Publish queues what it is given and returns; the watches receive every
// batch, in the order of the calls, with the replica's description.
func TestHubPublishQueuesInOrder(t *testing.T) {
	var h Hub
	r := &fakeReplica{info: ReplicaInfo{Store: "s", Partition: 0, Role: RoleStandby, Position: 1000}}
	key := newFeed(partKey{"s", 0}, []byte("k"), nil, WatchOptions{Buffer: 10_000})
	rng := newFeed(partKey{"s", 0}, nil, &KeyRange{Prefix: []byte("k")}, WatchOptions{Buffer: 10_000})
	h.subscribe(key, r)
	h.subscribe(rng, r)
	defer h.unsubscribe(key)
	defer h.unsubscribe(rng)
	const n = 500
	for i := range int64(n) {
		h.Publish("s", 0, []Change{{Key: []byte("k"), Position: 2 * i}, {Key: []byte("other"), Position: 2*i + 1}})
	}
	for _, f := range []*feed{key, rng} {
		var got []int64
		deadline := time.After(10 * time.Second)
		for len(got) < n {
			updates, _, slow := takeAll(f)
			require.False(t, slow)
			for _, u := range updates {
				require.Equal(t, RoleStandby, u.Provenance.Role)
				got = append(got, u.Position)
			}
			if len(got) < n {
				select {
				case <-f.notify:
				case <-deadline:
					t.Fatalf("%d of %d changes delivered", len(got), n)
				}
			}
		}
		for i, pos := range got {
			require.Equal(t, int64(2*i), pos)
		}
	}
}

// Each kind of store a watch does not follow is refused as an invalid
// query that names the watch that does, if any.
func TestWatchOfAnotherKindOfStore(t *testing.T) {
	b := newFakeBackend("h", map[string]int32{"kv": 1, "win": 1, "sess": 1, "ver": 1})
	b.layouts = map[string]StoreLayout{"win": {Kind: KindWindow}, "sess": {Kind: KindSession}, "ver": {Kind: KindVersioned}}
	q := NewQuerier(b)
	for _, c := range []struct {
		store string
		want  StoreKind
		says  string
	}{
		{"win", KindKeyValue, "watch a key's windows"},
		{"kv", KindWindow, "watch it by key, range or prefix"},
		{"sess", KindKeyValue, "session store: watches follow key-value and window stores only"},
		{"ver", KindWindow, "versioned store: watches follow key-value and window stores only"},
	} {
		_, err := q.watchKind(c.store, c.want)
		require.ErrorIs(t, err, ErrInvalidQuery, c.store)
		require.ErrorContains(t, err, c.says)
	}
	_, err := q.watchKind("kv", KindKeyValue)
	require.NoError(t, err)
	_, err = q.watchKind("nope", KindKeyValue)
	require.ErrorIs(t, err, ErrUnknownStore)
}
