package changelog

import (
	"context"
	"log/slog"
	goruntime "runtime"
	"time"
)

// heldLine is a log line gathered while one of the Reader's locks (mu, or
// a partition's applyMu) is held, and written once it is released. The
// logger's handler is the caller's code (ReaderConfig.Logger) and may
// block or be slow; the runtime calls Progress, Register and Unregister
// with its own locks held, so a handler run under mu would hold those up
// too. The line keeps when and where it was gathered, so that it reads as
// if written there.
type heldLine struct {
	at    time.Time
	pc    uintptr
	level slog.Level
	msg   string
	args  []any
}

// heldLines are the log lines of one locked section, in the order they
// were gathered.
type heldLines []heldLine

// add gathers a line; the caller holds the lock the line waits for.
func (h *heldLines) add(level slog.Level, msg string, args ...any) {
	var pcs [1]uintptr
	goruntime.Callers(2, pcs[:]) // add's caller
	*h = append(*h, heldLine{at: time.Now(), pc: pcs[0], level: level, msg: msg, args: args})
}

// write writes the lines in order and forgets them; the caller holds none
// of the Reader's locks.
func (h *heldLines) write(l *slog.Logger) {
	ctx := context.Background()
	for _, line := range *h {
		if !l.Enabled(ctx, line.level) {
			continue
		}
		rec := slog.NewRecord(line.at, line.level, line.msg, line.pc)
		rec.Add(line.args...)
		_ = l.Handler().Handle(ctx, rec)
	}
	*h = nil
}
