package topology

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
)

// The string fast paths must behave exactly as the generic paths through
// serde.String do, Kafka nulls and empty strings included.
func TestStringFastPathsMatchGeneric(t *testing.T) {
	b := NewBuilder()
	src := addSource(b, TopicRef{Name: "s"}, serde.String, serde.String, options{})
	sink := addSink(b, src, TopicRef{Name: "o"}, serde.String, serde.String, options{})
	// Wrapping the serde hides it from isStringSerde: the generic path.
	wrapped := serde.Funcs[string]{EncodeFn: serde.String.Encode, DecodeFn: serde.String.Decode}
	gsrc := addSource(b, TopicRef{Name: "g"}, wrapped, wrapped, options{})
	gsink := addSink(b, gsrc, TopicRef{Name: "go"}, wrapped, wrapped, options{})
	require.True(t, isStringSerde(serde.String))
	require.False(t, isStringSerde[string](wrapped))
	require.False(t, isStringSerde(serde.Bytes))

	cases := map[string]struct{ key, value []byte }{
		"both null":       {nil, nil},
		"null key":        {nil, []byte("v")},
		"null value":      {[]byte("k"), nil},
		"equal":           {[]byte("word"), []byte("word")},
		"different":       {[]byte("key"), []byte("a value")},
		"empty key":       {[]byte{}, []byte("v")},
		"both empty":      {[]byte{}, []byte{}},
		"empty value":     {[]byte("k"), []byte{}},
		"same length":     {[]byte("abc"), []byte("abd")},
		"value is prefix": {[]byte("abc"), []byte("ab")},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := graph.InputRecord{Topic: "s", Key: c.key, Value: c.value}
			got, err := src.decode(in)
			require.NoError(t, err)
			want, err := gsrc.decode(in)
			require.NoError(t, err)
			require.Equal(t, want, got)

			k, v, err := sink.encode(got)
			require.NoError(t, err)
			wk, wv, err := gsink.encode(want)
			require.NoError(t, err)
			require.Equal(t, wk, k)
			require.Equal(t, wv, v)
			require.Equal(t, wk == nil, k == nil, "null key")
			require.Equal(t, wv == nil, v == nil, "null value")
			// The key must not reach into the value's bytes: appending to
			// it may not overwrite them.
			if k != nil && v != nil && len(v) > 0 && len(k) > 0 && &k[0] != &v[0] {
				_ = append(k, 'x')
				require.Equal(t, wv, v)
			}
		})
	}
}

// A source of serde.Bytes keys and values decodes them as the generic
// path through serde.Bytes does, Kafka nulls and empty slices included,
// with one copy for both: appending to the key leaves the value alone, and
// nothing written to them reaches the input.
func TestBytesSourceMatchesGeneric(t *testing.T) {
	b := NewBuilder()
	src := addSource(b, TopicRef{Name: "s"}, serde.Bytes, serde.Bytes, options{})
	wrapped := serde.Funcs[[]byte]{EncodeFn: serde.Bytes.Encode, DecodeFn: serde.Bytes.Decode}
	gsrc := addSource(b, TopicRef{Name: "g"}, wrapped, wrapped, options{})
	for name, c := range map[string]struct{ key, value []byte }{
		"both null":   {nil, nil},
		"null key":    {nil, []byte("v")},
		"null value":  {[]byte("k"), nil},
		"empty key":   {[]byte{}, []byte("v")},
		"both empty":  {[]byte{}, []byte{}},
		"empty value": {[]byte("k"), []byte{}},
		"different":   {[]byte("key"), []byte("a value")},
	} {
		t.Run(name, func(t *testing.T) {
			in := graph.InputRecord{Topic: "s", Key: c.key, Value: c.value}
			got, err := src.decode(in)
			require.NoError(t, err)
			want, err := gsrc.decode(in)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, want.key == nil, got.key == nil)
			k, v := got.key.([]byte), got.value.([]byte)
			if len(k) > 0 {
				_ = append(k, 'x')
				k[0]++
				require.Equal(t, want.value, got.value, "the key reaches into the value")
				require.Equal(t, c.key[0]+1, k[0])
				require.NotEqual(t, c.key[0], k[0], "the key is the input's")
			}
			if len(v) > 0 {
				v[0]++
				require.NotEqual(t, c.value[0], v[0], "the value is the input's")
			}
		})
	}
	in := graph.InputRecord{Topic: "s", Key: []byte("key"), Value: []byte("value")}
	generic := testing.AllocsPerRun(100, func() { _, _ = gsrc.decode(in) })
	require.Equal(t, generic-1, testing.AllocsPerRun(100, func() { _, _ = src.decode(in) }), "one copy for key and value")
}

