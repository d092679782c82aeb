// Package task names Eddy's unit of work: a task is one partition of one
// sub-topology, named "<subtopology>_<partition>", with its state in its own
// folder under the application's state directory. Queries, the assignor
// and the runtime's reports speak of tasks by ID, and of an active task's
// life by State. (How a task runs, active or standby, is the runtime's
// business: internal/taskrun.)
package task

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ID identifies a task: partition Partition of sub-topology SubTopology.
type ID struct {
	SubTopology int
	Partition   int32
}

// String returns "<subtopology>_<partition>", the form used in logs, state
// directory names and wire formats.
func (id ID) String() string {
	return strconv.Itoa(id.SubTopology) + "_" + strconv.Itoa(int(id.Partition))
}

// ParseID parses the form String produces.
func ParseID(s string) (ID, error) {
	a, b, ok := strings.Cut(s, "_")
	if !ok {
		return ID{}, fmt.Errorf("task: malformed task ID %q: want <subtopology>_<partition>", s)
	}
	st, err := strconv.Atoi(a)
	if err != nil || st < 0 {
		return ID{}, fmt.Errorf("task: malformed sub-topology in task ID %q", s)
	}
	p, err := strconv.ParseInt(b, 10, 32)
	if err != nil || p < 0 {
		return ID{}, fmt.Errorf("task: malformed partition in task ID %q", s)
	}
	return ID{SubTopology: st, Partition: int32(p)}, nil
}

// Compare orders IDs by sub-topology, then partition.
func (id ID) Compare(o ID) int {
	if c := cmp.Compare(id.SubTopology, o.SubTopology); c != 0 {
		return c
	}
	return cmp.Compare(id.Partition, o.Partition)
}

// Dir returns a task's directory under an application state directory.
func Dir(appDir string, id ID) string { return filepath.Join(appDir, id.String()) }
