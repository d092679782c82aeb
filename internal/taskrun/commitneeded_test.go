package taskrun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// ticker forwards every record and runs a wall-clock punctuator every
// minute that does nothing.
type ticker struct {
	ctx topology.ProcessorContext[string, string]
}

func (p *ticker) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	_, err := ctx.Schedule(time.Minute, topology.WallClockTime, func(time.Time) error { return nil })
	return err
}

func (p *ticker) Process(rec topology.Record[string, string]) error { return p.ctx.Forward(rec) }
func (p *ticker) Close() error                                      { return nil }

// A task needs a commit exactly when it processed or skipped a record, or
// ran a punctuator, since its last complete commit: an idle task's commit
// is left out, and nothing it holds is left behind by that.
func TestCommitNeededOnlyAfterWork(t *testing.T) {
	f, _ := restoredActive(t, countTopology(t))
	a := f.a
	require.False(t, a.CommitNeeded(), "a task that did nothing yet needs no commit")

	f.pipe("k", []byte("v"), time.Unix(1, 0))
	require.True(t, a.CommitNeeded(), "a processed record")
	require.NoError(t, a.Flush())
	require.True(t, a.CommitNeeded(), "a flush is not a commit")
	require.NotEmpty(t, a.PendingChangelog())
	require.Error(t, a.CompleteCommit(func(string, int32) (int64, bool) { return 0, false }))
	require.True(t, a.CommitNeeded(), "a failed store write is no complete commit")
	f.completeCommit()
	require.False(t, a.CommitNeeded(), "its commit covered it")
	require.Empty(t, a.PendingChangelog())

	a.Skip(graph.InputRecord{Topic: "in", Partition: 3, Offset: 7})
	require.True(t, a.CommitNeeded(), "a skipped record moves the consumed offset")
	require.Equal(t, map[string]int64{"in": 8}, a.OffsetsToCommit())
	f.completeCommit()
	require.False(t, a.CommitNeeded())
}

// A punctuator may write anything a record may: a task that ran one needs
// a commit; one whose punctuators were not due does not.
func TestCommitNeededAfterPunctuation(t *testing.T) {
	b := topology.NewBuilder()
	topology.Process(topology.Stream(b, "in", serde.String, serde.String), "tick",
		func() topology.Processor[string, string, string, string] { return &ticker{} })
	topo, err := b.Build()
	require.NoError(t, err)
	f, _ := restoredActive(t, topo)
	a := f.a

	require.NoError(t, a.Punctuate(time.Now()))
	require.False(t, a.CommitNeeded(), "no punctuator was due")
	require.NoError(t, a.Punctuate(time.Now().Add(2*time.Minute)))
	require.True(t, a.CommitNeeded(), "a punctuator ran")
	f.completeCommit()
	require.False(t, a.CommitNeeded())
}
