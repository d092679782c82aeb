package topology

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Window definitions and the arithmetic of assigning records to windows.
// Everything here is a pure function of timestamps (milliseconds since the
// epoch, as Kafka record timestamps are); the stateful parts (window stores,
// stream time) live elsewhere. The semantics are Kafka Streams', so a
// topology ported from it groups records into the same windows:
//
//   - time windows (tumbling and hopping) are half-open, [Start, End);
//   - sliding windows and sessions are closed, [Start, End];
//   - a window accepts records while stream time is below its close time
//     (see each type's IsClosed) and is final afterwards;
//   - windows never start before 0.

// Window is an interval of record time in milliseconds. Whether End is
// inside the window depends on the kind of window (see above).
type Window struct {
	Start int64
	End   int64
}

// String shows the window's bounds.
func (w Window) String() string { return fmt.Sprintf("[%d,%d]", w.Start, w.End) }

// Windowed is a record key together with the window it was aggregated in:
// the key of a windowed aggregation's result.
type Windowed[K any] struct {
	Key    K
	Window Window
}

// millis converts a duration to whole milliseconds, the unit of record
// timestamps.
func millis(d time.Duration) int64 { return d.Milliseconds() }

// addSat adds without overflowing past MaxInt64, so that windows near the
// end of time close at "never" rather than in the distant past.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// TimeWindows are fixed-size windows that start every Advance
// milliseconds, aligned to the epoch: tumbling windows when Advance equals
// Size (every record falls into exactly one), hopping windows when Advance
// is smaller (windows overlap and a record falls into Size/Advance of them,
// rounded up). A window is [Start, Start+Size).
type TimeWindows struct {
	size, advance, grace int64
}

// TumblingWindows returns non-overlapping windows of size, without grace.
// It panics if size is below a millisecond, like the other window
// constructors: window definitions are fixed when a topology is written.
func TumblingWindows(size time.Duration) TimeWindows {
	return HoppingWindows(size, size)
}

// HoppingWindows returns windows of size starting every advance, without
// grace. advance must be positive and no larger than size.
func HoppingWindows(size, advance time.Duration) TimeWindows {
	s, a := millis(size), millis(advance)
	if s <= 0 || a <= 0 || a > s {
		panic(fmt.Sprintf("topology: hopping windows need 0 < advance <= size, got size %v advance %v", size, advance))
	}
	return TimeWindows{size: s, advance: a}
}

// Grace returns the windows with a grace period: how long after a window's
// end (in stream time) it still accepts out-of-order records.
func (w TimeWindows) Grace(d time.Duration) TimeWindows {
	w.grace = nonNegative(d, "grace")
	return w
}

func nonNegative(d time.Duration, what string) int64 {
	if d < 0 {
		panic(fmt.Sprintf("topology: %s must not be negative, got %v", what, d))
	}
	return millis(d)
}

// Size is the windows' length in milliseconds.
func (w TimeWindows) Size() int64 { return w.size }

// Advance is the distance between window starts in milliseconds.
func (w TimeWindows) Advance() int64 { return w.advance }

// GracePeriod is the grace in milliseconds.
func (w TimeWindows) GracePeriod() int64 { return w.grace }

// WindowsFor returns the windows a record at time t falls into, by
// ascending start. A negative t falls into none.
func (w TimeWindows) WindowsFor(t int64) []Window {
	if t < 0 {
		return nil
	}
	first := w.firstStart(t)
	return w.appendWindowsFor(make([]Window, 0, (t-first)/w.advance+1), t)
}

// firstStart is the start of the earliest window containing t >= 0: it
// starts after t-size, and starts are multiples of advance and never
// negative.
func (w TimeWindows) firstStart(t int64) int64 {
	return max(0, t-w.size+w.advance) / w.advance * w.advance
}

// appendWindowsFor is WindowsFor appending to dst.
func (w TimeWindows) appendWindowsFor(dst []Window, t int64) []Window {
	if t < 0 {
		return dst
	}
	for s := w.firstStart(t); s <= t; s += w.advance {
		dst = append(dst, Window{Start: s, End: addSat(s, w.size)})
	}
	return dst
}

// CloseTime is the stream time at which win closes: its end plus grace.
func (w TimeWindows) CloseTime(win Window) int64 { return addSat(win.End, w.grace) }

