package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
)

// Assignments carry only each member's own tasks (wire version 3); every
// instance rebuilds the group's routing table from DescribeGroups. Three
// instances with a standby per task: after every rebalance (the group
// forming, a member leaving, a member joining) each instance's routing
// table is the whole group's, the one the broker's description of the
// group gives, and routed queries through any instance answer every key.
func TestIQRoutingTableFromGroupDescription(t *testing.T) {
	c := newCluster(t, 6)
	cfg := instanceConfig{standbys: 1, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg), c.startIQNode(t, "c", cfg)}
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(31, 300).Lines(3000, want))
	c.waitCaughtUp(t, "wc")

	check := func(nodes []*iqNode) {
		t.Helper()
		lay := c.iqWaitLayout(t, nodes, 1)
		c.iqWaitRoutingIsGroups(t, nodes)
		for _, n := range nodes {
			a, ok := n.Assignment()
			require.True(t, ok)
			require.Equal(t, int32(3), a.Version, "%s: all members speak version 3", n.name)
			require.NotZero(t, a.Epoch)
			require.Len(t, a.PartitionsByHost, len(nodes), "%s: the assignment's host maps, rebuilt from the group", n.name)
		}
		// Routed through any instance, every key answers from its
		// partition's active.
		for _, seed := range nodes {
			qc, err := iq.NewClient([]string{seed.addr}, iq.ClientOptions{})
			require.NoError(t, err)
			for _, w := range slices.Sorted(maps.Keys(want)) {
				res, err := iq.ClientGet[string, int64](ctx(t), qc, countsStore, w, serde.String)
				require.NoError(t, err, "%s through %s", w, seed.name)
				require.True(t, res.Found, w)
				require.Equal(t, want[w], res.Value, w)
				require.Equal(t, lay[iqWordPartition(w, c.partitions)].active.addr, res.Provenance.Host, w)
			}
			qc.Close()
		}
	}
	check(nodes)

	// A member leaves.
	nodes[2].close(t)
	nodes = nodes[:2]
	check(nodes)

	// A member joins.
	nodes = append(nodes, c.startIQNode(t, "d", cfg))
	check(nodes)
}

// iqWaitRoutingIsGroups waits until every node's routing table is the
// one the group's description gives: the same hosts, each holding the
// same counts partitions in each role.
func (c *cluster) iqWaitRoutingIsGroups(t *testing.T, nodes []*iqNode) {
	t.Helper()
	waitFor(t, settleTimeout, "every instance routing on the group's table", func() (bool, string) {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"wc"}
		resp, err := req.RequestWith(ctx(t), c.cl)
		if err != nil || len(resp.Groups) != 1 {
			return false, fmt.Sprintf("describe: %v", err)
		}
		r, err := groupproto.GroupRouting(resp.Groups[0])
		if err != nil {
			return false, err.Error()
		}
		counts := func(m map[string][]iq.StorePartition) map[string][]int32 {
			out := make(map[string][]int32)
			for h, sps := range m {
				out[h] = nil
				for _, sp := range sps {
					if sp.Store == countsStore {
						out[h] = append(out[h], sp.Partition)
					}
				}
				slices.Sort(out[h])
			}
			return out
		}
		group := make(map[string]map[string][]int32) // role -> host -> partitions
		for role, hm := range map[string]map[string][]task.ID{"active": r.Active, "standby": r.Standby, "warmup": r.Warmup} {
			group[role] = make(map[string][]int32)
			for h, ids := range hm {
				group[role][h] = nil
				for _, id := range ids {
					if id.SubTopology == countsTask(0).SubTopology {
						group[role][h] = append(group[role][h], id.Partition)
					}
				}
			}
		}
		var probs []string
		for _, n := range nodes {
			md, err := n.Queries().Metadata()
			if err != nil {
				probs = append(probs, fmt.Sprintf("%s: %v", n.name, err))
				continue
			}
			byRole := map[string]map[string][]iq.StorePartition{"active": {}, "standby": {}, "warmup": {}}
			for _, h := range md.Hosts {
				byRole["active"][h.Host] = h.Active
				byRole["standby"][h.Host] = h.Standby
				if len(h.Warmup) > 0 {
					byRole["warmup"][h.Host] = h.Warmup
				}
			}
			for role, hm := range byRole {
				if got := counts(hm); !maps.EqualFunc(got, group[role], slices.Equal) {
					probs = append(probs, fmt.Sprintf("%s routes %s counts partitions %v, the group (epoch %d) says %v", n.name, role, got, r.Epoch, group[role]))
				}
			}
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
}
