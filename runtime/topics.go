package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/task"
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
	for _, gs := range graph.Of(topo).GlobalStores() {
		read[gs.Topic] = true
	}
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
	// A global table's topic is read whole by every instance: nothing
	// decides its count but DefaultPartitions.
	for _, gs := range graph.Of(topo).GlobalStores() {
		if isMissing[gs.Topic] && !slices.Contains(sources, gs.Topic) {
			sources = append(sources, gs.Topic)
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

// topicPlan is what start-up learned and decided about topics: partition
// counts of every sub-topology and of every topic the app writes.
type topicPlan struct {
	// subPartitions[i] is the partition count (and so the task count) of
	// sub-topology i.
	subPartitions []int32
	// partitions maps every topic the app reads or writes to its count.
	partitions map[string]int32
	// topicSub maps every source topic to the sub-topology reading it.
	topicSub map[string]int
	// subSources[i] is how many source topics sub-topology i reads: a task
	// of one that reads several merges their records by timestamp.
	subSources []int
	// sources lists every source topic, sorted.
	sources []string
	// taskTopics maps every task to its source topics.
	taskTopics map[task.ID][]string
	// changelogs maps every stateful sub-topology to its changelog topics.
	changelogs map[int][]string
	// external lists the user's topics the app reads or writes, sorted.
	external []string
	// repartitions lists the repartition topics, which the purger trims.
	repartitions []string
	// specs describes the internal topics, to create them again if the
	// broker loses them.
	specs []changelog.TopicSpec
}

// coSourcePartitions returns the largest partition count of the user
// topics that a sub-topology reading repartition topic rp also reads, or 0
// when there are none.
func coSourcePartitions(subs []graph.SubTopology, rp graph.TopicRef, partitions map[string]int32) int32 {
	var n int32
	for _, st := range subs {
		if !slices.Contains(st.Sources, rp) {
			continue
		}
		for _, r := range st.Sources {
			if !r.Internal && partitions[r.Name] > n {
				n = partitions[r.Name]
			}
		}
	}
	return n
}

// planTopics reads the partition counts of the user's topics (creating
// missing ones if Config.CreateMissingTopics allows), derives those of the
// internal topics, checks co-partitioning, and creates or verifies the
// internal topics.
func planTopics(ctx context.Context, adm *kadm.Client, topo *topology.Topology, cfg Config) (*topicPlan, error) {
	subs := graph.Of(topo).SubTopologies()
	external := externalTopics(topo, subs, cfg)
	plan := &topicPlan{
		subPartitions: make([]int32, len(subs)),
		partitions:    make(map[string]int32),
		topicSub:      make(map[string]int),
	}
	missing, err := userTopics(ctx, adm, topo, cfg, external, plan.partitions)
	if err != nil {
		return nil, err
	}
	if missing, err = createMissingSources(ctx, adm, topo, cfg, missing, plan.partitions); err != nil {
		return nil, err
	}
	reparts := graph.Of(topo).RepartitionTopics()
	plan.deriveCounts(subs, reparts, cfg.ApplicationID)
	if err := graph.Of(topo).CheckCoPartitioning(plan.partitions, cfg.ApplicationID); err != nil {
		return nil, err
	}
	if err := plan.mapSources(subs, cfg.ApplicationID); err != nil {
		return nil, err
	}
	if err := createMissingSinks(ctx, adm, topo, cfg, missing, plan.subPartitions, plan.partitions); err != nil {
		return nil, err
	}
	plan.mapTasks(subs, cfg.ApplicationID)
	specs := plan.internalSpecs(subs, reparts, cfg)
	if err := changelog.EnsureTopics(ctx, adm, specs); err != nil {
		return nil, fmt.Errorf("runtime: internal topics: %w", err)
	}
	plan.external, plan.specs = external, specs
	return plan, nil
}

// externalTopics lists the user's topics the app reads or writes, sorted:
// the sub-topologies' sources and sinks that are not internal, the global
// tables' topics and the dead-letter topic.
func externalTopics(topo *topology.Topology, subs []graph.SubTopology, cfg Config) []string {
	var external []string
	for _, st := range subs {
		for _, r := range append(slices.Clone(st.Sources), st.Sinks...) {
			if !r.Internal {
				external = append(external, r.Name)
			}
		}
	}
	for _, gs := range graph.Of(topo).GlobalStores() {
		external = append(external, gs.Topic)
	}
	if cfg.DeadLetterTopic != "" {
		external = append(external, cfg.DeadLetterTopic)
	}
	slices.Sort(external)
	return slices.Compact(external)
}

// deriveCounts gives every repartition topic and sub-topology its
// partition count: a sub-topology has the count of its sources; a
// repartition topic without an explicit count has the count of the user
// topics read beside it (a re-keyed stream joined with a table must be
// co-partitioned with the table), else its writer's count. Repartition
// chains may run through several sub-topologies, so it iterates until
// nothing changes.
func (plan *topicPlan) deriveCounts(subs []graph.SubTopology, reparts []graph.Repartition, app string) {
	for range len(subs) + 1 {
		for _, rp := range reparts {
			name := rp.Topic.FullName(app)
			if _, ok := plan.partitions[name]; ok {
				continue
			}
			if rp.Partitions > 0 {
				plan.partitions[name] = rp.Partitions
			} else if n := coSourcePartitions(subs, rp.Topic, plan.partitions); n > 0 {
				plan.partitions[name] = n
			} else if n := plan.subPartitions[rp.WriterSubTopology]; n > 0 {
				plan.partitions[name] = n
			}
		}
		for i, st := range subs {
			for _, r := range st.Sources {
				if n := plan.partitions[r.FullName(app)]; n > plan.subPartitions[i] {
					plan.subPartitions[i] = n
				}
			}
		}
	}
}

// mapSources records which sub-topology reads each source topic, and
// fails for a sub-topology whose count could not be derived.
func (plan *topicPlan) mapSources(subs []graph.SubTopology, app string) error {
	for i, st := range subs {
		if plan.subPartitions[i] == 0 {
			return fmt.Errorf("runtime: cannot derive the partition count of sub-topology %d", st.ID)
		}
		plan.subSources = append(plan.subSources, len(st.Sources))
		for _, r := range st.Sources {
			name := r.FullName(app)
			plan.topicSub[name] = i
			plan.sources = append(plan.sources, name)
		}
	}
	slices.Sort(plan.sources)
	return nil
}

// mapTasks records every task's source topics and every stateful
// sub-topology's changelogs.
func (plan *topicPlan) mapTasks(subs []graph.SubTopology, app string) {
	plan.taskTopics = make(map[task.ID][]string)
	plan.changelogs = make(map[int][]string)
	for i, st := range subs {
		var topics []string
		for _, r := range st.Sources {
			topics = append(topics, r.FullName(app))
		}
		for p := range plan.subPartitions[i] {
			plan.taskTopics[task.ID{SubTopology: i, Partition: p}] = topics
		}
		if len(st.Stores) > 0 {
			plan.changelogs[i] = []string{}
			for _, s := range st.Stores {
				if s.Logged {
					plan.changelogs[i] = append(plan.changelogs[i], changelog.TopicName(app, s.Name))
				}
			}
		}
	}
}

// internalSpecs describes the internal topics, repartition topics then
// changelogs, and records the repartition topics and the changelogs'
// counts in the plan.
func (plan *topicPlan) internalSpecs(subs []graph.SubTopology, reparts []graph.Repartition, cfg Config) []changelog.TopicSpec {
	app := cfg.ApplicationID
	var specs []changelog.TopicSpec
	for _, rp := range reparts {
		name := rp.Topic.FullName(app)
		plan.repartitions = append(plan.repartitions, name)
		specs = append(specs, changelog.TopicSpec{Name: name, Partitions: plan.partitions[name], ReplicationFactor: cfg.ReplicationFactor, Configs: repartitionTopicConfigs()})
	}
	for i, st := range subs {
		for _, s := range st.Stores {
			if !s.Logged {
				continue
			}
			name := changelog.TopicName(app, s.Name)
			plan.partitions[name] = plan.subPartitions[i]
			specs = append(specs, changelogSpec(s, name, plan.subPartitions[i], cfg))
		}
	}
	return specs
}

// changelogSpec describes the changelog of a logged store.
func changelogSpec(s graph.StoreInfo, name string, partitions int32, cfg Config) changelog.TopicSpec {
	spec := changelog.TopicSpec{Name: name, Partitions: partitions, Compacted: true, ReplicationFactor: cfg.ReplicationFactor}
	if s.Windowed() {
		// Expired windows leave the store without tombstones; only the
		// log's retention removes them from the topic.
		spec.Configs = changelog.WindowedTopicConfigs(time.Duration(s.Retention)*time.Millisecond, cfg.WindowedChangelogRetentionMargin)
	}
	if s.Kind == graph.Versioned {
		// Its records are versions: compaction must leave those within
		// the history retention.
		spec.Configs = changelog.VersionedTopicConfigs(s.Retention)
	}
	return spec
}
