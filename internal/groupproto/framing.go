package groupproto

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/task"
)

// Framing is how a member lays out the bytes it puts in the group protocol.
type Framing uint8

const (
	// FramingConsumer wraps Eddy's encoding in Kafka's standard consumer
	// protocol: the JoinGroup metadata is a ConsumerMemberMetadata (version
	// 1: subscribed topics, user data, owned partitions) and the SyncGroup
	// assignment a ConsumerMemberAssignment (version 0: assigned topic
	// partitions, user data), each with the SubscriptionInfo or
	// AssignmentInfo encoding as its user data. The group declares protocol
	// type "consumer", so tools that describe groups (kafka-consumer-groups,
	// admin clients, Burrow, UIs) decode these and show which member reads
	// which partitions.
	FramingConsumer Framing = iota
	// FramingBare is Eddy's encoding alone, as builds before the consumer
	// framing sent it. Such bytes open with Eddy's magic, whose first byte
	// has the high bit set: read as the consumer protocol's int16 version
	// they would be negative, so the two framings cannot be confused.
	FramingBare
)

// String names the framing for logs.
func (f Framing) String() string {
	switch f {
	case FramingConsumer:
		return "consumer"
	case FramingBare:
		return "bare"
	}
	return fmt.Sprintf("framing %d", uint8(f))
}

// The consumer protocol versions written. Every version of both structures
// starts with the same fields and later ones only append, so any
// consumer-protocol decoder reads these; version 1 of the metadata is the
// first with owned partitions, and all assignment versions are laid out
// alike.
const (
	consumerMetadataVersion   int16 = 1
	consumerAssignmentVersion int16 = 0
	// maxStrictConsumerVersion is the highest version kmsg knows; bytes of
	// a later version may carry fields it does not, so only up to this one
	// are trailing bytes an error.
	maxStrictConsumerVersion int16 = 3
)

// GroupSubscription is a member's JoinGroup metadata: the consumer
// protocol's fields and the SubscriptionInfo carried as its user data.
type GroupSubscription struct {
	Framing Framing
	// Topics are the topics the member consumes from: the application's
	// source and repartition topics, sorted. Empty in FramingBare.
	Topics []string
	// OwnedPartitions are the partitions the member still consumes as it
	// joins, by topic, sorted. Empty in FramingBare.
	OwnedPartitions map[string][]int32
	Info            SubscriptionInfo
}

// GroupAssignment is a member's SyncGroup assignment: the consumer
// protocol's topic partitions and the AssignmentInfo carried as its user
// data.
type GroupAssignment struct {
	Framing Framing
	// Partitions are the source partitions of the member's active tasks,
	// the partitions it consumes, by topic, sorted. Empty in FramingBare.
	Partitions map[string][]int32
	Info       AssignmentInfo
}

// EncodeGroupSubscription encodes g in its framing, with g.Info in the given
// version.
func EncodeGroupSubscription(g GroupSubscription, version int32) ([]byte, error) {
	return defaultFormat.encodeGroupSubscription(g, version)
}

// DecodeGroupSubscription decodes JoinGroup metadata in either framing. For
// user data in a version this build cannot read it returns an
// *UnsupportedVersionError along with the framing, the consumer protocol's
// fields and the two version fields of Info.
func DecodeGroupSubscription(b []byte) (GroupSubscription, error) {
	return defaultFormat.decodeGroupSubscription(b)
}

// EncodeGroupAssignment encodes g in its framing, with g.Info in the given
// version.
func EncodeGroupAssignment(g GroupAssignment, version int32) ([]byte, error) {
	return defaultFormat.encodeGroupAssignment(g, version)
}

// DecodeGroupAssignment decodes a SyncGroup assignment in either framing,
// with errors as DecodeGroupSubscription. A consumer-protocol assignment
// without user data decodes to an empty AssignmentInfo: brokers may stand
// such an assignment in for an empty one.
func DecodeGroupAssignment(b []byte) (GroupAssignment, error) {
	return defaultFormat.decodeGroupAssignment(b)
}

// isBare reports bytes that open with Eddy's magic.
func isBare(b []byte) bool { return len(b) >= 2 && b[0] == magic[0] && b[1] == magic[1] }

func (f *format) encodeGroupSubscription(g GroupSubscription, version int32) ([]byte, error) {
	inner, err := f.encodeSubscription(g.Info, version)
	if err != nil || g.Framing == FramingBare {
		return inner, err
	}
	m := kmsg.NewConsumerMemberMetadata()
	m.Version = consumerMetadataVersion
	m.Topics = slices.Compact(slices.Sorted(slices.Values(g.Topics)))
	m.UserData = inner
	for _, t := range slices.Sorted(maps.Keys(g.OwnedPartitions)) {
		op := kmsg.NewConsumerMemberMetadataOwnedPartition()
		op.Topic = t
		op.Partitions = slices.Compact(slices.Sorted(slices.Values(g.OwnedPartitions[t])))
		m.OwnedPartitions = append(m.OwnedPartitions, op)
	}
	return m.AppendTo(nil), nil
}

