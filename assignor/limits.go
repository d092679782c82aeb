package assignor

import "fmt"

// DefaultMaxGroupMetadataBytes is Kafka's default message.max.bytes. A
// Kafka coordinator stores a group's subscriptions and assignments as one
// record in its offsets topic, under that limit, and fails the leader's
// SyncGroup (with UNKNOWN_SERVER_ERROR) when the record is larger.
const DefaultMaxGroupMetadataBytes = 1048588

// GroupMetadataTooLargeError is the leader's refusal to send assignments
// that the coordinator could not store: the group would never settle.
type GroupMetadataTooLargeError struct {
	// Bytes estimates the group record: Subscriptions + Assignments + a
	// fixed overhead per member.
	Bytes, Subscriptions, Assignments int
	Members, Tasks                    int
	Limit                             int
}

// Error names the sizes and what to change.
func (e *GroupMetadataTooLargeError) Error() string {
	return fmt.Sprintf("assignor: the group's metadata would take about %d bytes (%d members, %d tasks: %d bytes of subscriptions, %d of assignments), above the %d bytes a broker with that message.max.bytes stores for a group: the group cannot settle; raise message.max.bytes on the brokers and the application's limit with it, or run fewer stream threads",
		e.Bytes, e.Members, e.Tasks, e.Subscriptions, e.Assignments, e.Limit)
}
