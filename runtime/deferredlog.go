package runtime

import (
	"context"
	"log/slog"
	goruntime "runtime"
	"time"
)

// logLine is a log line gathered while a lock is held and written once it
// is released: Config.Logger's handler is user code, which may block (a
// full pipe, a network sink) or be slow, and whatever waits for the lock
// (a query, App.Tasks, another thread's claim) must not wait for it. The
// line keeps when and where it was gathered, so that it reads as if
// written there.
type logLine struct {
	at    time.Time
	pc    uintptr
	level slog.Level
	msg   string
	args  []any
}

// heldLogs are the log lines of one locked section, in the order they were
// gathered.
type heldLogs []logLine

// add gathers a line; the caller holds the lock the lines wait for.
func (h *heldLogs) add(level slog.Level, msg string, args ...any) {
	var pcs [1]uintptr
	goruntime.Callers(2, pcs[:]) // add's caller
	*h = append(*h, logLine{at: time.Now(), pc: pcs[0], level: level, msg: msg, args: args})
}

// write writes the lines, in order; the caller holds no lock.
func (h heldLogs) write(l *slog.Logger) {
	ctx := context.Background()
	for _, line := range h {
		if !l.Enabled(ctx, line.level) {
			continue
		}
		r := slog.NewRecord(line.at, line.level, line.msg, line.pc)
		r.Add(line.args...)
		_ = l.Handler().Handle(ctx, r)
	}
}
