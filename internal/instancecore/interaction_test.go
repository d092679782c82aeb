package instancecore

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// The interaction tests are the registry's stories told as text:
// testdata/*.txt holds blocks of one command, a line "----", and what the
// core answered, each block ended by a blank line; lines starting with #
// before a command say what the block shows. A command is "new" with the
// number of threads and the directories on disk, or an event by its name
// (as EventKind prints it) with its arguments. The answer lists the
// actions, one a line, then the state the core is left in: its mode, each
// replica (state, owning thread, I/O in flight) and the directories left
// on disk. -update rewrites the answers from what the core now does, for
// a reader to check against DESIGN before committing them.
var update = flag.Bool("update", false, "rewrite testdata answers from the core's behaviour")

// story is one command of a file and its answer.
type story struct {
	comments []string
	cmd      string
	want     []string
	line     int
}

func TestInteractions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no interaction files (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			blocks := readStories(t, f)
			var c *Core
			for i := range blocks {
				b := &blocks[i]
				got, next := interact(c, b.cmd)
				if next != nil {
					c = next
				}
				if *update {
					b.want = got
					continue
				}
				if !slices.Equal(got, b.want) {
					t.Errorf("%s:%d: %s\n got:\n  %s\n want:\n  %s", f, b.line, b.cmd,
						strings.Join(got, "\n  "), strings.Join(b.want, "\n  "))
					return // the blocks after it start from its state
				}
			}
			if *update {
				writeStories(t, f, blocks)
			}
		})
	}
}

func readStories(t *testing.T, name string) []story {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []story
	var cur story
	var comments []string
	answering := false
	flush := func(n int) {
		if cur.cmd == "" {
			return
		}
		if !answering && !*update {
			t.Fatalf("%s:%d: %q has no answer", name, n, cur.cmd)
		}
		out, cur, answering = append(out, cur), story{}, false
	}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case answering && line == "":
			flush(n)
		case answering:
			cur.want = append(cur.want, line)
		case line == "":
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		case line == "----":
			if cur.cmd == "" {
				t.Fatalf("%s:%d: an answer with no command", name, n)
			}
			answering = true
		default:
			flush(n)
			cur, comments = story{comments: comments, cmd: line, line: n}, nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush(n)
	return out
}

func writeStories(t *testing.T, name string, blocks []story) {
	t.Helper()
	var sb strings.Builder
	for i, b := range blocks {
		if i > 0 {
			sb.WriteString("\n")
		}
		for _, c := range b.comments {
			sb.WriteString(c + "\n")
		}
		sb.WriteString(b.cmd + "\n----\n")
		for _, w := range b.want {
			sb.WriteString(w + "\n")
		}
	}
	if err := os.WriteFile(name, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
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
// directories left on disk.
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
	for _, id := range slices.SortedFunc(mapKeys(c.onDisk), task.ID.Compare) {
		disk = append(disk, id.String())
	}
	if len(disk) > 0 {
		fmt.Fprintf(&sb, " disk[%s]", strings.Join(disk, " "))
	}
	return sb.String()
}

// parseNew reads "threads=N [disk=ID,ID...]".
func parseNew(args []string) (*Core, error) {
	threads := 1
	var disk []task.ID
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "threads":
			threads, err = strconv.Atoi(v)
		case "disk":
			disk, err = parseIDs(v)
		default:
			err = fmt.Errorf("unknown setting")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
	}
	return New(threads, disk), nil
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

// parseEvent reads "Kind [tN] [ID] [active=IDs] [standby=IDs]
// [warmup=IDs] [store=ID/name] [window=ID/name] [committed] [demoted]
// [ok] [disk] [replaced]".
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
			e.Thread, err = strconv.Atoi(a[1:])
		case !hasValue:
			e.Task, err = task.ParseID(a)
		case k == "active":
			e.Share.Active, err = parseIDs(v)
		case k == "standby":
			e.Share.Standby, err = parseIDs(v)
		case k == "warmup":
			e.Share.Warmup, err = parseIDs(v)
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
