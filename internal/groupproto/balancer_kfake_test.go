package groupproto

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/task"
)

// TestBalancerWithKfake runs two kgo clients in one group on the in-process
// broker with the Balancer and checks that they split the tasks: whole tasks
// (all source topics of a partition together), disjoint, covering all; both
// with the consumer framing and with one member in the bare framing of older
// builds, as in a rolling upgrade.
func TestBalancerWithKfake(t *testing.T) {
	for _, tc := range []struct {
		name string
		bare bool // proc-1 subscribes in FramingBare
	}{{"consumer framing", false}, {"bare and consumer framing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const parts = 4
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "left", "right", "events"))
			require.NoError(t, err)
			t.Cleanup(cluster.Close) // runs after the clients' cleanups
			tasks, changelogs := testTopology(parts, parts)

			type state struct {
				mu       sync.Mutex
				assigned map[string][]int32
				info     AssignmentInfo
			}
			start := func(process string, bare bool) (*kgo.Client, *state) {
				st := &state{}
				b, err := NewBalancer(BalancerConfig{
					Subscription: func() SubscriptionInfo {
						return SubscriptionInfo{ProcessID: process, Endpoint: process + ":8080", Capacity: 1}
					},
					Tasks:        tasks,
					Changelogs:   changelogs,
					Assignor:     assignor.DefaultConfig(),
					OnAssignment: func(a AssignmentInfo) { st.mu.Lock(); st.info = a; st.mu.Unlock() },
					BareFraming:  bare,
				})
				require.NoError(t, err)
				cl, err := kgo.NewClient(
					kgo.SeedBrokers(cluster.ListenAddrs()...),
					kgo.ConsumerGroup("eddy-balancer-test"),
					kgo.ConsumeTopics("left", "right", "events"),
					kgo.Balancers(b),
					kgo.HeartbeatInterval(100*time.Millisecond),
					// Cooperative members are told only what they gain and
					// what they lose; eager ones lose everything first.
					kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
						st.mu.Lock()
						if st.assigned == nil {
							st.assigned = map[string][]int32{}
						}
						for topic, ps := range m {
							st.assigned[topic] = slices.Sorted(slices.Values(slices.Concat(st.assigned[topic], ps)))
						}
						st.mu.Unlock()
					}),
					kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
						st.mu.Lock()
						for topic, ps := range m {
							st.assigned[topic] = slices.DeleteFunc(st.assigned[topic], func(p int32) bool { return slices.Contains(ps, p) })
							if len(st.assigned[topic]) == 0 {
								delete(st.assigned, topic)
							}
						}
						st.mu.Unlock()
					}),
				)
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					for ctx.Err() == nil {
						cl.PollFetches(ctx)
					}
				}()
				t.Cleanup(func() { cancel(); <-done; cl.Close() })
				return cl, st
			}

			cl1, s1 := start("proc-1", tc.bare)
			_, s2 := start("proc-2", false)

			var last string
			settled := func() bool {
				got := map[string]map[string][]int32{}
				infos := map[string]AssignmentInfo{}
				for name, s := range map[string]*state{"proc-1": s1, "proc-2": s2} {
					// A copy: the callbacks change the map and its
					// slices in place while this reads them.
					s.mu.Lock()
					cp := make(map[string][]int32, len(s.assigned))
					for topic, ps := range s.assigned {
						cp[topic] = slices.Clone(ps)
					}
					got[name], infos[name] = cp, s.info
					s.mu.Unlock()
				}
				last = fmt.Sprintf("assigned %v, infos %v", got, infos)
				if len(got["proc-1"]) == 0 || len(got["proc-2"]) == 0 {
					return false
				}
				owner := map[task.ID]string{}
				for name, parts := range got {
					for tk, topics := range tasks {
						n := 0
						for _, topic := range topics {
							for _, p := range parts[topic] {
								if p == tk.Partition {
									n++
								}
							}
						}
						if n != 0 && n != len(topics) {
							return false // part of a task: not settled, or wrong
						}
						if n > 0 {
							if owner[tk] != "" {
								return false
							}
							owner[tk] = name
						}
					}
					if !equalIDs(infos[name].Active, tasksOf(owner, name)) {
						return false
					}
				}
				return len(owner) == len(tasks)
			}
			deadline := time.Now().Add(15 * time.Second)
			for !settled() {
				require.True(t, time.Now().Before(deadline), "no settled split; last seen: %s", last)
				time.Sleep(20 * time.Millisecond)
			}

			s1.mu.Lock()
			defer s1.mu.Unlock()
			require.Len(t, s1.info.Active, parts, "balanced: half of the %d tasks each", 2*parts)
			epoch := s1.info.Epoch

			// The group stores each member's data in the framing it chose.
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{"eddy-balancer-test"}
			resp, err := req.RequestWith(context.Background(), cl1)
			require.NoError(t, err)
			require.Len(t, resp.Groups, 1)
			require.Len(t, resp.Groups[0].Members, 2)
			framings := map[Framing]int{}
			for _, m := range resp.Groups[0].Members {
				gs, err := DecodeGroupSubscription(m.ProtocolMetadata)
				require.NoError(t, err)
				ga, err := DecodeGroupAssignment(m.MemberAssignment)
				require.NoError(t, err)
				require.Equal(t, gs.Framing, ga.Framing, "a member is answered in its own framing")
				framings[gs.Framing]++
			}
			if tc.bare {
				require.Equal(t, map[Framing]int{FramingBare: 1, FramingConsumer: 1}, framings)
			} else {
				require.Equal(t, map[Framing]int{FramingConsumer: 2}, framings)
			}

			// The broker's description of the settled group is the
			// routing table of the balance both members were given.
			r, err := GroupRouting(resp.Groups[0])
			require.NoError(t, err)
			require.Equal(t, epoch, r.Epoch)
			require.Len(t, r.Active, 2)
			s2.mu.Lock()
			defer s2.mu.Unlock()
			require.Equal(t, epoch, s2.info.Epoch)
			require.Equal(t, s1.info.Active, r.Active["proc-1:8080"])
			require.Equal(t, s2.info.Active, r.Active["proc-2:8080"])
		})
	}
}

func tasksOf(owner map[task.ID]string, name string) []task.ID {
	var out []task.ID
	for tk, o := range owner {
		if o == name {
			out = append(out, tk)
		}
	}
	return sortedIDs(out)
}

func equalIDs(a, b []task.ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
