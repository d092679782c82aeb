package assignor

import (
	"fmt"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// benchInput builds 100 clients and 1000 stateful tasks (100 sub-topologies
// of 10 partitions).
func benchInput(zones int) Input {
	in := Input{Tasks: map[task.ID]TaskInfo{}, Clients: map[string]ClientState{}}
	for sub := range 100 {
		for p := range 10 {
			in.Tasks[tid(sub, int32(p))] = TaskInfo{Stateful: true}
		}
	}
	for c := range 100 {
		cs := ClientState{Capacity: 1 + c%2}
		if zones > 0 {
			cs.Tags = map[string]string{"zone": fmt.Sprint(c % zones)}
		}
		in.Clients[fmt.Sprintf("client-%03d", c)] = cs
	}
	return in
}

func BenchmarkAssign(b *testing.B) {
	for _, zones := range []int{0, 3} {
		cfg := DefaultConfig()
		cfg.NumStandbys = 2
		if zones > 0 {
			cfg.RackAwareTags = []string{"zone"}
		}
		fresh := benchInput(zones)
		stable := next(fresh, Assign(cfg, fresh))
		lost := next(fresh, Assign(cfg, fresh))
		delete(lost.Clients, "client-042")
		joined := next(fresh, Assign(cfg, fresh))
		joined.Clients["client-new"] = ClientState{Capacity: 2}
		for _, sc := range []struct {
			name string
			in   Input
		}{{"new-group", fresh}, {"stable", stable}, {"client-lost", lost}, {"client-joined", joined}} {
			b.Run(fmt.Sprintf("100x1000x2/zones=%d/%s", zones, sc.name), func(b *testing.B) {
				for b.Loop() {
					Assign(cfg, sc.in)
				}
			})
		}
	}
}
