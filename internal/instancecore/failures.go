package instancecore

import (
	"fmt"
	"time"
)

// ThreadPolicy says what becomes of a stream thread that stopped on an
// error it cannot get past (EvThreadFailed).
type ThreadPolicy uint8

const (
	// StopThread: the thread stops for good with its error, and with it
	// the instance.
	StopThread ThreadPolicy = iota
	// ReplaceThread: a new incarnation takes the thread's index, as long
	// as the replacement budget lasts (Config.MaxReplacements).
	ReplaceThread
	// ShutdownApplication: the thread halts, and the instance asks every
	// instance of the application to shut down.
	ShutdownApplication
)

var policyNames = [...]string{"stop-thread", "replace-thread", "shutdown-application"}

func (p ThreadPolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("ThreadPolicy(%d)", p)
}

// streak is the instance's run of the same thread failure: whichever
// thread meets it, a failure that keeps coming back uses up one budget,
// so that a poison record cannot turn into an endless loop of
// replacements by moving from thread to thread.
type streak struct {
	failure string
	count   int
	last    time.Time
}

// record counts a failure at now and returns how many times in a row it
// has happened: a different failure, or one more than the window after
// the last, starts a new run.
func (s *streak) record(failure string, now time.Time, window time.Duration) int {
	if s.count == 0 || failure != s.failure || now.Sub(s.last) > window {
		s.failure, s.count = failure, 0
	}
	s.count++
	s.last = now
	return s.count
}

// threadFailed answers a thread's failure with what its policy says; a
// replacement past the budget stops the thread instead, with the count.
func (c *Core) threadFailed(e Event) {
	a := Action{Thread: e.Thread}
	switch c.cfg.OnThreadFailure {
	case ReplaceThread:
		a.Failures = c.streak.record(e.Failure, c.now, c.cfg.ReplacementWindow)
		a.Kind = ActReplaceThread
		if a.Failures > c.cfg.MaxReplacements {
			a.Kind = ActStopThread
		}
	case ShutdownApplication:
		a.Kind = ActShutdownApplication
	default:
		a.Kind = ActStopThread
	}
	c.emit(a)
}
