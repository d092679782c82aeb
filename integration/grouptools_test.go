package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/task"
)

// systemPython is Debian's interpreter, which python3-kafka installs into
// (not whatever python3 comes first on PATH).
const systemPython = "/usr/bin/python3"

// toolMember is one group member as a group-describing tool sees it.
type toolMember struct {
	id       string
	topics   []string
	assigned map[string][]int32
}

// TestGroupDescribableByKafkaTools runs three instances and describes their
// group the way Kafka tooling does, decoding member metadata and assignments
// as the standard consumer protocol: every member shows the source
// partitions it consumes, and together they cover each source partition
// exactly once.
func TestGroupDescribableByKafkaTools(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 4)
	insts := []*instance{
		c.start(t, "a", instanceConfig{stateDir: t.TempDir()}),
		c.start(t, "b", instanceConfig{stateDir: t.TempDir()}),
		c.start(t, "c", instanceConfig{stateDir: t.TempDir()}),
	}
	members := len(insts) * c.threads
	sources := []string{inputTopic, repartitionTopic(app)}
	slices.Sort(sources)

	// Every source partition, each on exactly one member.
	requireCover := func(ms []toolMember) (bool, string) {
		if len(ms) != members {
			return false, fmt.Sprintf("%d members, want %d", len(ms), members)
		}
		owner := map[string]string{}
		for _, m := range ms {
			if !slices.Equal(m.topics, sources) {
				return false, fmt.Sprintf("member %s subscribes to %v, want %v", m.id, m.topics, sources)
			}
			for topic, ps := range m.assigned {
				for _, p := range ps {
					k := fmt.Sprintf("%s/%d", topic, p)
					if o, dup := owner[k]; dup {
						return false, fmt.Sprintf("%s on %s and %s", k, o, m.id)
					}
					owner[k] = m.id
				}
			}
		}
		var missing []string
		for _, topic := range sources {
			for p := range c.partitions {
				if _, ok := owner[fmt.Sprintf("%s/%d", topic, p)]; !ok {
					missing = append(missing, fmt.Sprintf("%s/%d", topic, p))
				}
			}
		}
		return len(missing) == 0 && len(owner) == len(sources)*int(c.partitions),
			fmt.Sprintf("unassigned %v; owners %v", missing, owner)
	}

	t.Run("kadm and kmsg", func(t *testing.T) {
		ctx := ctx(t)
		waitFor(t, settleTimeout, "the described group to show every source partition on the member that runs it", func() (bool, string) {
			for _, in := range insts {
				if err := in.Err(); err != nil {
					t.Fatalf("instance %s failed: %v", in.name, err)
				}
			}
			described, err := c.adm.DescribeGroups(ctx, app)
			if err != nil {
				return false, err.Error()
			}
			g, ok := described[app]
			if !ok || g.Err != nil || g.State != "Stable" {
				return false, fmt.Sprintf("group %+v", g)
			}
			require.Equal(t, "consumer", g.ProtocolType)
			require.Equal(t, groupproto.ProtocolName, g.Protocol)
			raw, err := rawMembers(ctx, c, app)
			if err != nil {
				return false, err.Error()
			}

			var ms []toolMember
			byProcess := map[string][]task.ID{}
			for _, m := range g.Members {
				meta, ok := m.Join.AsConsumer()
				require.True(t, ok, "member %s metadata", m.MemberID)
				asg, ok := m.Assigned.AsConsumer()
				require.True(t, ok, "member %s assignment", m.MemberID)
				// kadm ignores decoding errors; decode the same bytes
				// strictly, as tools with a strict decoder do.
				rm, ok := raw[m.MemberID]
				if !ok {
					return false, "member " + m.MemberID + " missing from a second describe"
				}
				var strictMeta kmsg.ConsumerMemberMetadata
				require.NoError(t, strictMeta.ReadFrom(rm.ProtocolMetadata), "member %s metadata", m.MemberID)
				var strictAsg kmsg.ConsumerMemberAssignment
				require.NoError(t, strictAsg.ReadFrom(rm.MemberAssignment), "member %s assignment", m.MemberID)

				sub, err := groupproto.DecodeSubscription(meta.UserData)
				require.NoError(t, err, "member %s subscription user data", m.MemberID)
				info, err := groupproto.DecodeAssignment(asg.UserData)
				require.NoError(t, err, "member %s assignment user data", m.MemberID)
				require.Equal(t, groupproto.ErrNone, info.ErrorCode)

				tm := toolMember{id: m.MemberID, topics: slices.Sorted(slices.Values(meta.Topics)), assigned: map[string][]int32{}}
				for _, at := range asg.Topics {
					tm.assigned[at.Topic] = at.Partitions
				}
				// The listed partitions are exactly those of the member's
				// active tasks: sub-topology 0 reads the input, 1 the
				// repartition topic.
				want := map[string][]int32{}
				for _, id := range info.Active {
					topic := inputTopic
					if id.SubTopology == 1 {
						topic = repartitionTopic(app)
					}
					want[topic] = append(want[topic], id.Partition)
				}
				for topic := range want {
					slices.Sort(want[topic])
				}
				if !maps.EqualFunc(want, tm.assigned, slices.Equal) {
					return false, fmt.Sprintf("member %s lists %v but runs %v", m.MemberID, tm.assigned, info.Active)
				}
				byProcess[sub.ProcessID] = append(byProcess[sub.ProcessID], info.Active...)
				ms = append(ms, tm)
			}
			if ok, msg := requireCover(ms); !ok {
				return false, msg
			}
			// What the group shows is what each instance runs.
			for _, in := range insts {
				running, all := in.runningTasks()
				shown := slices.SortedFunc(slices.Values(byProcess[in.ProcessID()]), task.ID.Compare)
				if !all || !slices.Equal(running, shown) {
					return false, fmt.Sprintf("instance %s runs %v (all running: %v), the group shows %v", in.name, running, all, shown)
				}
			}
			return true, ""
		})
	})

	t.Run("kafka-python", func(t *testing.T) {
		if err := exec.Command(systemPython, "-c", "import kafka").Run(); err != nil {
			t.Skipf("%s cannot import kafka (install Debian's python3-kafka): %v", systemPython, err)
		}
		ctx := ctx(t)
		waitFor(t, settleTimeout, "kafka-python to describe the group with every source partition assigned", func() (bool, string) {
			ms, state, err := describeWithKafkaPython(ctx, strings.Join(c.b.Addrs(), ","), app)
			if err != nil {
				return false, err.Error()
			}
			if state != "Stable" {
				return false, "group state " + state
			}
			return requireCover(ms)
		})
	})
}