func TestBoxReusesIdenticalStrings(t *testing.T) {
	s := "hello world"
	boxed := any(s)
	require.Equal(t, s, box(s, 1, boxed))
	require.Zero(t, testing.AllocsPerRun(100, func() { boxSink = box(s, 1, boxed) }))

	// Equal content in other bytes, a substring, or another type: boxed anew.
	other := string([]byte(s))
	require.Equal(t, other, box(other, boxed))
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { boxSink = box(other, boxed) }))
	require.Equal(t, "hello", box(s[:5], boxed))
	require.Equal(t, 7, box(7, boxed))
}

var boxSink any

// A held update is found by the cache slot of its key; a slot that holds
// another key than the table remembers (the two fell out of step) adds an
// update rather than overwrite the other key's.
func TestTableUpdatesBySlot(t *testing.T) {
	c := &nodeInstance{node: &node{}, task: &taskGraph{buffered: true}, children: []*nodeInstance{{}}}
	var u tableUpdates
	emit := func(slot int, key string, v int64) {
		t.Helper()
		_, err := u.emitAt(c, slot, []byte(key), false, record{key: key, value: v})
		require.NoError(t, err)
	}
	held := func() []string {
		var out []string
		for i := range u.held.n {
			r := u.held.at(i).r
			out = append(out, r.key.(string)+"="+strconv.FormatInt(r.value.(int64), 10))
		}
		return out
	}
	emit(0, "a", 1)
	emit(1, "b", 1)
	emit(0, "a", 2)
	require.Equal(t, []string{"a=2", "b=1"}, held())
	emit(0, "c", 1)
	emit(0, "c", 2)
	emit(1, "b", 2)
	require.Equal(t, []string{"a=2", "b=2", "c=2"}, held())
	require.Len(t, c.task.holding, 1)
	c.task.Discard()
	require.Empty(t, held())
	emit(3, "d", 1)
	require.Equal(t, []string{"d=1"}, held())
}

// Held updates span several chunks: each key keeps one update, the latest,
// in the order keys were first updated, by key and by slot alike, and a
// discard leaves nothing behind for the next interval.
func TestTableUpdatesAcrossChunks(t *testing.T) {
	const keys = 3*chunkLen + 7
	for _, bySlot := range []bool{false, true} {
		c := &nodeInstance{node: &node{}, task: &taskGraph{buffered: true}, children: []*nodeInstance{{}}}
		var u tableUpdates
		emit := func(i int, v int64) {
			t.Helper()
			k := "k" + strconv.Itoa(i)
			r := record{key: k, value: v}
			if bySlot {
				_, err := u.emitAt(c, i, []byte(k), false, r)
				require.NoError(t, err)
			} else {
				require.NoError(t, u.emit(c, []byte(k), r))
			}
		}
		for round := range int64(3) {
			for i := range keys {
				emit(i, round)
			}
		}
		require.Equal(t, keys, u.held.n, "bySlot=%v", bySlot)
		for i := range keys {
			r := u.held.at(i).r
			require.Equal(t, "k"+strconv.Itoa(i), r.key, "bySlot=%v", bySlot)
			require.Equal(t, int64(2), r.value, "bySlot=%v", bySlot)
		}
		require.Len(t, c.task.holding, 1)
		c.task.Discard()
		require.Zero(t, u.held.n)
		require.Empty(t, u.held.chunks)
		emit(5, 9)
		require.Equal(t, 1, u.held.n)
		require.Equal(t, int64(9), u.held.at(0).r.value)
	}
}

// A table nothing reads downstream (its store is only queried) holds no
// updates between flushes, however many keys it writes.
func TestChildlessTableHoldsNoUpdates(t *testing.T) {
	c := &nodeInstance{node: &node{}, task: &taskGraph{buffered: true}}
	var u tableUpdates
	for i := range 3 * chunkLen {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, u.emit(c, []byte(k), record{key: k, value: int64(i)}))
		_, err := u.emitAt(c, i, []byte(k), false, record{key: k, value: int64(i)})
		require.NoError(t, err)
	}
	require.False(t, u.replace(c, []byte("k1"), int64(7), time.Time{}, nil))
	require.Zero(t, u.held.n)
	require.Empty(t, u.held.chunks)
	require.Empty(t, c.task.holding)
}

