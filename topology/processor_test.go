package topology_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// dedupe forwards the first record of each key, remembering keys in a
// store, and sends repeats to the child named "dups".
type dedupe struct {
	ctx  topology.ProcessorContext[string, string]
	seen *topology.KeyValueStore[string, int64]
}

func (p *dedupe) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	var err error
	p.seen, err = topology.GetKeyValueStore(ctx, "seen", serde.String, serde.Int64)
	return err
}

func (p *dedupe) Process(rec topology.Record[string, string]) error {
	n, _, err := p.seen.Get(rec.Key)
	if err != nil {
		return err
	}
	if err := p.seen.Put(rec.Key, n+1); err != nil {
		return err
	}
	if n > 0 {
		return p.ctx.ForwardTo("dups", topology.Record[string, string]{Key: rec.Key, Value: rec.Value + "#" + strconv.FormatInt(n, 10)})
	}
	return p.ctx.ForwardTo("firsts", rec)
}

func (p *dedupe) Close() error { return nil }

func TestProcessorForwardsToNamedChildrenAndUsesStores(t *testing.T) {
	b := topology.NewBuilder()
	b.AddStore(topology.StoreInfo{Name: "seen", Persistent: true, Logged: true})
	s := topology.Stream(b, "in", serde.String, serde.String)
	out := topology.Process(s, "dedupe", func() topology.Processor[string, string, string, string] { return &dedupe{} }, "seen")
	out.Filter(func(string, string) bool { return true }, topology.Named("firsts")).To("firsts", serde.String, serde.String)
	out.To("dups", serde.String, serde.String, topology.Named("dups"))
	d, topo := start(t, b)
	require.Equal(t, []topology.StoreInfo{{Name: "seen", Persistent: true, Logged: true}}, graph.Of(topo).SubTopologies()[0].Stores)

	in := strIn(d, "in")
	ts := time.UnixMilli(5000)
	require.NoError(t, in.PipeAt("a", "1", ts))
	require.NoError(t, in.PipeAt("b", "2", ts))
	require.NoError(t, in.PipeAt("a", "3", ts))
	require.NoError(t, in.PipeAt("a", "4", ts))
	require.Equal(t, kvs[string, string]("a", "1", "b", "2"), readKVs(t, d, "firsts", serde.String, serde.String))
	dups, err := topologytest.NewOutputTopic(d, "dups", serde.String, serde.String).ReadRecords()
	require.NoError(t, err)
	require.Len(t, dups, 2)
	require.Equal(t, "3#1", dups[0].Value)
	require.Equal(t, ts, dups[0].Timestamp, "a forwarded record without a timestamp inherits the input's")
}

// funcProc is a Processor built from functions, for tests.
type funcProc[KIn, VIn, KOut, VOut any] struct {
	init    func(ctx topology.ProcessorContext[KOut, VOut]) error
	process func(ctx topology.ProcessorContext[KOut, VOut], rec topology.Record[KIn, VIn]) error
	close   func() error
	ctx     topology.ProcessorContext[KOut, VOut]
}

func (p *funcProc[KIn, VIn, KOut, VOut]) Init(ctx topology.ProcessorContext[KOut, VOut]) error {
	p.ctx = ctx
	if p.init != nil {
		return p.init(ctx)
	}
	return nil
}

func (p *funcProc[KIn, VIn, KOut, VOut]) Process(rec topology.Record[KIn, VIn]) error {
	if p.process != nil {
		return p.process(p.ctx, rec)
	}
	return nil
}

func (p *funcProc[KIn, VIn, KOut, VOut]) Close() error {
	if p.close != nil {
		return p.close()
	}
	return nil
}

type strCtx = topology.ProcessorContext[string, string]
type strRec = topology.Record[string, string]

func TestProcessorContextErrors(t *testing.T) {
	b := topology.NewBuilder()
	b.AddStore(topology.StoreInfo{Name: "mine"})
	b.AddStore(topology.StoreInfo{Name: "other"})
	s := topology.Stream(b, "in", serde.String, serde.String)
	var errs []error
	topology.Process(s, "p", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{process: func(ctx strCtx, rec strRec) error {
			_, err := ctx.Store("other")
			errs = append(errs, err)
			_, err = ctx.Store("mine")
			errs = append(errs, err)
			errs = append(errs, ctx.ForwardTo("nobody", rec))
			_, err = ctx.Schedule(0, topology.StreamTime, func(time.Time) error { return nil })
			errs = append(errs, err)
			return nil
		}}
	}, "mine")
	topology.Process(s, "q", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{}
	}, "other")
	d, _ := start(t, b)
	require.NoError(t, strIn(d, "in").Pipe("k", "v"))
	require.Len(t, errs, 4)
	require.ErrorContains(t, errs[0], `processor "p" did not declare store "other"`)
	require.NoError(t, errs[1])
	require.ErrorContains(t, errs[2], `processor "p" has no child named "nobody"`)
	require.ErrorContains(t, errs[3], "interval must be positive")
}

