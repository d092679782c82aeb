package topology_test

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// sjRec is one input of the stream-join reference.
type sjRec struct {
	right bool
	key   string
	ts    int64
	value string
	seq   int
}

// sjOut is one output: value "<left>|<right>" ("-" for a missing side),
// stamped ts.
type sjOut struct {
	key, value string
	ts         int64
}

// streamJoinReference replays recs through Kafka Streams 3.9's rules,
// computed by brute force: it returns, for each input, what the join
// should emit while processing it. Stream time is the latest time of
// either side. A record joins the other side's records of its key in its
// window that the other side still keeps: those at least span-1 behind
// that side's latest record. An outer side's unmatched record is emitted
// at once if its window had passed (t+reach < stream time), else kept; the
// kept ones are emitted, in order of time, right before left, then key,
// by a record at stream time, once past t+reach+grace, with the scan cut
// short as Kafka Streams cuts it (the earliest time it tracks, and both
// sides found still open).
func streamJoinReference(recs []sjRec, before, after, grace int64, leftOuter, rightOuter bool) [][]sjOut {
	span := max(before+after+grace, 1)
	st := int64(-1)
	var kept []sjRec
	latest := map[bool]int64{false: -1, true: -1}
	type ukey struct {
		ts    int64
		right bool
		key   string
	}
	unmatched := map[ukey][]sjRec{}
	minTime := int64(math.MaxInt64)
	alone := func(u sjRec) string {
		if u.right {
			return "-|" + u.value
		}
		return u.value + "|-"
	}
	out := make([][]sjOut, len(recs))
	for i, r := range recs {
		st = max(st, r.ts)
		reach, back := after, before
		if r.right {
			reach, back = before, after
		}
		outer := r.right && rightOuter || !r.right && leftOuter
		if (leftOuter || rightOuter) && r.ts == st && minTime+reach+grace < st {
			var keys []ukey
			for k := range unmatched {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b ukey) int {
				switch {
				case a.ts != b.ts:
					return int(a.ts - b.ts)
				case a.right != b.right:
					if a.right {
						return -1
					}
					return 1
				}
				return strings.Compare(a.key, b.key)
			})
			minTime = math.MaxInt64
			open := map[bool]bool{}
			for _, k := range keys {
				minTime = k.ts
				if open[false] && open[true] {
					break
				}
				look := after
				if k.right {
					look = before
				}
				if k.ts+look+grace >= st {
					open[k.right] = true
					continue
				}
				for _, u := range unmatched[k] {
					out[i] = append(out[i], sjOut{u.key, alone(u), u.ts})
				}
				delete(unmatched, k)
			}
		}
		var partners []sjRec
		for _, a := range kept {
			if a.right != r.right && a.key == r.key && a.ts >= r.ts-back && a.ts <= r.ts+reach && a.ts > latest[a.right]-span {
				partners = append(partners, a)
			}
		}
		slices.SortStableFunc(partners, func(a, b sjRec) int { return int(a.ts - b.ts) })
		for _, p := range partners {
			delete(unmatched, ukey{p.ts, p.right, p.key})
			l, rt := r, p
			if r.right {
				l, rt = p, r
			}
			out[i] = append(out[i], sjOut{r.key, l.value + "|" + rt.value, max(r.ts, p.ts)})
		}
		if len(partners) == 0 && outer {
			if r.ts+reach < st {
				out[i] = append(out[i], sjOut{r.key, alone(r), r.ts})
			} else {
				minTime = min(minTime, r.ts)
				k := ukey{r.ts, r.right, r.key}
				unmatched[k] = append(unmatched[k], r)
			}
		}
		kept = append(kept, r)
		latest[r.right] = max(latest[r.right], r.ts)
	}
	return out
}

