package threadcore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/internal/story"
	"github.com/eddystreams/eddy/task"
)

// The interaction tests are the thread's stories told as text
// (testdata/*.txt, read by internal/story). A command is either "new" with
// the core's configuration or an event by its name (as EventKind prints
// it) with its arguments; the answer lists the actions, one a line, then
// the mode, phase and slots the core is left in.
func TestInteractions(t *testing.T) {
	story.Run(t, "testdata", func() func(string) []string {
		var c *Core
		return func(cmd string) []string {
			got, next := interact(c, cmd)
			if next != nil {
				c = next
			}
			return got
		}
	})
}

// interact runs one command against c and says what came of it; for
// "new" it also returns the new core.
func interact(c *Core, cmd string) (answer []string, next *Core) {
	fields := strings.Fields(cmd)
	if fields[0] == "new" {
		cfg, err := parseConfig(fields[1:])
		if err != nil {
			return []string{"error: " + err.Error()}, nil
		}
		c = New(cfg)
		return []string{describe(c)}, c
	}
	if c == nil {
		return []string{"error: no core yet: begin with new"}, nil
	}
	e, err := parseEvent(fields)
	if err != nil {
		return []string{"error: " + err.Error()}, nil
	}
	acts, err := landed(c, e)
	if err != nil {
		answer = append(answer, "error: "+err.Error())
	}
	for _, a := range acts {
		answer = append(answer, a.String())
	}
	return append(answer, describe(c)), nil
}

// describe is the core's state on one line: mode/phase, then each slot.
func describe(c *Core) string {
	s := fmt.Sprintf("> %s/%s", c.Mode(), c.Phase())
	if c.Settled() {
		s += " settled"
	}
	var ids []task.ID
	for _, st := range []Slot{Claiming, Waiting, Restoring, Running} {
		ids = append(ids, c.Tasks(st)...)
	}
	slices.SortFunc(ids, task.ID.Compare)
	for _, id := range ids {
		st, _ := c.Slot(id)
		s += fmt.Sprintf(" %s=%s", id, st)
	}
	return s
}

func parseConfig(args []string) (Config, error) {
	cfg := Config{CommitInterval: time.Second, JoinGrace: 200 * time.Millisecond, DrainedCommitDelay: 100 * time.Millisecond}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "eos":
			cfg.Guarantee = ExactlyOnce
		case "alo":
			cfg.Guarantee = AtLeastOnce
		case "cooperative":
			cfg.Cooperative = true
		case "interval":
			cfg.CommitInterval, err = time.ParseDuration(v)
		case "grace":
			cfg.JoinGrace, err = time.ParseDuration(v)
		case "delay":
			cfg.DrainedCommitDelay, err = time.ParseDuration(v)
		default:
			return cfg, fmt.Errorf("unknown setting %q", a)
		}
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", a, err)
		}
	}
	return cfg, nil
}

// parseEvent reads "Kind [task ...] [at=D] [n=N] [cause=C] [clean]
// [atend] [full] [producefailed]"; the first task fills Task, all of them
// Tasks.
func parseEvent(f []string) (Event, error) {
	var e Event
	kind := -1
	for k := EventKind(0); k < numEventKinds; k++ {
		if k.String() == f[0] {
			kind = int(k)
		}
	}
	if kind < 0 {
		return e, fmt.Errorf("unknown event %q", f[0])
	}
	e.Kind = EventKind(kind)
	for _, a := range f[1:] {
		k, v, hasValue := strings.Cut(a, "=")
		var err error
		switch {
		case !hasValue && k == "clean":
			e.Clean = true
		case !hasValue && k == "atend":
			e.Clock.InputAtEnd = true
		case !hasValue && k == "full":
			e.Clock.BudgetFull = true
		case !hasValue && k == "producefailed":
			e.Clock.ProduceFailed = true
		case !hasValue:
			var id task.ID
			if id, err = task.ParseID(a); err == nil {
				e.Tasks = append(e.Tasks, id)
				if len(e.Tasks) == 1 {
					e.Task = id
					e.Handle = "handle " + id.String()
				}
			}
		case k == "at":
			var d time.Duration
			d, err = time.ParseDuration(v)
			e.At = base.Add(d)
		case k == "n":
			e.N, err = strconv.Atoi(v)
		case k == "cause":
			err = fmt.Errorf("unknown cause %q", v)
			for c := range Cause(len(causeNames)) {
				if c.String() == v {
					e.Cause, err = c, nil
				}
			}
		default:
			err = fmt.Errorf("unknown argument")
		}
		if err != nil {
			return e, fmt.Errorf("%s: %w", a, err)
		}
	}
	return e, nil
}
