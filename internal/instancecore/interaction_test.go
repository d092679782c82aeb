package instancecore

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/internal/story"
	"github.com/eddystreams/eddy/task"
)

// The interaction tests are the registry's stories told as text
// (testdata/*.txt, read by internal/story). A command is "new" with the
// number of threads and the directories on disk, or an event by its name
// (as EventKind prints it) with its arguments. The answer lists the
// actions, one a line, then the state the core is left in: its mode, each
// replica (state, owning thread, I/O in flight) and the directories left
// on disk. Check rewritten answers against DESIGN before committing them.
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

// interact runs one command against c and says what came of it; "new"
// also returns the new core.
func interact(c *Core, cmd string) (answer []string, next *Core) {
	fields := strings.Fields(cmd)
	if fields[0] == "new" {
		next, err := parseNew(fields[1:])
		if err != nil {
			return []string{"error: " + err.Error()}, nil
		}
		return []string{describe(next)}, next
	}
	if c == nil {
		return []string{"error: no core yet: begin with new"}, nil
	}
	e, err := parseEvent(fields)
	if err != nil {
		return []string{"error: " + err.Error()}, nil
	}
	out, err := c.Step(e)
	if err != nil {
		answer = append(answer, "error: "+err.Error())
	}
	for _, a := range out {
		answer = append(answer, a.String())
	}
	return append(answer, describe(c)), nil
}

// describe is the core's state on one line: its mode, each replica as
// id=State, its owner (tN) and its work in flight in brackets, then the
// directories left on disk, each with when it expires.
func describe(c *Core) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "> %s", c.Mode())
	for _, id := range c.Tasks() {
		r, _ := c.Replica(id)
		fmt.Fprintf(&sb, " %s=%s", id, r.State)
		if r.Owner >= 0 {
			fmt.Fprintf(&sb, "(t%d)", r.Owner)
		}
		if r.Work != Idle {
			fmt.Fprintf(&sb, "[%s", r.Work)
			if r.Work == Opening || r.Work == Adopting {
				fmt.Fprintf(&sb, " as %s", r.As)
			}
			sb.WriteString("]")
		}
	}
	var disk []string
	for _, id := range slices.SortedFunc(maps.Keys(c.onDisk), task.ID.Compare) {
		at, _ := c.Expiry(id)
		disk = append(disk, fmt.Sprintf("%s@%s", id, at.Sub(clock(0))))
	}
	if len(disk) > 0 {
		fmt.Fprintf(&sb, " disk[%s]", strings.Join(disk, " "))
	}
	return sb.String()
}

// parseNew reads "threads=N [delay=DURATION] [disk=ID,ID...]
// [policy=POLICY] [replacements=N] [window=DURATION]": the directories on
// disk were left at the zero time, where the core's clock starts; the
// cleanup delay is testDelay unless given; the policy is named as
// ThreadPolicy prints it.
func parseNew(args []string) (*Core, error) {
	cfg := Config{Threads: 1, CleanupDelay: testDelay}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "threads":
			cfg.Threads, err = strconv.Atoi(v)
		case "delay":
			cfg.CleanupDelay, err = time.ParseDuration(v)
		case "disk":
			var disk []task.ID
			disk, err = parseIDs(v)
			for _, id := range disk {
				cfg.OnDisk = append(cfg.OnDisk, Dir{Task: id})
			}
		case "policy":
			err = fmt.Errorf("unknown policy")
			for p := range ThreadPolicy(len(policyNames)) {
				if p.String() == v {
					cfg.OnThreadFailure, err = p, nil
				}
			}
		case "replacements":
			cfg.MaxReplacements, err = strconv.Atoi(v)
		case "window":
			cfg.ReplacementWindow, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown setting")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
	}
	return New(cfg), nil
}

func parseIDs(s string) ([]task.ID, error) {
	var out []task.ID
	for p := range strings.SplitSeq(s, ",") {
		if p == "" {
			continue
		}
		id, err := task.ParseID(p)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// parseEvent reads "Kind [tN[#incarnation]] [ID] [at=DURATION]
// [active=IDs] [standby=IDs] [warmup=IDs] [store=ID/name]
// [window=ID/name] [failure=TEXT] [committed] [demoted] [ok] [disk]
// [replaced]"; at is the event's time past the zero time.
func parseEvent(f []string) (Event, error) {
	var e Event
	kind := -1
	for k := range numEventKinds {
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
		case !hasValue && a == "committed":
			e.Committed = true
		case !hasValue && a == "demoted":
			e.Demoted = true
		case !hasValue && a == "ok":
			e.OK = true
		case !hasValue && a == "disk":
			e.LeftOnDisk = true
		case !hasValue && a == "replaced":
			e.Replaced = true
		case !hasValue && strings.HasPrefix(a, "t"):
			th, inc, hasInc := strings.Cut(a[1:], "#")
			e.Thread, err = strconv.Atoi(th)
			if err == nil && hasInc {
				e.Incarnation, err = strconv.Atoi(inc)
			}
		case k == "at":
			var d time.Duration
			d, err = time.ParseDuration(v)
			e.At = clock(d)
		case !hasValue:
			e.Task, err = task.ParseID(a)
		case k == "active":
			e.Share.Active, err = parseIDs(v)
		case k == "standby":
			e.Share.Standby, err = parseIDs(v)
		case k == "warmup":
			e.Share.Warmup, err = parseIDs(v)
		case k == "failure":
			e.Failure = v
		case k == "store" || k == "window":
			id, name, _ := strings.Cut(v, "/")
			var s AheadStore
			s.Task, err = task.ParseID(id)
			s.Name, s.Windowed = name, k == "window"
			e.Stores = append(e.Stores, s)
		default:
			err = fmt.Errorf("unknown argument")
		}
		if err != nil {
			return e, fmt.Errorf("%s: %w", a, err)
		}
	}
	return e, nil
}