// TestStreamJoinsMatchReference feeds both sides of inner, left and outer
// windowed joins records out of order (some beyond grace, some at equal
// times) and compares what each input makes the join emit, values and
// timestamps, with the reference.
func TestStreamJoinsMatchReference(t *testing.T) {
	const before, after, grace = 100, 50, 200
	w := topology.JoinTimeDifference(0).Before(before * time.Millisecond).After(after * time.Millisecond).Grace(grace * time.Millisecond)
	show := func(v string, ok bool) string {
		if !ok {
			return "-"
		}
		return v
	}
	kinds := []struct {
		name                  string
		leftOuter, rightOuter bool
		join                  func(l, r topology.KStream[string, string]) topology.KStream[string, string]
	}{
		{"inner", false, false, func(l, r topology.KStream[string, string]) topology.KStream[string, string] {
			return topology.JoinStreams(l, r, func(lv, rv string) string { return lv + "|" + rv }, w, "j", serde.String, serde.String, serde.String)
		}},
		{"left", true, false, func(l, r topology.KStream[string, string]) topology.KStream[string, string] {
			return topology.LeftJoinStreams(l, r, func(lv, rv string, ok bool) string { return lv + "|" + show(rv, ok) }, w, "j", serde.String, serde.String, serde.String)
		}},
		{"outer", true, true, func(l, r topology.KStream[string, string]) topology.KStream[string, string] {
			return topology.OuterJoinStreams(l, r, func(lv string, lok bool, rv string, rok bool) string { return show(lv, lok) + "|" + show(rv, rok) },
				w, "j", serde.String, serde.String, serde.String)
		}},
	}
	for _, kind := range kinds {
		for seed := range uint64(5) {
			t.Run(kind.name+"/"+strconv.FormatUint(seed, 10), func(t *testing.T) {
				b := topology.NewBuilder()
				l := topology.Stream(b, "left", serde.String, serde.String)
				r := topology.Stream(b, "right", serde.String, serde.String)
				kind.join(l, r).To("out", serde.String, serde.String)
				d, _ := start(t, b)
				lin, rin := strIn(d, "left"), strIn(d, "right")
				out := topologytest.NewOutputTopic(d, "out", serde.String, serde.String)

				rng := rand.New(rand.NewPCG(seed, 21))
				var recs []sjRec
				for i := range 400 {
					ts := int64(1000 + i*10 + rng.IntN(400) - 300)
					if rng.IntN(10) == 0 && len(recs) > 0 {
						ts = recs[len(recs)-1].ts // equal times
					}
					recs = append(recs, sjRec{right: rng.IntN(2) == 0, key: "k" + strconv.Itoa(rng.IntN(3)), ts: ts, value: "v" + strconv.Itoa(i), seq: i})
				}
				want := streamJoinReference(recs, before, after, grace, kind.leftOuter, kind.rightOuter)
				for i, rec := range recs {
					in := lin
					if rec.right {
						in = rin
					}
					require.NoError(t, in.PipeAt(rec.key, rec.value, time.UnixMilli(rec.ts)))
					got, err := out.ReadRecords()
					require.NoError(t, err)
					var gotOut []sjOut
					for _, g := range got {
						gotOut = append(gotOut, sjOut{g.Key, g.Value, g.Timestamp.UnixMilli()})
					}
					require.Equal(t, want[i], gotOut, "input %d (%+v)", i, rec)
				}
				require.Zero(t, d.DroppedLate(), "a join drops no record as late")
			})
		}
	}
}

// TestStreamJoinRepartitionsRekeyedSide: a re-keyed side is written
// through <join>-left-repartition first and joined by its new key.
func TestStreamJoinRepartitionsRekeyedSide(t *testing.T) {
	b := topology.NewBuilder()
	l := topology.SelectKey(topology.Stream(b, "left", serde.String, serde.String), func(_, v string) string { return v[:1] })
	r := topology.Stream(b, "right", serde.String, serde.String)
	topology.JoinStreams(l, r, func(a, b string) string { return a + "|" + b }, topology.JoinTimeDifference(time.Second),
		"j", serde.String, serde.String, serde.String, topology.Named("lr")).To("out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Equal(t, []graph.Repartition{{Topic: topology.TopicRef{Name: "lr-left-repartition", Internal: true}, WriterSubTopology: 0}},
		graph.Of(topo).RepartitionTopics())
	require.NoError(t, strIn(d, "right").PipeAt("a", "r1", time.UnixMilli(1000)))
	require.NoError(t, strIn(d, "left").PipeAt("x", "apple", time.UnixMilli(1500)))
	require.NoError(t, strIn(d, "left").PipeAt("y", "banana", time.UnixMilli(1500)))
	require.Equal(t, kvs[string, string]("a", "apple|r1"), readKVs(t, d, "out", serde.String, serde.String))
}

// TestStreamJoinKeylessRecords: a left join emits a left record without a
// key at once, joined with nothing (KIP-962), and an outer join does so for
// either side; an inner join, and a left join's right side, drop them.
func TestStreamJoinKeylessRecords(t *testing.T) {
	w := topology.JoinTimeDifference(10 * time.Millisecond)
	b := topology.NewBuilder()
	l := topology.Stream(b, "left", serde.String, serde.String)
	r := topology.Stream(b, "right", serde.String, serde.String)
	show := func(v string, ok bool) string {
		if !ok {
			return "-"
		}
		return v
	}
	topology.LeftJoinStreams(l, r, func(lv, rv string, ok bool) string { return lv + "|" + show(rv, ok) }, w, "lj", serde.String, serde.String, serde.String).
		To("left-out", serde.String, serde.String)
	topology.OuterJoinStreams(l, r, func(lv string, lok bool, rv string, rok bool) string { return show(lv, lok) + "|" + show(rv, rok) }, w, "oj", serde.String, serde.String, serde.String).
		To("outer-out", serde.String, serde.String)
	topology.JoinStreams(l, r, func(lv, rv string) string { return lv + "|" + rv }, w, "ij", serde.String, serde.String, serde.String).
		To("inner-out", serde.String, serde.String)
	d, _ := start(t, b)
	require.NoError(t, d.Pipe("left", nil, []byte("a"), time.UnixMilli(100)))
	require.NoError(t, d.Pipe("right", nil, []byte("b"), time.UnixMilli(100)))
	read := func(topic string) []string {
		var got []string
		for _, rec := range d.ReadOutput(topic) {
			require.Nil(t, rec.Key)
			got = append(got, string(rec.Value)+"@"+strconv.FormatInt(rec.Timestamp.UnixMilli(), 10))
		}
		return got
	}
	require.Equal(t, []string{"a|-@100"}, read("left-out"))
	require.Equal(t, []string{"a|-@100", "-|b@100"}, read("outer-out"))
	require.Empty(t, read("inner-out"))
}

