package topology

import "github.com/eddystreams/eddy/internal/graph"

// Transitional: the names callers outside topology, task and topologytest
// still use until the mechanical rewrite (.surface-move.sh) moves them to
// package graph and deletes this file.

type (
	InputRecord     = graph.InputRecord
	OutputRecord    = graph.OutputRecord
	TaskEnv         = graph.TaskEnv
	TaskGraph       = graph.TaskGraph
	TableBuffering  = graph.TableBuffering
	SubTopologyInfo = graph.SubTopology
	RepartitionInfo = graph.Repartition
)

func InternalTopicName(app, name string) string { return graph.InternalTopicName(app, name) }

func (t *Topology) SubTopologies() []graph.SubTopology {
	return (*runtimeView)(t).SubTopologies()
}

func (t *Topology) RepartitionTopics() []graph.Repartition {
	return (*runtimeView)(t).RepartitionTopics()
}

func (t *Topology) SourceTopics(app string) []string { return (*runtimeView)(t).SourceTopics(app) }

func (t *Topology) StoreSubTopology(store string) (int, bool) {
	return (*runtimeView)(t).StoreSubTopology(store)
}

func (t *Topology) CheckCoPartitioning(partitions map[string]int32, app string) error {
	return (*runtimeView)(t).CheckCoPartitioning(partitions, app)
}

func (t *Topology) NewTaskGraph(id int, env graph.TaskEnv) (graph.TaskGraph, error) {
	return (*runtimeView)(t).NewTaskGraph(id, env)
}