// A repartition source skips decoding only when every aggregation reading
// it is a count with a string key, and only when its value serde cannot
// fail to decode.
func TestKeyOnlyDecodeChoice(t *testing.T) {
	words := func(b *Builder, vs serde.Serde[string]) KGroupedStream[string, string] {
		return GroupBy(Stream(b, "in", serde.String, serde.String),
			func(_, v string) string { return v }, "words", serde.String, vs)
	}
	decodeOf := func(t *testing.T, b *Builder) graph.InputRecord {
		t.Helper()
		topo, err := b.Build()
		require.NoError(t, err)
		for _, n := range topo.nodes {
			if n.kind == kindSource && n.topic.Name == "words-repartition" {
				r, err := n.decode(graph.InputRecord{Key: []byte("k"), Value: []byte("v")})
				require.NoError(t, err)
				require.Equal(t, []byte("k"), r.srcKey)
				return graph.InputRecord{Key: keyBytes(r.key), Value: keyBytes(r.value)}
			}
		}
		t.Fatal("no repartition source")
		return graph.InputRecord{}
	}
	undecoded := graph.InputRecord{}
	decoded := graph.InputRecord{Key: []byte("k"), Value: []byte("v")}

	b := NewBuilder()
	words(b, serde.String).Count("c")
	require.Equal(t, undecoded, decodeOf(t, b))

	// A count reading partials undone by a second count: both plain
	// counts.
	b = NewBuilder()
	g := words(b, serde.String)
	g.Count("c1")
	g.Count("c2")
	require.Equal(t, undecoded, decodeOf(t, b))

	b = NewBuilder()
	g = words(b, serde.String)
	g.Count("c")
	g.Reduce(func(a, v string) string { return a + v }, "r")
	require.Equal(t, decoded, decodeOf(t, b), "a reducer reads the values")

	// A value serde that may fail: its errors must still be seen.
	b = NewBuilder()
	wrapped := serde.Funcs[string]{EncodeFn: serde.String.Encode, DecodeFn: serde.String.Decode}
	words(b, wrapped).Count("c")
	require.Equal(t, decoded, decodeOf(t, b))
}

func keyBytes(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	return nil
}

// Strings boxed in place behave as strings boxed one by one, and cost one
// allocation for all.
func TestStringBoxes(t *testing.T) {
	words := []string{"a", "", "bb", "a"}
	b := newStringBoxes(words)
	words[0] = "changed"
	for i, want := range []string{"a", "", "bb", "a"} {
		v := b.at(i)
		require.Equal(t, want, v)
		require.Equal(t, any(want), v, "== as interfaces")
		s, ok := v.(string)
		require.True(t, ok)
		require.Equal(t, want, s)
		require.Equal(t, want, as[string](v))
		require.Equal(t, v, box(s, v), "box shares the in-place box")
	}
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		b := newStringBoxes(words)
		for i := range b {
			boxSink = b.at(i)
		}
	}))
}

// A table that holds its values unboxed gets each key's latest value at
// flush, across chunks, and nothing of a discarded interval.
func TestTableUpdatesHeldValues(t *testing.T) {
	const keys = 2*chunkLen + 3
	var out []string
	child := &nodeInstance{node: &node{kind: kindProcessor}, fn: func(_ *nodeInstance, r record) error {
		out = append(out, r.key.(string)+"="+strconv.FormatInt(r.value.(int64), 10))
		return nil
	}}
	c := &nodeInstance{node: &node{}, task: &taskGraph{buffered: true}, children: []*nodeInstance{child}}
	child.task = c.task
	vals := new(valueBuf[int64])
	u := tableUpdates{values: vals}
	emit := func(i int, v int64) {
		t.Helper()
		k := "k" + strconv.Itoa(i)
		pos, err := u.emitAt(c, i, []byte(k), false, record{key: k})
		require.NoError(t, err)
		vals.set(pos, v)
	}
	for round := range int64(3) {
		for i := range keys {
			emit(i, 1000*round+int64(i))
		}
	}
	require.NoError(t, u.flush(c))
	require.Len(t, out, keys)
	for i, s := range out {
		require.Equal(t, "k"+strconv.Itoa(i)+"="+strconv.Itoa(2000+i), s)
	}
	out = nil
	emit(5, 1)
	c.task.Discard()
	emit(7, 2)
	require.NoError(t, u.flush(c))
	require.Equal(t, []string{"k7=2"}, out)
}

// The string sink hands on the strings' own bytes: no allocation, and an
// empty string stays an empty value, not a null.
func TestEncodeStringsCopiesNothing(t *testing.T) {
	r := record{key: "word", value: "a longer value"}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _, _ = encodeStrings(r) }))
	k, v, err := encodeStrings(record{key: "", value: ""})
	require.NoError(t, err)
	require.NotNil(t, k)
	require.NotNil(t, v)
	require.Empty(t, k)
	require.Empty(t, v)
}
