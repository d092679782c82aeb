// Package assignor decides which instance of an Eddy application runs which
// task, and where the replicas of each task's state live.
//
// Assign is a pure function in the spirit of Kafka Streams'
// high-availability task assignor (KIP-441). It computes a balanced, sticky
// target and then this round's assignment, which differs from the target
// only where the target would restore state that is caught up elsewhere.
// Actives go only where their state is caught up; a task's replicas use
// caught-up clients before any other, so a standby restores on a new client
// only when too few clients are caught up on the task, and any other
// movement of state happens through warmups (at most MaxWarmups at once)
// followed by a probing rebalance. Load is balanced across clients by
// capacity (a small client gets its share too), stateless tasks balance the
// total load as it runs in every round (as in Kafka Streams) and stay
// where they ran where that balance lets them, each
// sub-topology is spread where that costs no movement, standbys spread over
// the values of one or more tag keys, and actives can prefer the rack of
// their input partitions' leaders (Config.ActiveRackTag, Input.TaskRacks).
// It does no I/O and reads no clock, so it is exhaustively testable by table
// and by simulation. An application may replace it with its own AssignFunc.
//
// SpreadOverMembers, as pure, then splits each client's share over its
// group members, its stream threads. How the group's state reaches Assign
// and its output reaches the members (the versioned wire formats, their
// framing in the consumer protocol, the group balancer) is the runtime's
// business: internal/groupproto.
//
// The package knows tasks only by task.ID; it never imports the runtime, the
// topology or the changelog code.
package assignor
