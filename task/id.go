// Package task holds Eddy's unit of work: a task is one partition of one
// sub-topology, named "<subtopology>_<partition>". This file defines task IDs;
// the rest of the package holds active and standby tasks and their state
// machines.
package task

import (
	"cmp"
	"fmt"
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
