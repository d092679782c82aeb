package runtime

import (
	"fmt"
	"sync"
	"time"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/task"
)

// A commit's writes reach the stores only after the broker has taken the
// commit: under exactly-once its transaction (commit_eos.go), under
// at-least-once its offset commit (commit_alo.go). Between the two, the
// broker already shows the input offsets committed (and, under
// exactly-once, a read_committed consumer the output), while the active's
// stores still hold the state of the previous commit. A query answered by the running active in that gap
// would vouch for lag 0 with state older than what the group committed: a
// key written by that commit is reported absent (a 404 for a word whose
// windows the group has counted). So from the moment the transaction's
// end returns committed until its writes have landed (or the commit
// failed), the tasks' actives are "landing", and a query of one waits for
// the landing to finish, up to landingWait; past that (a disk-full retry
// loop) it is refused as rebalancing, which servers and clients retry,
// rather than answered stale. The transaction's end (or the offset commit)
// itself is not covered: it can last as long as a rebalance, and queries
// would all wait on it.

// landingWait bounds how long a query waits for a commit's writes to land.
const landingWait = 2 * time.Second

// commitLandings records the tasks whose commit is landing. The zero value
// is ready to use.
type commitLandings struct {
	mu    sync.Mutex
	tasks map[task.ID]chan struct{}
}

// begin marks tasks as landing and returns the function that ends it,
// which must be called once the commit's writes are in the stores or the
// commit ended otherwise.
func (l *commitLandings) begin(tasks []*taskrun.Active) (end func()) {
	done := make(chan struct{})
	l.mu.Lock()
	if l.tasks == nil {
		l.tasks = make(map[task.ID]chan struct{})
	}
	for _, t := range tasks {
		l.tasks[t.ID()] = done
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		for _, t := range tasks {
			if l.tasks[t.ID()] == done {
				delete(l.tasks, t.ID())
			}
		}
		l.mu.Unlock()
		close(done)
	}
}

// await waits until task id is not landing, for at most d, and reports
// whether it is not.
func (l *commitLandings) await(id task.ID, d time.Duration) bool {
	l.mu.Lock()
	done, ok := l.tasks[id]
	l.mu.Unlock()
	if !ok {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// awaitLanded is await for a query of store's partition held by task id's
// running active: nil once no commit of the task is landing, else an
// ErrRebalancing refusal.
func (a *App) awaitLanded(id task.ID, store string) error {
	if a.landings.await(id, landingWait) {
		return nil
	}
	return fmt.Errorf("%w: store %q partition %d: the active's committed writes have not reached its store within %v",
		iq.ErrRebalancing, store, id.Partition, landingWait)
}
