package statestore

import (
	"bytes"
	"errors"
)

// WindowIterator walks windows (or sessions) of a WindowStore or
// SessionStore. Key and Value are valid until the next call to Next. It
// must be closed.
//
// Going backward, the iterator reads every matching entry into memory
// first and yields them in reverse, since the byte-level iterators only go
// forward: a backward scan of a single key holds that key's windows in
// range, a backward FetchAll every window in range.
type WindowIterator struct {
	backward bool
	// decode reads the times after the record key, and whether the entry
	// is in the scan's time bounds.
	decode func(rest []byte) (start, end int64, ok bool)

	it      Iterator
	pending []windowEntry // backward: every entry, in order
	cur     windowEntry
	keyBuf  []byte
	err     error
	closed  bool
}

type windowEntry struct {
	key, value []byte
	start, end int64
}

func newWindowIterator(it Iterator, backward bool, decode func(rest []byte) (int64, int64, bool)) (*WindowIterator, error) {
	w := &WindowIterator{it: it, backward: backward, decode: decode}
	if !backward {
		return w, nil
	}
	for w.advance() {
		e := w.cur
		e.key, e.value = bytes.Clone(e.key), bytes.Clone(e.value)
		w.pending = append(w.pending, e)
	}
	if w.err != nil {
		return nil, w.err
	}
	return w, nil
}

// Next advances to the next window and reports whether there is one.
func (i *WindowIterator) Next() bool {
	if i.err != nil || i.closed {
		return false
	}
	if i.backward {
		n := len(i.pending)
		if n == 0 {
			return false
		}
		i.cur, i.pending = i.pending[n-1], i.pending[:n-1]
		return true
	}
	return i.advance()
}

// advance moves the byte-level iterator to the next entry within the
// scan's bounds, filling cur; at the end it closes it.
func (i *WindowIterator) advance() bool {
	if i.it == nil {
		return false
	}
	for i.it.Next() {
		key, rest, err := splitKey(i.it.Key(), i.keyBuf)
		if err != nil {
			i.err = errors.Join(err, i.it.Close())
			i.it = nil
			return false
		}
		i.keyBuf = key
		start, end, ok := i.decode(rest)
		if !ok {
			continue
		}
		i.cur = windowEntry{key: key, value: i.it.Value(), start: start, end: end}
		return true
	}
	i.err = errors.Join(i.it.Err(), i.it.Close())
	i.it = nil
	return false
}

// Key returns the current record key.
func (i *WindowIterator) Key() []byte { return i.cur.key }

// Value returns the current value.
func (i *WindowIterator) Value() []byte { return i.cur.value }

// Start returns the current window's start.
func (i *WindowIterator) Start() int64 { return i.cur.start }

// End returns the current window's end: start plus the window size for a
// window store, the session's end for a session store.
func (i *WindowIterator) End() int64 { return i.cur.end }

// Err returns the first error of the iteration.
func (i *WindowIterator) Err() error { return i.err }

// Close releases the iterator.
func (i *WindowIterator) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.pending = nil
	if i.it != nil {
		err := i.it.Close()
		i.it = nil
		return err
	}
	return nil
}