// IsClosed reports whether win no longer accepts records at streamTime.
func (w TimeWindows) IsClosed(win Window, streamTime int64) bool {
	return streamTime >= w.CloseTime(win)
}

// IsLate reports whether a record at t arriving at streamTime falls into
// no open window, so an aggregation drops it.
func (w TimeWindows) IsLate(t, streamTime int64) bool {
	ws := w.WindowsFor(t)
	return len(ws) == 0 || w.IsClosed(ws[len(ws)-1], streamTime)
}

// MinRetention is the shortest store retention that keeps every window
// until it closes: size plus grace.
func (w TimeWindows) MinRetention() int64 { return addSat(w.size, w.grace) }

// SlidingWindows are Kafka Streams' sliding windows: windows of a fixed
// span whose boundaries come from the records themselves, so that every
// distinct set of records lying within MaxDiff of each other is aggregated
// exactly once. A window is closed, [Start, Start+MaxDiff].
//
// A record at t defines its left window [t-MaxDiff, t] (it is the window's
// latest record) and, if some record of the key lies in (t, t+MaxDiff], its
// right window [t+1, t+1+MaxDiff] (the records after it). Records earlier
// than MaxDiff share the window [0, MaxDiff] instead of a left window of
// their own, since no window starts before 0. WindowsOf computes the set of
// windows a key's records define; an aggregation updates, for a new record,
// every existing window that contains it and creates its missing left and
// right windows.
type SlidingWindows struct {
	diff, grace int64
}

// NewSlidingWindows returns sliding windows over records at most maxDiff
// apart, without grace. maxDiff must be positive.
func NewSlidingWindows(maxDiff time.Duration) SlidingWindows {
	d := millis(maxDiff)
	if d <= 0 {
		panic(fmt.Sprintf("topology: sliding windows need a positive time difference, got %v", maxDiff))
	}
	return SlidingWindows{diff: d}
}

// Grace returns the windows with a grace period (see TimeWindows.Grace).
func (w SlidingWindows) Grace(d time.Duration) SlidingWindows {
	w.grace = nonNegative(d, "grace")
	return w
}

// MaxDiff is the windows' span in milliseconds.
func (w SlidingWindows) MaxDiff() int64 { return w.diff }

// GracePeriod is the grace in milliseconds.
func (w SlidingWindows) GracePeriod() int64 { return w.grace }

// LeftWindow is the window a record at t closes: [t-MaxDiff, t], or
// [0, MaxDiff] for a record earlier than MaxDiff.
func (w SlidingWindows) LeftWindow(t int64) Window {
	if t < w.diff {
		return Window{Start: 0, End: w.diff}
	}
	return Window{Start: t - w.diff, End: t}
}

// RightWindow is the window that starts just after a record at t:
// [t+1, t+1+MaxDiff]. It exists only while it holds a record.
func (w SlidingWindows) RightWindow(t int64) Window {
	return Window{Start: t + 1, End: addSat(t+1, w.diff)}
}

// Contains reports whether a record at t lies in win (both ends included).
func (w SlidingWindows) Contains(win Window, t int64) bool {
	return win.Start <= t && t <= win.End
}

// SearchRange is the range of window starts an aggregation must read
// to handle a record at t: every window containing t, the left windows of
// earlier records whose right windows may need creating, and t's own right
// window.
func (w SlidingWindows) SearchRange(t int64) (from, to int64) {
	return max(0, t-2*w.diff), t + 1
}

// CloseTime is the stream time from which win is closed: one past its end
// plus grace, as its end is inside the window (Kafka Streams keeps a
// sliding window open while end >= streamTime - grace).
func (w SlidingWindows) CloseTime(win Window) int64 { return addSat(addSat(win.End, w.grace), 1) }

// IsClosed reports whether win no longer accepts records at streamTime.
func (w SlidingWindows) IsClosed(win Window, streamTime int64) bool {
	return streamTime >= w.CloseTime(win)
}

// IsLate reports whether a record at t arriving at streamTime is dropped:
// every window holding t has closed, the last of them being [t, t+MaxDiff].
func (w SlidingWindows) IsLate(t, streamTime int64) bool {
	return addSat(addSat(t, 1+w.diff), w.grace) <= streamTime
}