func (f *format) decodeGroupSubscription(b []byte) (GroupSubscription, error) {
	if isBare(b) {
		s, err := f.decodeSubscription(b)
		return GroupSubscription{Framing: FramingBare, Info: s}, err
	}
	var m kmsg.ConsumerMemberMetadata
	if err := readConsumer(b, m.ReadFrom, m.AppendTo, &m.Version); err != nil {
		return GroupSubscription{}, fmt.Errorf("subscription: %w", err)
	}
	g := GroupSubscription{Framing: FramingConsumer}
	var err error
	if g.Topics, err = topicList(m.Topics); err != nil {
		return GroupSubscription{}, fmt.Errorf("subscription: %w", err)
	}
	owned := make([]kmsg.ConsumerMemberAssignmentTopic, len(m.OwnedPartitions))
	for i, op := range m.OwnedPartitions {
		owned[i] = kmsg.ConsumerMemberAssignmentTopic{Topic: op.Topic, Partitions: op.Partitions}
	}
	if g.OwnedPartitions, err = partitionMap(owned); err != nil {
		return GroupSubscription{}, fmt.Errorf("subscription owned partitions: %w", err)
	}
	g.Info, err = f.decodeSubscription(m.UserData)
	var uv *UnsupportedVersionError
	if err != nil && !errors.As(err, &uv) {
		return GroupSubscription{}, fmt.Errorf("subscription user data: %w", err)
	}
	return g, err
}

func (f *format) encodeGroupAssignment(g GroupAssignment, version int32) ([]byte, error) {
	inner, err := f.encodeAssignment(g.Info, version)
	if err != nil || g.Framing == FramingBare {
		return inner, err
	}
	a := kmsg.NewConsumerMemberAssignment()
	a.Version = consumerAssignmentVersion
	a.UserData = inner
	for _, t := range slices.Sorted(maps.Keys(g.Partitions)) {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = t
		at.Partitions = slices.Compact(slices.Sorted(slices.Values(g.Partitions[t])))
		a.Topics = append(a.Topics, at)
	}
	return a.AppendTo(nil), nil
}

func (f *format) decodeGroupAssignment(b []byte) (GroupAssignment, error) {
	if isBare(b) {
		a, err := f.decodeAssignment(b)
		return GroupAssignment{Framing: FramingBare, Info: a}, err
	}
	var a kmsg.ConsumerMemberAssignment
	if err := readConsumer(b, a.ReadFrom, a.AppendTo, &a.Version); err != nil {
		return GroupAssignment{}, fmt.Errorf("assignment: %w", err)
	}
	g := GroupAssignment{Framing: FramingConsumer}
	var err error
	if g.Partitions, err = partitionMap(a.Topics); err != nil {
		return GroupAssignment{}, fmt.Errorf("assignment: %w", err)
	}
	if len(a.UserData) == 0 {
		if len(g.Partitions) > 0 {
			return GroupAssignment{}, fmt.Errorf("%w: assignment names partitions but carries no Eddy user data", ErrMalformed)
		}
		return g, nil
	}
	g.Info, err = f.decodeAssignment(a.UserData)
	var uv *UnsupportedVersionError
	if err != nil && !errors.As(err, &uv) {
		return GroupAssignment{}, fmt.Errorf("assignment user data: %w", err)
	}
	return g, err
}

// readConsumer decodes a consumer-protocol structure strictly: kmsg stops
// at the last field it knows and ignores what follows, so for the versions
// it knows the bytes must be exactly those it read.
func readConsumer(b []byte, readFrom func([]byte) error, appendTo func([]byte) []byte, version *int16) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", ErrMalformed)
	}
	if err := readFrom(b); err != nil {
		return fmt.Errorf("%w: consumer protocol: %v", ErrMalformed, err)
	}
	if *version < 0 {
		return fmt.Errorf("%w: consumer protocol version %d", ErrMalformed, *version)
	}
	if *version <= maxStrictConsumerVersion {
		if n := len(appendTo(nil)); n != len(b) {
			return fmt.Errorf("%w: consumer protocol v%d: %d bytes, %d expected", ErrMalformed, *version, len(b), n)
		}
	}
	return nil
}

// topicList returns topics sorted, refusing duplicates and empty names.
func topicList(ts []string) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	s := slices.Sorted(slices.Values(ts))
	for i, t := range s {
		if t == "" || (i > 0 && t == s[i-1]) {
			return nil, fmt.Errorf("%w: topic %q empty or listed twice", ErrMalformed, t)
		}
	}
	return s, nil
}

// partitionMap turns consumer-protocol topic partitions into a map with
// sorted partitions, refusing empty or repeated topics and negative or
// repeated partitions.
func partitionMap(ts []kmsg.ConsumerMemberAssignmentTopic) (map[string][]int32, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	m := make(map[string][]int32, len(ts))
	for _, t := range ts {
		if _, dup := m[t.Topic]; dup || t.Topic == "" {
			return nil, fmt.Errorf("%w: topic %q empty or listed twice", ErrMalformed, t.Topic)
		}
		ps := slices.Sorted(slices.Values(t.Partitions))
		for i, p := range ps {
			if p < 0 || (i > 0 && p == ps[i-1]) {
				return nil, fmt.Errorf("%w: topic %q: partition %d negative or listed twice", ErrMalformed, t.Topic, p)
			}
		}
		m[t.Topic] = ps
	}
	return m, nil
}

// sourcePartitions returns the partitions a member with the given active
// tasks consumes: partition task.Partition of each of the task's source
// topics. Tasks missing from tasks are skipped.
func sourcePartitions(tasks map[task.ID][]string, active []task.ID) map[string][]int32 {
	out := map[string][]int32{}
	for _, t := range active {
		for _, topic := range tasks[t] {
			out[topic] = append(out[topic], t.Partition)
		}
	}
	for topic, ps := range out {
		out[topic] = slices.Compact(slices.Sorted(slices.Values(ps)))
	}
	return out
}
