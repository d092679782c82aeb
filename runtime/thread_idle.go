package runtime

// What a thread's passes and commits look at: the tasks that changed since
// the last commit or pass, never every task the thread holds, so that an
// idle instance of thousands of tasks costs next to nothing.

import (
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// tookInput notes that the running task id took input in the poll being
// processed: the next commit covers it, and the next pass asks it to
// punctuate (its stream time may have moved).
func (th *thread) tookInput(id task.ID) {
	t := th.task(id)
	if t == nil {
		return
	}
	th.noteWorked(t)
	th.puncts.Check(t)
}

// noteWorked notes that t may need a commit (taskrun.Active.CommitNeeded).
func (th *thread) noteWorked(t *taskrun.Active) {
	if th.worked == nil {
		th.worked = make(map[*taskrun.Active]struct{})
	}
	th.worked[t] = struct{}{}
}

// runs reports whether t is a task the thread runs: the one its core
// holds under t's ID, in a Running slot. A task the thread let go may have gone
// to another thread, which alone may touch it.
func (th *thread) runs(t *taskrun.Active) bool {
	return th.running(t.ID()) == t
}

// punctuate carries out ActPunctuate: it asks the tasks that took input
// since the last pass, and those with a wall-clock punctuator due, to run
// their due punctuators (taskrun.Punctuations).
func (th *thread) punctuate() error {
	ran, err := th.puncts.Run(time.Now(), th.runs)
	for _, t := range ran {
		th.noteWorked(t)
	}
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	return nil
}

// commitTasks returns, sorted by ID, the running tasks a commit has
// anything to do for (taskrun.Active.CommitNeeded): of the tasks noted
// since the last commit, not of every task the core names, and forgets
// the others. The slice is reused by the next call.
func (th *thread) commitTasks() []*taskrun.Active {
	out := th.commitBuf[:0]
	for t := range th.worked {
		if !th.runs(t) || !t.CommitNeeded() {
			delete(th.worked, t)
			continue
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *taskrun.Active) int { return a.ID().Compare(b.ID()) })
	th.commitBuf = out
	return out
}

// nextPunctuation is how long from now the thread may wait before a
// pass has a task to ask to punctuate; false when none is scheduled.
func (th *thread) nextPunctuation(now time.Time) (time.Duration, bool) {
	at, ok := th.puncts.Next()
	if !ok {
		return 0, false
	}
	return at.Sub(now), true
}
