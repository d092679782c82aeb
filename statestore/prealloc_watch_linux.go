//go:build linux

package statestore

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// dirWatch is the process's one inotify instance, watching the directory
// of every open badger database for the files its preallocator allocates.
// One instance serves them all: the kernel allows a user 128 instances by
// default (fs.inotify.max_user_instances), and the per-store layout opens a
// database per store; watches are plentiful (fs.inotify.max_user_watches).
// Its goroutine runs while any directory is watched.
type dirWatch struct {
	mu   sync.Mutex
	file *os.File // nil while nothing is watched
	done chan struct{}
	byWD map[int32]*preallocator
}

var watcher dirWatch

// add watches p.dir for p.
func (w *dirWatch) add(p *preallocator) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file == nil {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return err
		}
		// Non-blocking, so the runtime's poller waits on it and Close
		// wakes the reader.
		w.file = os.NewFile(uintptr(fd), "inotify")
		w.done = make(chan struct{})
		w.byWD = make(map[int32]*preallocator)
		go w.run(w.file, w.done)
	}
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), p.dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
	if err != nil {
		w.closeIfIdleLocked()
		return err
	}
	p.wd = int32(wd)
	w.byWD[p.wd] = p
	return nil
}

// remove stops watching p.dir. Once it returns, the watch no longer calls
// on p.
func (w *dirWatch) remove(p *preallocator) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.wd < 0 || w.byWD[p.wd] != p {
		return
	}
	delete(w.byWD, p.wd)
	_, _ = unix.InotifyRmWatch(int(w.file.Fd()), uint32(p.wd))
	p.wd = -1
	w.closeIfIdleLocked()
}

// closeIfIdleLocked ends the inotify instance, and waits for its
// goroutine, when no directory is watched.
func (w *dirWatch) closeIfIdleLocked() {
	if len(w.byWD) > 0 || w.file == nil {
		return
	}
	file, done := w.file, w.done
	w.file, w.done, w.byWD = nil, nil, nil
	_ = file.Close()
	// The goroutine may be waiting for mu with events read before the
	// close; dispatch drops them, the instance being gone.
	w.mu.Unlock()
	<-done
	w.mu.Lock()
}

// run reads file's events until it is closed, allocating each new file of
// a watched directory.
func (w *dirWatch) run(file *os.File, done chan struct{}) {
	defer close(done)
	buf := make([]byte, 16<<10)
	for {
		n, err := file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.mu.Lock()
				for _, p := range w.byWD {
					p.log.Warn("statestore: the watch of badger directories ended; new files are no longer preallocated", "dir", p.dir, "err", err)
					break
				}
				w.mu.Unlock()
			}
			return
		}
		w.dispatch(file, buf[:n])
	}
}

// dispatch allocates the files that events, read from file, name. It
// holds mu, so that no preallocator removed meanwhile is called.
func (w *dirWatch) dispatch(file *os.File, events []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != file {
		// Watch descriptors are numbered per instance.
		return
	}
	for off := 0; off+unix.SizeofInotifyEvent <= len(events); {
		// struct inotify_event: wd, mask, cookie, len, then the name.
		wd := int32(binary.NativeEndian.Uint32(events[off:]))
		mask := binary.NativeEndian.Uint32(events[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(events[off+12:]))
		nameStart := off + unix.SizeofInotifyEvent
		off = nameStart + nameLen
		if mask&unix.IN_Q_OVERFLOW != 0 {
			// Events were lost: look at every directory again.
			for _, p := range w.byWD {
				p.scan()
			}
			continue
		}
		p := w.byWD[wd]
		if p == nil || nameLen == 0 || off > len(events) {
			continue
		}
		p.allocate(strings.TrimRight(string(events[nameStart:off]), "\x00"))
	}
}
