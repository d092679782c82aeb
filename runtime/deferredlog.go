package runtime

import (
	"context"
	"log/slog"
)

// logLine is a log line gathered while a lock is held and written once it
// is released: Config.Logger's handler is user code, which may block (a
// full pipe, a network sink) or be slow, and whatever waits for the lock
// (a query, App.Tasks, another thread's claim) must not wait for it.
type logLine struct {
	level slog.Level
	msg   string
	args  []any
}

// heldLogs are the log lines of one locked section, in the order they were
// gathered.
type heldLogs []logLine

// add gathers a line; the caller holds the lock the lines wait for.
func (h *heldLogs) add(level slog.Level, msg string, args ...any) {
	*h = append(*h, logLine{level: level, msg: msg, args: args})
}

// write writes the lines, in order; the caller holds no lock.
func (h heldLogs) write(l *slog.Logger) {
	for _, line := range h {
		l.Log(context.Background(), line.level, line.msg, line.args...)
	}
}
