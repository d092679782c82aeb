package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/topology"
)

// repartitionSegmentBytes is the segment size of the repartition topics
// Eddy creates. Purging moves a partition's log start at once, but a broker
// frees disk only a whole segment at a time: segments smaller than the
// broker's default (1 GiB) give the space back sooner.
const repartitionSegmentBytes = 50 << 20

// repartitionTopicConfigs are the configs of a repartition topic Eddy
// creates. Records are kept until the group has committed past them and
// the purger deletes them (see purge.go): retention by time could delete
// records no task has processed yet, if an application stops for longer
// than the retention.
func repartitionTopicConfigs() map[string]*string {
	return map[string]*string{
		"cleanup.policy": kadm.StringPtr("delete"),
		"retention.ms":   kadm.StringPtr("-1"),
		"segment.bytes":  kadm.StringPtr(strconv.Itoa(repartitionSegmentBytes)),
	}
}

// MissingTopicsError is what Start returns when topics the topology reads or
// writes (or the DeadLetterTopic) do not exist and
// Config.CreateMissingTopics is off. It names every missing topic at once.
type MissingTopicsError struct {
	// Sources are the missing topics the topology reads, sorted.
	Sources []string
	// Sinks are the missing topics it writes and does not read, sorted;
	// the DeadLetterTopic counts as a sink.
	Sinks []string
}

// Error lists the missing topics by role.
func (e *MissingTopicsError) Error() string {
	var parts []string
	list := func(role string, names []string) {
		if len(names) == 0 {
			return
		}
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = strconv.Quote(n)
		}
		if len(names) > 1 {
			role += "s"
		}
		parts = append(parts, role+" "+strings.Join(q, ", "))
	}
	list("source topic", e.Sources)
	list("sink topic", e.Sinks)
	return "runtime: topics the topology uses are missing: " + strings.Join(parts, "; ") +
		"; create them before starting, or set Config.CreateMissingTopics"
}

// userTopics lists the user's topics (external) and records the partition
// count of each that exists in partitions. It returns the missing ones, or a
// *MissingTopicsError naming them when they may not be created.
func userTopics(ctx context.Context, adm *kadm.Client, topo *topology.Topology, cfg Config, external []string, partitions map[string]int32) (missing []string, err error) {
	if len(external) == 0 {
		return nil, nil
	}
	details, err := adm.ListTopics(ctx, external...)
	if err != nil {
		return nil, fmt.Errorf("runtime: describe topics: %w", err)
	}
	var errs []error
	for _, name := range external {
		d, ok := details[name]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, name)
		case d.Err != nil:
			errs = append(errs, fmt.Errorf("runtime: topic %q used by the topology is not available: %w", name, d.Err))
		default:
			partitions[name] = int32(len(d.Partitions))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(missing) == 0 || cfg.CreateMissingTopics {
		return missing, nil
	}
	read := make(map[string]bool)
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, r := range st.Sources {
			if !r.Internal {
				read[r.Name] = true
			}
		}
	}
	e := &MissingTopicsError{}
	for _, name := range missing {
		if read[name] {
			e.Sources = append(e.Sources, name)
		} else {
			e.Sinks = append(e.Sinks, name)
		}
	}
	return nil, e
}

