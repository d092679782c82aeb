package runtime

import (
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

// Window and session stores keep each key behind a segment number, time /
// segment interval (see statestore/window.go), on disk only: the cache and
// the changelog see keys without it. The interval is therefore part of a
// persistent store's files, not of its changelog. A small file beside each
// persistent window store records the kind and interval the store was
// created with, and the store is reopened with that interval whatever the
// topology now computes (its retention, hence its default interval, may
// have changed, or the default itself). Only a store found with another
// kind is deleted before it opens, for restoration to rebuild it. An
// in-memory store is rebuilt at every start and takes the current
// interval.

// segmentInterval is the interval a new window store with opts lays keys
// out by, as statestore computes it.
func segmentInterval(opts statestore.WindowOptions) int64 {
	if opts.SegmentInterval > 0 {
		return opts.SegmentInterval
	}
	return statestore.DefaultSegmentInterval(opts.Retention)
}

// windowLayout is what the layout file of a store holds.
func windowLayout(kind graph.StoreKind, interval int64) string {
	return fmt.Sprintf("kind=%s segment-interval=%d\n", kind, interval)
}

// layoutFile is the path of a persistent window store's layout file.
func (a *App) layoutFile(id task.ID, name string) string {
	return filepath.Join(task.Dir(a.appDir(), id), name+".layout")
}

// checkWindowLayout returns the segment interval of the persistent window
// store about to be opened: the one its layout file records, or for a new
// store (or one deleted here, having been written as another kind of
// store) info's, which it then records.
func (a *App) checkWindowLayout(id task.ID, info graph.StoreInfo) (int64, error) {
	path := a.layoutFile(id, info.Name)
	want := segmentInterval(info.WindowOptions())
	have, err := os.ReadFile(path)
	switch {
	case err == nil:
		var kind string
		var iv int64
		if _, err := fmt.Sscanf(string(have), "kind=%s segment-interval=%d\n", &kind, &iv); err == nil && kind == info.Kind.String() && iv > 0 {
			if iv != want {
				a.log.Info("window store keeps the segment interval it was written with",
					"task", id, "store", info.Name, "interval_ms", iv, "configured_ms", want)
			}
			return iv, nil
		}
		a.log.Warn("window store was written with another layout; deleting it to rebuild it from its changelog",
			"task", id, "store", info.Name, "was", strings.TrimSpace(string(have)), "now", strings.TrimSpace(windowLayout(info.Kind, want)))
		if err := a.deleteStore(id, info.Name); err != nil {
			return 0, fmt.Errorf("runtime: delete window store %s of task %s: %w", info.Name, id, err)
		}
		a.storesWiped.Add(1)
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("runtime: read layout of window store %s of task %s: %w", info.Name, id, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("runtime: write layout of window store %s of task %s: %w", info.Name, id, err)
	}
	if err := os.WriteFile(path, []byte(windowLayout(info.Kind, want)), 0o644); err != nil {
		return 0, fmt.Errorf("runtime: write layout of window store %s of task %s: %w", info.Name, id, err)
	}
	return want, nil
}

// wrapWindowed puts a window or session store's retention and segment
// layout, with the given segment interval, around the store opened for
// it.
func wrapWindowed(s statestore.Store, info graph.StoreInfo, interval int64) (statestore.Store, error) {
	opts := info.WindowOptions()
	opts.SegmentInterval = interval
	seg, err := statestore.NewSegmentedStore(s, opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("runtime: window store %s: %w", info.Name, err), s.Close())
	}
	return seg, nil
}
