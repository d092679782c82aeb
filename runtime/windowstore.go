package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// Window and session stores are key-value stores whose keys lead with a
// segment number, time / segment interval (see statestore/window.go). The
// interval is therefore part of what is on disk and in the changelog: a
// topology whose retention (windows' size or grace) changed computes
// another interval than the data was written with. The runtime handles
// that in two places:
//
//   - on disk, a small file beside each persistent window store records
//     the layout it was written with; a store found with another layout is
//     deleted before it opens, and restoration rebuilds it;
//   - in the changelog, older records keep their old segment numbers, so
//     every write to a window store goes through resegment, which rewrites
//     a key's segment from its time. The rewrite is a function of the key,
//     so an old record and a newer one of the same window land on the same
//     key, and the log's order still decides which value wins.

// segmentInterval is the interval a window store with opts lays keys out
// by, as statestore computes it.
func segmentInterval(opts statestore.WindowOptions) int64 {
	if opts.SegmentInterval > 0 {
		return opts.SegmentInterval
	}
	return max(opts.Retention/2, 1)
}

// windowLayout is what the layout file of a store holds.
func windowLayout(info graph.StoreInfo) string {
	return fmt.Sprintf("kind=%s segment-interval=%d\n", info.Kind, segmentInterval(info.WindowOptions()))
}

// layoutFile is the path of a persistent window store's layout file.
func (a *App) layoutFile(id task.ID, name string) string {
	return filepath.Join(task.Dir(a.appDir(), id), name+".layout")
}

// checkWindowLayout deletes a persistent window store written with another
// layout than info's, and records info's layout for the store about to be
// opened.
func (a *App) checkWindowLayout(id task.ID, info graph.StoreInfo) error {
	path := a.layoutFile(id, info.Name)
	want := windowLayout(info)
	have, err := os.ReadFile(path)
	switch {
	case err == nil && string(have) == want:
		return nil
	case err == nil:
		dir := filepath.Join(task.Dir(a.appDir(), id), info.Name)
		a.log.Warn("window store was written with another segment interval; deleting it to rebuild it from its changelog",
			"task", id, "store", info.Name, "was", strings.TrimSpace(string(have)), "now", strings.TrimSpace(want))
		if err := statestore.DestroyBadger(dir); err != nil {
			return fmt.Errorf("runtime: delete window store %s of task %s: %w", info.Name, id, err)
		}
		a.storesWiped.Add(1)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("runtime: read layout of window store %s of task %s: %w", info.Name, id, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("runtime: write layout of window store %s of task %s: %w", info.Name, id, err)
	}
	if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
		return fmt.Errorf("runtime: write layout of window store %s of task %s: %w", info.Name, id, err)
	}
	return nil
}

// wrapWindowed puts a window or session store's retention and segment
// layout around the store opened for it.
func wrapWindowed(s statestore.Store, info graph.StoreInfo) (statestore.Store, error) {
	seg, err := statestore.NewSegmentedStore(s, info.WindowOptions())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("runtime: window store %s: %w", info.Name, err), s.Close())
	}
	// The time a key is segmented by: a window's start (the last 8 bytes)
	// or a session's end (the 8 before its start).
	from := 8
	if info.Kind == graph.Session {
		from = 16
	}
	return &resegment{SegmentedStore: seg, interval: segmentInterval(info.WindowOptions()), from: from}, nil
}

// resegment rewrites the segment of every key written whose segment does
// not match its time (a changelog record written under another interval).
type resegment struct {
	*statestore.SegmentedStore
	interval int64
	// from is the time's offset from the end of a key.
	from int
}

func (r *resegment) Write(entries []statestore.Entry, position int64) error {
	var out []statestore.Entry // a copy, made at the first rewrite
	for i, e := range entries {
		k := e.Key
		if len(k) < 8+r.from+2 {
			continue // not a window key: the store reports it
		}
		t := int64(binary.BigEndian.Uint64(k[len(k)-r.from:]))
		seg := t / r.interval
		if t < 0 || int64(binary.BigEndian.Uint64(k)) == seg {
			continue
		}
		if out == nil {
			out = append([]statestore.Entry(nil), entries...)
		}
		nk := binary.BigEndian.AppendUint64(make([]byte, 0, len(k)), uint64(seg))
		out[i].Key = append(nk, k[8:]...)
	}
	if out == nil {
		out = entries
	}
	return r.SegmentedStore.Write(out, position)
}

// Put and Delete are single-entry Writes, so they are rewritten too.
func (r *resegment) Put(key, value []byte) error {
	if value == nil {
		return statestore.ErrNilValue
	}
	pos, err := r.Position()
	if err != nil {
		return err
	}
	return r.Write([]statestore.Entry{{Key: key, Value: value}}, pos)
}

func (r *resegment) Delete(key []byte) error {
	pos, err := r.Position()
	if err != nil {
		return err
	}
	return r.Write([]statestore.Entry{{Key: key}}, pos)
}
