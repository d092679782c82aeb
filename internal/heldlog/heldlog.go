// Package heldlog holds log lines gathered while a lock is held and writes
// them once it is released. A slog.Handler is the user's code, which may
// block (a full pipe, a network sink) or be slow, and whatever waits for
// the lock (a query, App.Tasks, another thread's claim, a changelog
// reader's Progress) must not wait for it. A line keeps when and where it
// was gathered, so that it reads as if written there.
package heldlog

import (
	"context"
	"log/slog"
	"runtime"
	"time"
)

type line struct {
	at    time.Time
	pc    uintptr
	level slog.Level
	msg   string
	args  []any
}

// Lines are the log lines of one locked section, in the order they were
// gathered. The zero value is empty and ready.
type Lines []line

// Add gathers a line; the caller holds the lock the line waits for.
func (h *Lines) Add(level slog.Level, msg string, args ...any) {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:]) // Add's caller
	*h = append(*h, line{at: time.Now(), pc: pcs[0], level: level, msg: msg, args: args})
}

// Write writes the lines to l in order, dropping those below its level,
// and forgets them; the caller holds none of the locks they waited for.
func (h *Lines) Write(l *slog.Logger) {
	ctx := context.Background()
	for _, ln := range *h {
		if !l.Enabled(ctx, ln.level) {
			continue
		}
		r := slog.NewRecord(ln.at, ln.level, ln.msg, ln.pc)
		r.Add(ln.args...)
		_ = l.Handler().Handle(ctx, r)
	}
	*h = nil
}