// rawMembers describes the group with a plain DescribeGroups request and
// returns its members by ID, with their undecoded bytes.
func rawMembers(ctx context.Context, c *cluster, group string) (map[string]kmsg.DescribeGroupsResponseGroupMember, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	if len(resp.Groups) != 1 {
		return nil, fmt.Errorf("%d groups described", len(resp.Groups))
	}
	// Kafka leaves members' metadata and assignment empty unless the
	// group is stable, and this second describe may land in a rebalance
	// the first did not see.
	if st := resp.Groups[0].State; st != "Stable" {
		return nil, fmt.Errorf("second describe found the group %s", st)
	}
	out := map[string]kmsg.DescribeGroupsResponseGroupMember{}
	for _, m := range resp.Groups[0].Members {
		out[m.MemberID] = m
	}
	return out, nil
}

// kafkaPythonDescribe prints, as JSON, what kafka-python's admin client
// decodes of a group: it fails on members whose metadata or assignment is
// not the consumer protocol.
const kafkaPythonDescribe = `
import json, sys
from kafka import KafkaAdminClient
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], client_id="eddy-grouptools")
try:
    (g,) = admin.describe_consumer_groups([sys.argv[2]])
finally:
    admin.close()
print(json.dumps({
    "state": g.state,
    "protocol_type": g.protocol_type,
    "members": [{
        "id": m.member_id,
        "topics": list(m.member_metadata.subscription),
        "assignment": [[topic, list(ps)] for topic, ps in m.member_assignment.assignment],
    } for m in g.members],
}))
`

func describeWithKafkaPython(ctx context.Context, bootstrap, group string) ([]toolMember, string, error) {
	// One run takes a second or two; bound each so that a hanging one
	// leaves room for another and for its message.
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemPython, "-c", kafkaPythonDescribe, bootstrap, group)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			// kafka-python 2.0.2 has been seen to give no answer at
			// all on a group whose member data it cannot decode.
			return nil, "", fmt.Errorf("kafka-python gave no answer in time: %s", lastLines(stderr.String(), 5))
		}
		return nil, "", fmt.Errorf("kafka-python: %v: %s", err, lastLines(stderr.String(), 5))
	}
	var out struct {
		State        string `json:"state"`
		ProtocolType string `json:"protocol_type"`
		Members      []struct {
			ID         string               `json:"id"`
			Topics     []string             `json:"topics"`
			Assignment [][2]json.RawMessage `json:"assignment"`
		} `json:"members"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, "", fmt.Errorf("kafka-python output %q: %w", stdout.String(), err)
	}
	if out.ProtocolType != "consumer" {
		return nil, "", fmt.Errorf("protocol type %q", out.ProtocolType)
	}
	var ms []toolMember
	for _, m := range out.Members {
		tm := toolMember{id: m.ID, topics: slices.Sorted(slices.Values(m.Topics)), assigned: map[string][]int32{}}
		for _, a := range m.Assignment {
			var topic string
			var ps []int32
			if err := json.Unmarshal(a[0], &topic); err != nil {
				return nil, "", err
			}
			if err := json.Unmarshal(a[1], &ps); err != nil {
				return nil, "", err
			}
			tm.assigned[topic] = ps
		}
		ms = append(ms, tm)
	}
	return ms, out.State, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
