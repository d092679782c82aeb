// Package assignor decides which instance of an Eddy application runs which
// task, and where the replicas of each task's state live.
//
// It has three layers:
//
//   - Assign, a pure function in the spirit of Kafka Streams'
//     high-availability task assignor (KIP-441). It places every task's active
//     copy only where that task's state is already warm, spreads standby
//     replicas over distinct clients (and distinct rack-awareness tag values),
//     balances load by capacity, stays sticky, and when balance would move a
//     task to a client that is not caught up it keeps the task where it is,
//     warms the destination up with a warmup replica and asks for a follow-up
//     (probing) rebalance instead. It does no I/O and reads no clock, so it is
//     exhaustively testable by table and by simulation.
//   - Versioned wire formats, SubscriptionInfo (what a member tells the group
//     leader) and AssignmentInfo (what the leader tells each member), with
//     explicit version negotiation so that members running different Eddy
//     versions can share a group.
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
