package topology_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A panic in a user function fails the record with an error naming the
// node, and the task keeps processing the records after it.
func TestPanicInUserFunctionIsRecoveredAndAttributed(t *testing.T) {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "in", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_ string, l string) []string {
		if l == "bad" {
			var m map[string]int
			m["x"] = 1 // a nil-map write: a runtime panic, as user bugs are
		}
		return strings.Fields(l)
	}, topology.Named("split"))
	words.To("out", serde.String, serde.String)
	d, _ := start(t, b)
	in := strIn(d, "in")

	require.NoError(t, in.Pipe("k", "a b"))
	err := in.Pipe("k", "bad")
	var ne *topology.NodeError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "split", ne.Node)
	var pe *topology.PanicError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, string(pe.Stack), "panic_test.go", "the stack names the panicking user code")
	var rerr interface{ RuntimeError() }
	require.True(t, errors.As(err, &rerr), "a runtime panic's error value stays reachable: %v", err)

	require.NoError(t, in.Pipe("k", "c"))
	got := readKVs(t, d, "out", serde.String, serde.String)
	require.Len(t, got, 3)
	require.Equal(t, "c", got[2].Value)
}

// A panic in a sink's serde is attributed to the sink node, and one in a
// punctuator to the punctuating processor.
func TestPanicInSerdeAndPunctuatorIsAttributed(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	panicky := serde.Funcs[string]{
		EncodeFn: func(v string) ([]byte, error) {
			if v == "boom" {
				panic("encoder exploded")
			}
			return []byte(v), nil
		},
		DecodeFn: func(b []byte) (string, error) { return string(b), nil },
	}
	s.To("out", serde.String, panicky, topology.Named("sink"))
	d, _ := start(t, b)
	in := strIn(d, "in")
	err := in.Pipe("k", "boom")
	var ne *topology.NodeError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "sink", ne.Node)
	require.ErrorContains(t, err, "encoder exploded")
	require.NoError(t, in.Pipe("k", "fine"))

	b2 := topology.NewBuilder()
	topology.Process(topology.Stream(b2, "in", serde.String, serde.String), "ticker", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{
			init: func(ctx strCtx) error {
				_, err := ctx.Schedule(time.Second, topology.WallClockTime, func(time.Time) error { panic("tick") })
				return err
			},
			process: func(ctx strCtx, rec strRec) error { return ctx.Forward(rec) },
			close:   func() error { return nil },
		}
	})
	d2, _ := start(t, b2)
	err = d2.AdvanceWallClock(2 * time.Second)
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "ticker", ne.Node)
	var pe *topology.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "tick", pe.Value)
}
