// Package groupproto carries an Eddy application's group protocol: what the
// members of the group tell the leader, what it answers, and the balancer
// that runs assignor.Assign between the two. Only the runtime speaks it.
//
// It has three layers:
//
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
//     assignor.Assign (or the application's AssignFunc) and spreads each
//     process's tasks over its group members (assignor.SpreadOverMembers).
package groupproto
