package iq

import (
	"net/http"
	"slices"
	"strings"
)

// TaskBackend is a Backend that can list the tasks it holds, which the
// HTTP server then serves at GET /v1/tasks.
type TaskBackend interface {
	Backend
	// LocalTasks describes every task of which the instance holds a
	// replica, active or not. Like LocalReplicas it must not wait for a
	// stream thread. The tasks come in the order they are to be shown.
	LocalTasks() []TaskInfo
}

// TaskInfo is one task an instance holds a replica of.
type TaskInfo struct {
	// Task is the task's ID, as "0_3".
	Task string
	// State is the replica's state in the runtime: created, restoring,
	// running, standby, warmup or parked.
	State string
	// Thread is the index of the stream thread the replica is held for,
	// -1 when none is.
	Thread int
	// Stores are the task's store partitions.
	Stores []TaskStore
}

// TaskStore is one store partition of a task: what GET /v1/lags says of
// it, and its size.
type TaskStore struct {
	ReplicaInfo
	// Bytes and Keys are the store's size on disk and approximate key
	// count as last measured; -1 when not known.
	Bytes, Keys int64
}

// wireTasks is the answer to GET /v1/tasks.
type wireTasks struct {
	Instance string     `json:"instance"`
	Tasks    []wireTask `json:"tasks"`
}

type wireTask struct {
	Task   string          `json:"task"`
	State  string          `json:"state"`
	Thread *int            `json:"thread"`
	Stores []wireTaskStore `json:"stores"`
}

// wireTaskStore is a store partition as /v1/lags shows it, with its size.
type wireTaskStore struct {
	wireLag
	Bytes *int64 `json:"bytes"`
	Keys  *int64 `json:"keys"`
}

func toWireTasks(self string, tasks []TaskInfo) wireTasks {
	out := wireTasks{Instance: self, Tasks: make([]wireTask, 0, len(tasks))}
	for _, t := range tasks {
		wt := wireTask{Task: t.Task, State: t.State, Stores: make([]wireTaskStore, 0, len(t.Stores))}
		if t.Thread >= 0 {
			wt.Thread = &t.Thread
		}
		for _, s := range t.Stores {
			wt.Stores = append(wt.Stores, wireTaskStore{wireLag: toWireLag(s.ReplicaInfo), Bytes: orNull(s.Bytes), Keys: orNull(s.Keys)})
		}
		slices.SortFunc(wt.Stores, func(a, b wireTaskStore) int { return strings.Compare(a.Store, b.Store) })
		out.Tasks = append(out.Tasks, wt)
	}
	return out
}

func (s *Server) handleTasks(w http.ResponseWriter, _ *http.Request) {
	tb, ok := s.b.(TaskBackend)
	if !ok {
		writeErr(w, invalidf("this instance's backend does not list its tasks"))
		return
	}
	writeJSON(w, http.StatusOK, toWireTasks(s.self(), tb.LocalTasks()))
}