// createMissingSources creates the missing topics (from missing) that the
// topology reads, and records their partition counts. A topic read beside
// existing topics (the sources of one sub-topology must be co-partitioned)
// takes their largest count; one that nothing else decides takes
// Config.DefaultPartitions. It returns the missing topics left: the sinks.
func createMissingSources(ctx context.Context, adm *kadm.Client, topo *topology.Topology, cfg Config, missing []string, partitions map[string]int32) ([]string, error) {
	subs := graph.Of(topo).SubTopologies()
	isMissing := make(map[string]bool, len(missing))
	for _, m := range missing {
		isMissing[m] = true
	}
	// counts holds the decided count of every source topic; propagate
	// through sub-topologies sharing topics until nothing changes.
	counts := make(map[string]int32)
	for _, rp := range graph.Of(topo).RepartitionTopics() {
		if rp.Partitions > 0 {
			counts[rp.Topic.FullName(cfg.ApplicationID)] = rp.Partitions
		}
	}
	var sources []string
	for _, st := range subs {
		for _, r := range st.Sources {
			if r.Internal {
				continue
			}
			if n, ok := partitions[r.Name]; ok {
				counts[r.Name] = n
			} else if isMissing[r.Name] && !slices.Contains(sources, r.Name) {
				sources = append(sources, r.Name)
			}
		}
	}
	if len(sources) == 0 {
		return missing, nil
	}
	for changed := true; changed; {
		changed = false
		for _, st := range subs {
			var most int32
			for _, r := range st.Sources {
				most = max(most, counts[r.FullName(cfg.ApplicationID)])
			}
			for _, r := range st.Sources {
				if !r.Internal && isMissing[r.Name] && counts[r.Name] < most {
					counts[r.Name], changed = most, true
				}
			}
		}
	}
	if err := createUserTopics(ctx, adm, cfg, sources, counts, partitions); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(missing), func(name string) bool { return slices.Contains(sources, name) }), nil
}

// createMissingSinks creates the missing topics the topology only writes
// (and the DeadLetterTopic): a topic takes the largest task count of the
// sub-topologies writing it, so each task has a partition of its own, and
// one no sub-topology writes takes Config.DefaultPartitions.
func createMissingSinks(ctx context.Context, adm *kadm.Client, topo *topology.Topology, cfg Config, sinks []string, subPartitions []int32, partitions map[string]int32) error {
	if len(sinks) == 0 {
		return nil
	}
	counts := make(map[string]int32)
	for i, st := range graph.Of(topo).SubTopologies() {
		for _, r := range st.Sinks {
			if !r.Internal && slices.Contains(sinks, r.Name) {
				counts[r.Name] = max(counts[r.Name], subPartitions[i])
			}
		}
	}
	return createUserTopics(ctx, adm, cfg, sinks, counts, partitions)
}

// createUserTopics creates names with the counts given (DefaultPartitions
// where none is) and records the counts the broker reports.
func createUserTopics(ctx context.Context, adm *kadm.Client, cfg Config, names []string, counts, partitions map[string]int32) error {
	specs := make([]changelog.TopicSpec, 0, len(names))
	for _, name := range names {
		n := counts[name]
		if n <= 0 {
			n = cfg.DefaultPartitions
		}
		specs = append(specs, changelog.TopicSpec{Name: name, Partitions: n, ReplicationFactor: cfg.ReplicationFactor})
	}
	if err := changelog.EnsureTopics(ctx, adm, specs); err != nil {
		return fmt.Errorf("runtime: creating missing topics: %w", err)
	}
	// Asking for authorized operations makes kadm ask the broker rather
	// than its metadata cache, which may not show the new topics yet.
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
	if err != nil {
		return fmt.Errorf("runtime: describe topics: %w", err)
	}
	for _, name := range names {
		d := details[name]
		if d.Err != nil || len(d.Partitions) == 0 {
			return fmt.Errorf("runtime: topic %q was created but cannot be described: %v", name, d.Err)
		}
		partitions[name] = int32(len(d.Partitions))
		cfg.Logger.Info("created missing topic", "topic", name, "partitions", len(d.Partitions))
	}
	return nil
}

// recreateUserTopics creates, with CreateMissingTopics, the user's topics a
// broker lost, with the partition counts the App started with: tasks and
// stores are partitioned by them.
func (a *App) recreateUserTopics(ctx context.Context, names []string) error {
	specs := make([]changelog.TopicSpec, 0, len(names))
	for _, name := range names {
		specs = append(specs, changelog.TopicSpec{Name: name, Partitions: a.plan.partitions[name], ReplicationFactor: a.cfg.ReplicationFactor})
	}
	if err := changelog.EnsureTopics(ctx, a.admin, specs); err != nil {
		return fmt.Errorf("runtime: recreating missing topics: %w", err)
	}
	a.log.Info("created the missing user topics again", "topics", names)
	return nil
}