// MinRetention is the shortest store retention that keeps every window
// until it closes: MaxDiff plus grace plus one, the window's end being
// inside it (the span a window store needs is measured from window
// starts).
func (w SlidingWindows) MinRetention() int64 { return addSat(addSat(w.diff, w.grace), 1) }

// WindowsOf returns the windows that records of one key at the given
// times define, in order of start: every record's left window, and the
// right window of every record followed by another within MaxDiff. It is
// the reference the aggregation's incremental updates must agree with.
func (w SlidingWindows) WindowsOf(times []int64) []Window {
	ts := slices.Clone(times)
	slices.Sort(ts)
	ts = slices.Compact(ts)
	set := make(map[Window]struct{}, 2*len(ts))
	for i, t := range ts {
		if t < 0 {
			continue
		}
		set[w.LeftWindow(t)] = struct{}{}
		if i+1 < len(ts) && ts[i+1]-t <= w.diff {
			set[w.RightWindow(t)] = struct{}{}
		}
	}
	out := make([]Window, 0, len(set))
	for win := range set {
		out = append(out, win)
	}
	slices.SortFunc(out, func(a, b Window) int {
		if a.Start != b.Start {
			return cmpInt64(a.Start, b.Start)
		}
		return cmpInt64(a.End, b.End)
	})
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SessionWindows group a key's records into sessions of activity: records
// less than or exactly InactivityGap apart belong to one session, and a
// record that bridges two sessions merges them. A session is closed,
// [first record's time, last record's time].
type SessionWindows struct {
	gap, grace int64
}

// NewSessionWindows returns sessions separated by inactivityGap, without
// grace. The gap must be positive.
func NewSessionWindows(inactivityGap time.Duration) SessionWindows {
	g := millis(inactivityGap)
	if g <= 0 {
		panic(fmt.Sprintf("topology: session windows need a positive inactivity gap, got %v", inactivityGap))
	}
	return SessionWindows{gap: g}
}

// Grace returns the windows with a grace period (see TimeWindows.Grace).
func (w SessionWindows) Grace(d time.Duration) SessionWindows {
	w.grace = nonNegative(d, "grace")
	return w
}

// InactivityGap is the gap in milliseconds.
func (w SessionWindows) InactivityGap() int64 { return w.gap }

// GracePeriod is the grace in milliseconds.
func (w SessionWindows) GracePeriod() int64 { return w.grace }

// SearchBounds are the bounds to find the sessions a record at t joins in
// a session store: every session ending at or after earliestEnd and
// starting at or before latestStart.
func (w SessionWindows) SearchBounds(t int64) (earliestEnd, latestStart int64) {
	return t - w.gap, addSat(t, w.gap)
}

// Joins reports whether a record at t belongs to (and extends) session s.
func (w SessionWindows) Joins(s Window, t int64) bool {
	e, l := w.SearchBounds(t)
	return s.End >= e && s.Start <= l
}

// Merge returns the session a record at t forms with the existing sessions
// it joins (those Joins accepts; the caller found them with SearchBounds):
// the span of them all and t. With none, it is the new session [t, t].
func (w SessionWindows) Merge(t int64, joined []Window) Window {
	m := Window{Start: t, End: t}
	for _, s := range joined {
		m.Start = min(m.Start, s.Start)
		m.End = max(m.End, s.End)
	}
	return m
}

// CloseTime is the stream time from which session s is closed: one past
// its end plus gap plus grace (its end is inside the session, and until
// then a record within the gap may still extend it), as in Kafka Streams
// since 3.0.
func (w SessionWindows) CloseTime(s Window) int64 {
	return addSat(addSat(addSat(s.End, w.gap), w.grace), 1)
}

// IsClosed reports whether session s no longer accepts records at
// streamTime. An aggregation checks the merged session: a late record that
// merges into a session still open is not late.
func (w SessionWindows) IsClosed(s Window, streamTime int64) bool {
	return streamTime >= w.CloseTime(s)
}

// MinRetention is the retention of Kafka Streams' session stores,
// measured from session ends: gap plus grace. A session a store of this
// retention still returns may be joined; one it no longer returns ended gap
// plus grace before the store's latest session, so no record the
// aggregation accepts can extend it.
func (w SessionWindows) MinRetention() int64 { return addSat(w.gap, w.grace) }
