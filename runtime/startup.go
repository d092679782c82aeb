package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// scanDisk finds the task directories a previous run left and reads their
// stores' positions, so the first subscription can report them. Reading a
// position means opening the store, which for badger costs tens of
// milliseconds each (manifest, value log, memtable): on a restart with a
// dozen tasks that was most of Start, so the stores are opened by a few
// workers at once.
func (r *registry) scanDisk() error {
	entries, err := os.ReadDir(r.app.appDir())
	if err != nil {
		return fmt.Errorf("runtime: read state directory: %w", err)
	}
	subs := graph.Of(r.app.topo).SubTopologies()
	type found struct {
		id    task.ID
		since time.Time
	}
	var dirs []found
	for _, e := range entries {
		if !e.IsDir() || e.Name() == globalDirName {
			continue
		}
		id, err := task.ParseID(e.Name())
		if err != nil || id.SubTopology >= len(subs) || id.Partition >= r.app.plan.subPartitions[id.SubTopology] {
			r.log.Warn("ignoring unknown folder in the state directory", "folder", e.Name())
			continue
		}
		since := time.Now()
		if info, err := e.Info(); err == nil {
			since = info.ModTime()
		}
		dirs = append(dirs, found{id: id, since: since})
	}
	positions := make([]map[string]int64, len(dirs))
	errs := make([]error, len(dirs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(dirs), scanWorkers()) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(dirs) {
					return
				}
				positions[i], errs[i] = r.diskPositions(dirs[i].id)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, d := range dirs {
		r.onDisk[d.id] = diskState{positions: positions[i], since: d.since}
	}
	return nil
}

// scanWorkers is how many stores scanDisk opens at once: opening is part
// disk reads, part CPU, so a little more than one per core.
func scanWorkers() int { return goruntime.GOMAXPROCS(0) + 1 }

// diskPositions opens the persistent logged stores a task left on disk and
// returns their changelog positions.
func (r *registry) diskPositions(id task.ID) (map[string]int64, error) {
	positions := make(map[string]int64)
	for _, name := range r.persistentLogged(id.SubTopology) {
		dir := filepath.Join(task.Dir(r.app.appDir(), id), name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		s, err := r.app.openPersistent(id, name)
		if err != nil {
			return nil, fmt.Errorf("runtime: open store %s of task %s: %w", name, id, err)
		}
		pos, err := s.Position()
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("runtime: read position of store %s of task %s: %w", name, id, err)
		}
		if pos != statestore.NoPosition {
			positions[changelog.TopicName(r.app.cfg.ApplicationID, name)] = pos
		}
	}
	return positions, nil
}

// alongside runs side in a goroutine while main runs, and returns main's
// error once both are done. Start uses it for cluster checks whose answers
// do not depend on each other, so that their round trips overlap.
func alongside(side func(), main func() error) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		side()
	}()
	err := main()
	<-done
	return err
}
