package heldlog

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type recordingHandler struct{ recs []slog.Record }

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// Lines gathered under a lock are written later as they would have been
// then: in order, with their levels and fields, the time they were
// gathered and the place that gathered them; lines below the logger's
// level are dropped, and written lines are forgotten.
func TestLinesWriteAsGathered(t *testing.T) {
	var logs Lines
	logs.Add(slog.LevelWarn, "first", "task", "0_1", "n", 2)
	logs.Add(slog.LevelDebug, "dropped")
	logs.Add(slog.LevelInfo, "second", slog.Int("m", 1))
	gathered := time.Now()
	for !time.Now().After(gathered) {
		// The clock moves on before the lines are written.
	}
	h := &recordingHandler{}
	logs.Write(slog.New(h))

	require.Len(t, h.recs, 2)
	first, second := h.recs[0], h.recs[1]
	require.Equal(t, "first", first.Message)
	require.Equal(t, slog.LevelWarn, first.Level)
	require.Equal(t, "second", second.Message)
	require.Equal(t, slog.LevelInfo, second.Level)
	attrs := func(r slog.Record) (out []string) {
		r.Attrs(func(a slog.Attr) bool { out = append(out, a.String()); return true })
		return out
	}
	require.Equal(t, []string{"task=0_1", "n=2"}, attrs(first))
	require.Equal(t, []string{"m=1"}, attrs(second))
	for _, r := range h.recs {
		require.False(t, r.Time.After(gathered), "a line keeps the time it was gathered")
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		require.Contains(t, f.Function, "TestLinesWriteAsGathered", "a line keeps its call site")
	}
	require.Empty(t, logs, "written lines are forgotten")
}