func TestRecordMetadata(t *testing.T) {
	type seen struct {
		md topology.RecordMetadata
		ok bool
	}
	var got []seen
	var inInit, inPunct bool = true, true
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	rs := topology.SelectKey(s, func(_, v string) string { return v })
	track := func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{
			init: func(ctx strCtx) error {
				_, inInit = ctx.RecordMetadata()
				_, err := ctx.Schedule(time.Second, topology.WallClockTime, func(time.Time) error {
					_, inPunct = ctx.RecordMetadata()
					return nil
				})
				return err
			},
			process: func(ctx strCtx, rec strRec) error {
				md, ok := ctx.RecordMetadata()
				got = append(got, seen{md, ok})
				require.Equal(t, "test-app", ctx.AppID())
				require.Contains(t, []string{"track-direct", "track-rep"}, ctx.NodeName())
				require.Equal(t, map[string]string{"track-direct": "0_0", "track-rep": "1_0"}[ctx.NodeName()], ctx.TaskID())
				require.Equal(t, int32(0), ctx.Partition())
				return nil
			},
		}
	}
	topology.Process(rs, "track-direct", track)
	// A processor downstream of the repartition topic sees that topic.
	rep := topology.GroupBy(s, func(_, v string) string { return v }, "r2", serde.String, serde.String).
		Count("c2").ToStream()
	topology.Process(topology.MapValues(rep, func(_ string, n int64) string { return strconv.FormatInt(n, 10) }), "track-rep", track)
	d, _ := start(t, b)

	ts := time.UnixMilli(42)
	hdrs := []topology.Header{{Key: "trace", Value: []byte("1")}}
	require.NoError(t, d.Pipe("in", []byte("k"), []byte("v"), ts, hdrs...))
	require.NoError(t, d.Pipe("in", []byte("k"), []byte("w"), ts.Add(time.Second)))
	require.NoError(t, d.AdvanceWallClock(time.Second))
	require.False(t, inInit, "no record metadata in Init")
	require.False(t, inPunct, "no record metadata in a punctuator")

	require.Len(t, got, 4)
	for _, g := range got {
		require.True(t, g.ok)
	}
	require.Equal(t, topology.RecordMetadata{Topic: "in", Partition: 0, Offset: 0, Timestamp: ts, Headers: hdrs}, got[0].md)
	// The repartition topic holds the raw record, headers and all.
	require.Equal(t, topology.RecordMetadata{Topic: "test-app-r2-repartition", Partition: 0, Offset: 0, Timestamp: ts, Headers: hdrs}, got[1].md)
	require.Equal(t, topology.RecordMetadata{Topic: "in", Partition: 0, Offset: 1, Timestamp: ts.Add(time.Second)}, got[2].md)
	require.Equal(t, int64(1), got[3].md.Offset)
	require.Equal(t, "test-app-r2-repartition", got[3].md.Topic)
}

func TestStreamTimePunctuation(t *testing.T) {
	var fired []time.Time
	var streamTimes []time.Time
	var cancel topology.Cancellable
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	out := topology.Process(s, "p", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{
			init: func(ctx strCtx) error {
				require.True(t, ctx.StreamTime().IsZero(), "stream time is unknown before the first record")
				var err error
				cancel, err = ctx.Schedule(10*time.Second, topology.StreamTime, func(ts time.Time) error {
					fired = append(fired, ts)
					return ctx.Forward(strRec{Key: "tick", Value: strconv.Itoa(len(fired))})
				})
				return err
			},
			process: func(ctx strCtx, rec strRec) error {
				streamTimes = append(streamTimes, ctx.StreamTime())
				return nil
			},
		}
	})
	out.To("ticks", serde.String, serde.String)
	d, _ := start(t, b)
	in := strIn(d, "in")
	at := func(sec int) time.Time { return time.Unix(int64(sec), 0) }

	require.NoError(t, d.AdvanceWallClock(time.Hour))
	require.Empty(t, fired, "stream time does not advance without records")

	for _, sec := range []int{100, 105, 103, 110, 145, 149} {
		require.NoError(t, in.PipeAt("k", "v", at(sec)))
	}
	// 100 fires at once (stream-time schedules are aligned to multiples of
	// the interval); 105 and the late 103 do not; 110 does; 145 fires once
	// for the three intervals it skipped; 149 does not.
	require.Equal(t, []time.Time{at(100), at(110), at(145)}, fired)
	require.Equal(t, []time.Time{at(100), at(105), at(105), at(110), at(145), at(149)}, streamTimes,
		"stream time is the largest timestamp seen")
	ticks, err := topologytest.NewOutputTopic(d, "ticks", serde.String, serde.String).ReadRecords()
	require.NoError(t, err)
	require.Len(t, ticks, 3)
	require.Equal(t, at(145), ticks[2].Timestamp, "records forwarded by a punctuator carry its time")

	cancel.Cancel()
	require.NoError(t, in.PipeAt("k", "v", at(200)))
	require.Len(t, fired, 3, "a cancelled punctuator does not fire")
}