// leftJoinRuns builds a left join of "in" with "right" (10 ms windows,
// store "j", "l|r" or "l|null" to "out") with opts, and returns its fake
// environment, a function taking what it sent so far as "value@ms", and one
// running records through a task of it started afresh over the same stores,
// as a restart would.
func leftJoinRuns(t *testing.T, opts ...topology.Option) (*fakeEnv, func() []string, func(...graph.InputRecord)) {
	t.Helper()
	b := topology.NewBuilder()
	topology.LeftJoinStreams(topology.Stream(b, "in", serde.String, serde.String), topology.Stream(b, "right", serde.String, serde.String),
		func(l, r string, found bool) string {
			if !found {
				r = "null"
			}
			return l + "|" + r
		}, topology.JoinTimeDifference(10*time.Millisecond), "j", serde.String, serde.String, serde.String, opts...).
		To("out", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)
	env := newFakeEnv(0)
	sent := func() []string {
		var out []string
		for _, r := range env.sent {
			out = append(out, string(r.Value)+"@"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
		}
		env.sent = nil
		return out
	}
	run := func(recs ...graph.InputRecord) {
		g, err := graph.Of(topo).NewTaskGraph(0, env)
		require.NoError(t, err)
		for _, r := range recs {
			require.NoError(t, g.Process(r))
		}
		require.NoError(t, g.Close())
	}
	return env, sent, run
}

// A left join's task started again over its stores knows no stream time
// until its next record, as Kafka Streams' join, whose stream time lives
// in memory: an unmatched record behind the time reached before the
// restart waits for its window to pass again. With RestoreJoinStreamTime
// the join starts from the time its stores reached and emits it at once.
func TestStreamJoinStreamTimeAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []topology.Option
		wantNow []string // outputs of the late record
	}{
		{name: "default", wantNow: nil},
		{name: "restored", opts: []topology.Option{topology.RestoreJoinStreamTime()}, wantNow: []string{"c|null@50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, sent, run := leftJoinRuns(t, tc.opts...)
			rec := func(v string, ms int64) graph.InputRecord {
				return graph.InputRecord{Topic: "in", Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(ms)}
			}
			run(rec("a", 100), rec("b", 200))
			require.Equal(t, []string{"a|null@100"}, sent(), "a's window passed at stream time 200")

			// Restarted: c at 50 is behind the 200 reached before.
			run(rec("c", 50))
			require.Equal(t, tc.wantNow, sent())
			run(rec("d", 300))
			want := []string{"b|null@200"}
			if tc.wantNow == nil {
				want = []string{"c|null@50", "b|null@200"}
			}
			require.Equal(t, want, sent(), "stream time 300 passes the windows of what waited")
		})
	}
}

// Unmatched left records that builds before the right-before-left order
// kept in "<store>-outer" under side byte 0 (time, 00, key; the value
// list as now) are still found: a partner arriving after an upgrade
// deletes its record there, and a record without one is emitted when its
// window passes, once.
func TestStreamJoinUnmatchedOfOlderStores(t *testing.T) {
	env, sent, run := leftJoinRuns(t)
	rec := func(topic, k, v string, ms int64) graph.InputRecord {
		return graph.InputRecord{Topic: topic, Key: []byte(k), Value: []byte(v), Timestamp: time.UnixMilli(ms)}
	}
	run(rec("in", "a", "a", 100), rec("in", "x", "x", 100))
	require.Empty(t, sent())

	// Rewrite both unmatched entries as the older builds wrote them.
	outer := env.stores["j-outer"]
	require.Len(t, outer.m, 2)
	for k, v := range maps.Clone(outer.m) {
		require.Equal(t, byte(2), k[8], "a left record's side byte")
		old := []byte(k)
		old[8] = 0
		delete(outer.m, k)
		outer.m[string(old)] = v
	}

	run(rec("right", "a", "b", 105), rec("in", "z", "z", 300))
	require.Equal(t, []string{"a|b@105", "x|null@100"}, sent(), "a found its partner; x's window passed")
	run(rec("in", "z", "z2", 400))
	require.Equal(t, []string{"z|null@300"}, sent(), "neither older entry is emitted again")
}
