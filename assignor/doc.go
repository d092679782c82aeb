// Package assignor decides which instance of an Eddy application runs which
// task, and where the replicas of each task's state live.
//
// It has four layers:
//
//   - Assign, a pure function in the spirit of Kafka Streams'
//     high-availability task assignor (KIP-441). It computes a balanced,
//     sticky target and then this round's assignment, which differs from
//     the target only where the target would restore state that is caught
//     up elsewhere. Actives go only where their state is caught up; a task's
//     replicas use caught-up clients before any other, so a standby restores
//     on a new client only when too few clients are caught up on the task,
//     and any other movement of state happens through warmups (at most
//     MaxWarmups at once) followed by a probing rebalance. Load is balanced
//     across clients by capacity (a small client gets its share too),
//     stateless tasks balance the total load as it runs in every round (as
//     in Kafka Streams), each sub-topology is spread where that costs no
//     movement, standbys spread over the values
//     of one or more tag keys, and actives can prefer the rack of their
//     input partitions' leaders (Config.ActiveRackTag, Input.TaskRacks). It does
//     no I/O and reads no clock, so it is exhaustively testable by table and
//     by simulation. An application may replace it with its own AssignFunc.
//   - Versioned wire formats, SubscriptionInfo (what a member tells the group
//     leader) and AssignmentInfo (what the leader tells each member), with
//     explicit version negotiation so that members running different Eddy
//     versions can share a group. From version 3 on an assignment carries
//     only the member's own tasks and the balance's epoch, so a SyncGroup
//     grows with the tasks rather than members × tasks; GroupRouting
//     rebuilds the group's routing table (which endpoint holds which task in
//     which role) from the coordinator's DescribeGroups answer, and accepts
//     it only when every member's assignment carries one epoch. Earlier
//     versions carried the whole table in every assignment
//     (AssignmentRouting reads it); a group with a member that speaks no
//     more than version 2 negotiates version 2.
//   - Their framing in the group protocol. The group's protocol type is
//     "consumer", so each encoding travels as the user data of Kafka's
//     standard consumer protocol: the JoinGroup metadata is a
//     ConsumerMemberMetadata (version 1) listing the application's source
//     topics and the partitions the member still owns, and each SyncGroup
//     assignment a ConsumerMemberAssignment (version 0) listing the source
//     partitions of the member's active tasks, the partitions it consumes.
//     Tools that describe groups therefore show who reads what. Builds
//     before this framing sent the encodings bare; their bytes open with
//     Eddy's magic, which no consumer-protocol version can, so a leader
//     reads both and answers each member in the framing it joined with
//     (FramingConsumer, FramingBare).
//   - Balancer, the franz-go kgo.GroupBalancer that carries those formats in
//     the group protocol, turns reported store positions into lags, calls
//     Assign and spreads each process's tasks over its group members.
//
// The package knows tasks only by task.ID; it never imports the runtime, the
// topology or the changelog code.
package assignor