func TestWallClockPunctuation(t *testing.T) {
	var fired []time.Time
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	topology.Process(s, "p", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{init: func(ctx strCtx) error {
			_, err := ctx.Schedule(time.Minute, topology.WallClockTime, func(ts time.Time) error {
				require.Equal(t, ctx.Now(), ts)
				fired = append(fired, ts)
				return nil
			})
			return err
		}}
	})
	d, _ := start(t, b)
	start := d.Now()

	require.NoError(t, d.AdvanceWallClock(30*time.Second))
	require.Empty(t, fired)
	require.NoError(t, strIn(d, "in").PipeAt("k", "v", time.Unix(1e9, 0)))
	require.Empty(t, fired, "stream time does not drive wall-clock punctuators")
	require.NoError(t, d.AdvanceWallClock(30*time.Second))
	require.Equal(t, []time.Time{start.Add(time.Minute)}, fired)
	require.NoError(t, d.AdvanceWallClock(5*time.Minute+10*time.Second))
	require.Len(t, fired, 2, "missed intervals fire once")
	require.NoError(t, d.AdvanceWallClock(45*time.Second))
	require.Len(t, fired, 2, "the schedule stays aligned to when it was made: next at 7m")
	require.NoError(t, d.AdvanceWallClock(5*time.Second))
	require.Equal(t, start.Add(7*time.Minute), fired[2])
}

func TestProcessorErrorsAndLifecycle(t *testing.T) {
	boom := errors.New("boom")
	var closed []string
	supplier := func(name string, initErr, procErr, punctErr error) func() topology.Processor[string, string, string, string] {
		return func() topology.Processor[string, string, string, string] {
			return &funcProc[string, string, string, string]{
				init: func(ctx strCtx) error {
					if punctErr != nil {
						if _, err := ctx.Schedule(time.Second, topology.WallClockTime, func(time.Time) error { return punctErr }); err != nil {
							return err
						}
					}
					return initErr
				},
				process: func(ctx strCtx, rec strRec) error {
					if procErr != nil {
						return procErr
					}
					return ctx.Forward(rec)
				},
				close: func() error { closed = append(closed, name); return nil },
			}
		}
	}
	build := func(initErr, procErr, punctErr error) *topology.Topology {
		b := topology.NewBuilder()
		s := topology.Stream(b, "in", serde.String, serde.String)
		a := topology.Process(s, "a", supplier("a", nil, nil, nil))
		topology.Process(a, "b", supplier("b", initErr, procErr, punctErr))
		topo, err := b.Build()
		require.NoError(t, err)
		return topo
	}

	t.Run("init error closes the processors already initialized", func(t *testing.T) {
		closed = nil
		_, err := topologytest.New(build(boom, nil, nil), topologytest.Config{})
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, `init processor "b"`)
		require.Equal(t, []string{"a"}, closed)
	})
	t.Run("process error names the node", func(t *testing.T) {
		closed = nil
		d, err := topologytest.New(build(nil, boom, nil), topologytest.Config{})
		require.NoError(t, err)
		err = strIn(d, "in").Pipe("k", "v")
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, `node "b"`)
		require.NoError(t, d.Close())
		require.NoError(t, d.Close())
		require.Equal(t, []string{"a", "b"}, closed, "Close closes every processor once")
		require.Error(t, strIn(d, "in").Pipe("k", "v"))
	})
	t.Run("punctuator error", func(t *testing.T) {
		d, err := topologytest.New(build(nil, nil, boom), topologytest.Config{})
		require.NoError(t, err)
		defer d.Close()
		err = d.AdvanceWallClock(time.Second)
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, `node "b": task 0_0: wall-clock punctuator: boom`)
	})
}

