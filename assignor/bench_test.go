package assignor

import (
	"fmt"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// benchInput builds 100 clients and 1000 stateful tasks (100 sub-topologies
// of 10 partitions).
func benchInput(zones int) Input { return benchInputSized(100, 100, zones) }

// benchInputSized builds clients clients and subs sub-topologies of 10
// stateful partitions each.
func benchInputSized(clients, subs, zones int) Input {
	in := Input{Tasks: map[task.ID]TaskInfo{}, Clients: map[string]ClientState{}}
	for sub := range subs {
		for p := range 10 {
			in.Tasks[tid(sub, int32(p))] = TaskInfo{Stateful: true}
		}
	}
	for c := range clients {
		cs := ClientState{Capacity: 1 + c%2}
		if zones > 0 {
			cs.Tags = map[string]string{"zone": fmt.Sprint(c % zones)}
		}
		in.Clients[fmt.Sprintf("client-%04d", c)] = cs
	}
	return in
}

func BenchmarkAssign(b *testing.B) {
	run := func(name string, cfg Config, in Input) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				Assign(cfg, in)
			}
		})
	}
	for _, zones := range []int{0, 3} {
		cfg := DefaultConfig()
		cfg.NumStandbys = 2
		if zones > 0 {
			cfg.RackAwareTags = []string{"zone"}
		}
		fresh := benchInput(zones)
		stable := next(fresh, Assign(cfg, fresh))
		lost := next(fresh, Assign(cfg, fresh))
		delete(lost.Clients, "client-0042")
		joined := next(fresh, Assign(cfg, fresh))
		joined.Clients["client-new"] = ClientState{Capacity: 2}
		for _, sc := range []struct {
			name string
			in   Input
		}{{"new-group", fresh}, {"stable", stable}, {"client-lost", lost}, {"client-joined", joined}} {
			run(fmt.Sprintf("100x1000x2/zones=%d/%s", zones, sc.name), cfg, sc.in)
		}
	}
	// Two tag keys: three zones and, across them, ten racks.
	cfg2 := DefaultConfig()
	cfg2.NumStandbys = 2
	cfg2.RackAwareTags = []string{"zone", "rack"}
	two := benchInput(3)
	for id, cs := range two.Clients {
		var n int
		fmt.Sscanf(id, "client-%d", &n)
		cs.Tags["rack"] = fmt.Sprint(n % 10)
		two.Clients[id] = cs
	}
	run("100x1000x2/zones=3,racks=10/new-group", cfg2, two)
	run("100x1000x2/zones=3,racks=10/stable", cfg2, next(two, Assign(cfg2, two)))
	// 1,000 clients and 10,000 tasks over three zones.
	cfg := DefaultConfig()
	cfg.NumStandbys = 2
	cfg.RackAwareTags = []string{"zone"}
	fresh := benchInputSized(1000, 1000, 3)
	stable := next(fresh, Assign(cfg, fresh))
	lost := next(fresh, Assign(cfg, fresh))
	delete(lost.Clients, "client-0042")
	joined := next(fresh, Assign(cfg, fresh))
	joined.Clients["client-new"] = ClientState{Capacity: 2, Tags: map[string]string{"zone": "0"}}
	// The round after the join, its target handed on.
	probing := next(joined, Assign(cfg, joined))
	for _, sc := range []struct {
		name string
		in   Input
	}{{"new-group", fresh}, {"stable", stable}, {"client-lost", lost}, {"client-joined", joined}, {"probing", probing}} {
		run("1000x10000x2/zones=3/"+sc.name, cfg, sc.in)
	}
	// The same with 1,000 stateless tasks beside, one client lost: the
	// stateless tasks balance the total load and the lost client's
	// stateful actives are re-targeted where that spares stateless moves.
	for sub := range 100 {
		for p := range 10 {
			fresh.Tasks[tid(1000+sub, int32(p))] = TaskInfo{}
		}
	}
	lost = next(fresh, Assign(cfg, fresh))
	delete(lost.Clients, "client-0042")
	run("1000x10000x2/zones=3,stateless=1000/client-lost", cfg, lost)
	// A client joins: which clients give up its share is chosen where
	// that spares stateless moves.
	joined = next(fresh, Assign(cfg, fresh))
	joined.Clients["client-new"] = ClientState{Capacity: 2, Tags: map[string]string{"zone": "0"}}
	run("1000x10000x2/zones=3,stateless=1000/client-joined", cfg, joined)
}
