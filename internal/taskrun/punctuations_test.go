package taskrun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// streamTicker runs a stream-time punctuator every second of stream time.
type streamTicker struct {
	ctx topology.ProcessorContext[string, string]
}

func (p *streamTicker) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	_, err := ctx.Schedule(time.Second, topology.StreamTime, func(time.Time) error { return nil })
	return err
}

func (p *streamTicker) Process(rec topology.Record[string, string]) error { return p.ctx.Forward(rec) }
func (p *streamTicker) Close() error                                      { return nil }

func tickerTopology(t *testing.T, proc func() topology.Processor[string, string, string, string]) *topology.Topology {
	b := topology.NewBuilder()
	topology.Process(topology.Stream(b, "in", serde.String, serde.String), "tick", proc)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// An idle thread's passes ask none of its tasks to punctuate, however
// many it holds; a task is asked again when it takes input or when its
// earliest wall-clock punctuator is due, and only then.
func TestPunctuationsAskOnlyWhatChanged(t *testing.T) {
	const idle, ticking = 500, 3
	var tasks []*Active
	for range idle {
		f, _ := restoredActive(t, countTopology(t))
		tasks = append(tasks, f.a)
	}
	var tickers []*feeder
	for range ticking {
		f, _ := restoredActive(t, tickerTopology(t, func() topology.Processor[string, string, string, string] { return &ticker{} }))
		tickers = append(tickers, f)
		tasks = append(tasks, f.a)
	}
	owns := func(*Active) bool { return true }
	var p Punctuations
	for _, a := range tasks {
		p.Check(a) // each started running
	}
	now := time.Now()
	ran, err := p.Run(now, owns)
	require.NoError(t, err)
	require.Empty(t, ran)
	require.EqualValues(t, idle+ticking, p.Asked(), "a task that started running is asked once")

	next, ok := p.Next()
	require.True(t, ok)
	require.WithinDuration(t, now.Add(time.Minute), next, 5*time.Second, "the tickers' punctuators are due a minute after they were made")
	for i := range 100 {
		ran, err = p.Run(now.Add(time.Duration(i)*100*time.Millisecond), owns)
		require.NoError(t, err)
		require.Empty(t, ran)
	}
	require.EqualValues(t, idle+ticking, p.Asked(), "idle passes ask nobody")

	// Input for one task has it asked at the next pass, and it alone.
	tickers[0].pipe("k", []byte("v"), now)
	p.Check(tickers[0].a)
	_, err = p.Run(now.Add(20*time.Second), owns)
	require.NoError(t, err)
	require.EqualValues(t, idle+ticking+1, p.Asked())

	// The tickers are due: they, and only they, are asked and run.
	ran, err = p.Run(next.Add(time.Millisecond), owns)
	require.NoError(t, err)
	require.Len(t, ran, ticking)
	require.EqualValues(t, idle+2*ticking+1, p.Asked())
	again, ok := p.Next()
	require.True(t, ok)
	require.True(t, again.After(next), "rescheduled at their next minute: %v after %v", again, next)
	ran, err = p.Run(next.Add(2*time.Millisecond), owns)
	require.NoError(t, err)
	require.Empty(t, ran)
	require.EqualValues(t, idle+2*ticking+1, p.Asked())
}

// A task's stream-time punctuators are asked for once it took input; a
// task the caller no longer owns is not asked, and leaves the schedule.
func TestPunctuationsStreamTimeAndOwnership(t *testing.T) {
	f, _ := restoredActive(t, tickerTopology(t, func() topology.Processor[string, string, string, string] { return &streamTicker{} }))
	w, _ := restoredActive(t, tickerTopology(t, func() topology.Processor[string, string, string, string] { return &ticker{} }))
	owned := map[*Active]bool{f.a: true, w.a: true}
	owns := func(a *Active) bool { return owned[a] }
	var p Punctuations
	p.Check(f.a)
	p.Check(w.a)
	now := time.Now()
	ran, err := p.Run(now, owns)
	require.NoError(t, err)
	require.Empty(t, ran, "no stream time yet")

	f.pipe("k", []byte("v"), time.Unix(10, 0))
	p.Check(f.a)
	ran, err = p.Run(now, owns)
	require.NoError(t, err)
	require.Equal(t, []*Active{f.a}, ran)
	require.True(t, f.a.CommitNeeded())

	delete(owned, w.a)
	asked := p.Asked()
	ran, err = p.Run(now.Add(2*time.Minute), owns)
	require.NoError(t, err)
	require.Empty(t, ran, "a task let go is not asked")
	require.Equal(t, asked, p.Asked())
	_, ok := p.Next()
	require.False(t, ok, "nothing left to schedule")
}