func TestEachTaskGetsItsOwnProcessorInstance(t *testing.T) {
	instances := 0
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	topology.Process(s, "p", func() topology.Processor[string, string, struct{}, struct{}] {
		instances++
		return &funcProc[string, string, struct{}, struct{}]{}
	})
	topo, err := b.Build()
	require.NoError(t, err)
	for p := range int32(3) {
		g, err := graph.Of(topo).NewTaskGraph(0, newFakeEnv(p))
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	require.Equal(t, 3, instances)

	b = topology.NewBuilder()
	topology.Process(topology.Stream(b, "in", serde.String, serde.String), "nil",
		func() topology.Processor[string, string, string, string] { return nil })
	topo, err = b.Build()
	require.NoError(t, err)
	_, err = graph.Of(topo).NewTaskGraph(0, newFakeEnv(0))
	require.ErrorContains(t, err, `processor "nil": supplier returned a nil processor`)
}

// TestPunctuatorOutputFlowsThroughRepartition checks that records a
// wall-clock punctuator emits reach later sub-topologies too.
func TestPunctuatorOutputFlowsThroughRepartition(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	beats := topology.Process(s, "heartbeat", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{init: func(ctx strCtx) error {
			_, err := ctx.Schedule(time.Second, topology.WallClockTime, func(time.Time) error {
				return ctx.Forward(strRec{Key: "beat", Value: "x"})
			})
			return err
		}}
	})
	beats.GroupByKey(serde.String, serde.String).Count("beats").ToStream().To("out", serde.String, serde.Int64)
	d, topo := start(t, b)
	require.Len(t, graph.Of(topo).SubTopologies(), 2, "Process may change keys, so grouping repartitions")
	require.NoError(t, d.AdvanceWallClock(time.Second))
	require.NoError(t, d.AdvanceWallClock(time.Second))
	require.Equal(t, kvs[string, int64]("beat", int64(1), "beat", int64(2)), readKVs(t, d, "out", serde.String, serde.Int64))
}

// enrich looks each record's value up in a global table, read only, and
// forwards "value|name" (or "value|?" when the table lacks it).
type enrich struct {
	g    topology.GlobalKTable[string, string]
	ctx  topology.ProcessorContext[string, string]
	view *topology.ReadOnlyKeyValueStore[string, string]
}

func (p *enrich) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	var err error
	if p.view, err = p.g.Open(ctx); err != nil {
		return err
	}
	rw, err := ctx.Store(p.g.StoreName())
	if err != nil {
		return err
	}
	if rw.Put([]byte("x"), []byte("y")) == nil || rw.Delete([]byte("x")) == nil {
		return errors.New("a processor wrote a global store")
	}
	return nil
}

func (p *enrich) Process(rec topology.Record[string, string]) error {
	name, found, err := p.view.Get(rec.Value)
	if err != nil {
		return err
	}
	if !found {
		name = "?"
	}
	return p.ctx.Forward(topology.Record[string, string]{Key: rec.Key, Value: rec.Value + "|" + name})
}

func (p *enrich) Close() error { return nil }

// TestProcessorReadsGlobalStore checks that a processor naming a global
// table's store among its stores reads it through GlobalKTable.Open, sees
// the table's later updates, and that the store stays out of every task's
// stores.
func TestProcessorReadsGlobalStore(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	g := topology.GlobalTable(b, "names", serde.String, serde.String, "names-global")
	topology.Process(s, "enrich", func() topology.Processor[string, string, string, string] { return &enrich{g: g} }, g.StoreName()).
		To("out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Empty(t, graph.Of(topo).SubTopologies()[0].Stores, "a global store belongs to no task")

	names := strIn(d, "names")
	in := strIn(d, "in")
	ts := time.UnixMilli(1000)
	require.NoError(t, names.PipeAt("c1", "Ann", ts))
	require.NoError(t, in.PipeAt("o1", "c1", ts))
	require.NoError(t, in.PipeAt("o2", "c2", ts))
	require.NoError(t, names.PipeAt("c2", "Bob", ts))
	require.NoError(t, in.PipeAt("o3", "c2", ts))
	require.Equal(t, kvs[string, string]("o1", "c1|Ann", "o2", "c2|?", "o3", "c2|Bob"), readKVs(t, d, "out", serde.String, serde.String))
	require.Equal(t, []string{"enrich"}, topo.Describe().GlobalStores[0].Readers)
}
