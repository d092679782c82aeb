package taskrun

import (
	"container/heap"
	"fmt"
	"time"
)

// Punctuations decides which of a thread's running tasks a pass asks to
// punctuate. A task's stream-time punctuators fall due only when it
// processes records, and its wall-clock ones at the times they name; so a
// pass asks the tasks marked since the last one (Check: they took input,
// or just started running) and those whose earliest wall-clock punctuator
// is due, which a heap keeps by that time. An idle thread's pass asks
// none, however many tasks it holds, where asking each task at each pass
// (as Kafka Streams' TaskManager.punctuate does) made an idle instance of
// thousands of tasks spend a share of a core on it.
//
// The schedule does not follow tasks leaving the thread: Run asks only
// those its caller still owns, and drops the others' entries as they come
// up. It is not safe for concurrent use.
type Punctuations struct {
	due dueHeap
	// next is each task's live time in due. An entry whose time differs
	// (the task's schedule moved since) is stale: it is dropped when it
	// comes up.
	next  map[*Active]time.Time
	check []*Active
	batch []*Active
	ran   []*Active
	asked int64
}

type dueEntry struct {
	at time.Time
	t  *Active
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*h = old[:len(old)-1]
	return e
}

// Check has the next Run ask t whatever its wall-clock schedule: it took
// input (its stream time may have moved) or just started running (its
// processors scheduled punctuators as they were made).
func (p *Punctuations) Check(t *Active) { p.check = append(p.check, t) }

// Run asks the tasks marked by Check and those whose wall-clock
// punctuators are due at now to punctuate, each once, of those owns
// reports the caller runs; it then schedules each by its next wall-clock
// punctuator. It returns the tasks whose punctuators ran (which need a
// commit), valid until the next Run, and stops at the first error.
func (p *Punctuations) Run(now time.Time, owns func(*Active) bool) ([]*Active, error) {
	clear(p.ran)
	p.ran = p.ran[:0]
	// The due tasks are taken out of the heap before any is asked, so
	// that one rescheduled at or before now is not asked again.
	batch := p.batch[:0]
	for len(p.due) > 0 && !p.due[0].at.After(now) {
		e := heap.Pop(&p.due).(dueEntry)
		if at, ok := p.next[e.t]; !ok || !at.Equal(e.at) {
			continue
		}
		delete(p.next, e.t)
		batch = append(batch, e.t)
	}
	batch = append(batch, p.check...)
	clear(p.check)
	p.check = p.check[:0]
	defer func() {
		clear(batch)
		p.batch = batch[:0]
	}()
	for _, t := range batch {
		if !owns(t) {
			continue
		}
		p.asked++
		before := t.Punctuations()
		if err := t.Punctuate(now); err != nil {
			return p.ran, fmt.Errorf("task %s punctuate: %w", t.ID(), err)
		}
		if t.Punctuations() != before {
			p.ran = append(p.ran, t)
		}
		p.schedule(t)
	}
	return p.ran, nil
}

// schedule queues t at its next wall-clock punctuation, unless it is
// queued there already.
func (p *Punctuations) schedule(t *Active) {
	at, ok := t.NextWallClockPunctuation()
	if !ok {
		delete(p.next, t)
		return
	}
	if cur, queued := p.next[t]; queued && cur.Equal(at) {
		return
	}
	if p.next == nil {
		p.next = make(map[*Active]time.Time)
	}
	p.next[t] = at
	heap.Push(&p.due, dueEntry{at: at, t: t})
}

// Next is when the next Run has a task to ask: the zero time when tasks
// are marked by Check, the earliest wall-clock punctuation queued
// otherwise; false when nothing is queued.
func (p *Punctuations) Next() (time.Time, bool) {
	if len(p.check) > 0 {
		return time.Time{}, true
	}
	for len(p.due) > 0 {
		e := p.due[0]
		if at, ok := p.next[e.t]; ok && at.Equal(e.at) {
			return e.at, true
		}
		heap.Pop(&p.due)
	}
	return time.Time{}, false
}

// Asked counts the tasks Run asked to punctuate so far.
func (p *Punctuations) Asked() int64 { return p.asked }
