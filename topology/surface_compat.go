package topology

import "github.com/eddystreams/eddy/internal/plan"

// Transitional: the names callers outside topology, task and topologytest
// still use until the mechanical rewrite (.surface-move.sh) moves them to
// package plan and deletes this file.

type (
	InputRecord     = plan.InputRecord
	OutputRecord    = plan.OutputRecord
	TaskEnv         = plan.TaskEnv
	TaskGraph       = plan.TaskGraph
	TableBuffering  = plan.TableBuffering
	SubTopologyInfo = plan.SubTopology
	RepartitionInfo = plan.Repartition
)

func InternalTopicName(app, name string) string { return plan.InternalTopicName(app, name) }

func (t *Topology) SubTopologies() []plan.SubTopology {
	return (*runtimeView)(t).SubTopologies()
}

func (t *Topology) RepartitionTopics() []plan.Repartition {
	return (*runtimeView)(t).RepartitionTopics()
}

func (t *Topology) SourceTopics(app string) []string { return (*runtimeView)(t).SourceTopics(app) }

func (t *Topology) StoreSubTopology(store string) (int, bool) {
	return (*runtimeView)(t).StoreSubTopology(store)
}

func (t *Topology) CheckCoPartitioning(partitions map[string]int32, app string) error {
	return (*runtimeView)(t).CheckCoPartitioning(partitions, app)
}

func (t *Topology) NewTaskGraph(id int, env plan.TaskEnv) (plan.TaskGraph, error) {
	return (*runtimeView)(t).NewTaskGraph(id, env)
}
