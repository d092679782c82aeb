package groupproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// Wire format versions this build reads and writes. Every encoding starts
// with the same ten bytes in every version: a two-byte magic, the version the
// rest is encoded in and the latest version the encoder supports (both
// big-endian int32), so that any member can tell what it was sent even when
// it cannot read the rest, and bytes of another protocol are not mistaken
// for a future version.
const (
	MinSupportedVersion    int32 = 1
	LatestSupportedVersion int32 = 3
)

// ErrMalformed is wrapped by decoding errors for bytes that are not a valid
// encoding.
var ErrMalformed = errors.New("assignor: malformed group user data")

// magic opens every encoding.
var magic = [2]byte{0xED, 0xD1}

const headerLen = 10

// UnsupportedVersionError is returned when decoding bytes in a version this
// build cannot read.
type UnsupportedVersionError struct {
	// Version is the version of the bytes; LatestSupported the encoder's.
	Version, LatestSupported int32
	// MinSupported and MaxSupported are this build's range.
	MinSupported, MaxSupported int32
}

// Error describes the versions involved.
func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("assignor: user data version %d (sender supports up to %d) is outside the supported range %d..%d",
		e.Version, e.LatestSupported, e.MinSupported, e.MaxSupported)
}

// ErrorCode is an error a leader sends in an assignment.
type ErrorCode int16

const (
	// ErrNone means the assignment is valid.
	ErrNone ErrorCode = 0
	// ErrVersionProbing means the leader could not read some member's
	// subscription because it was encoded in a version newer than the
	// leader supports. The assignment is empty; every member must rejoin
	// with a subscription encoded in at most the assignment's
	// LatestSupportedVersion.
	ErrVersionProbing ErrorCode = 1
	// ErrUnsupportedVersion is never sent: the Balancer reports it to its
	// own runtime when it received an assignment it cannot read, and will
	// rejoin with its own version.
	ErrUnsupportedVersion ErrorCode = 2
	// ErrShutdownApplication means some member asked the whole application
	// to shut down (its SubscriptionInfo.ShutdownReason was set, version
	// 2 on): every member gets an empty assignment carrying the reason and
	// must close its instance.
	ErrShutdownApplication ErrorCode = 3
)

// String names the code for logs.
func (c ErrorCode) String() string {
	switch c {
	case ErrNone:
		return "none"
	case ErrVersionProbing:
		return "version probing"
	case ErrUnsupportedVersion:
		return "unsupported version"
	case ErrShutdownApplication:
		return "shutdown application"
	}
	return fmt.Sprintf("error code %d", int16(c))
}

// TaskRole is what a member does with a task whose state it holds on disk.
type TaskRole uint8

const (
	// RoleNone: state left on disk from an earlier assignment.
	RoleNone TaskRole = 0
	// RoleStandby: a standby or warmup replica the member is updating.
	RoleStandby TaskRole = 1
	// RoleActive: an active the member is running, restoration finished;
	// the leader treats it as caught up whatever its positions say. Report
	// an active that is still restoring as RoleNone with its positions, so
	// that it is ranked by lag like any other copy.
	RoleActive TaskRole = 2
)

// TaskOffsets reports one task directory a member holds on disk.
type TaskOffsets struct {
	Task task.ID
	Role TaskRole
	// Positions maps each of the task's changelog topics to the position of
	// its store at partition Task.Partition: the offset of the next
	// changelog record to apply. A topic without an entry has no position
	// and counts as needing the whole partition.
	Positions map[string]int64
}

// SubscriptionInfo is the user data a member sends when it joins the group.
type SubscriptionInfo struct {
	// Version is the version the bytes were encoded in and
	// LatestSupportedVersion the latest the sender supports. Decoding sets
	// both; encoding takes the version as an argument and writes the
	// encoder's own latest.
	Version                int32
	LatestSupportedVersion int32
	// ProcessID is the stable ID of the member's process; members with
	// the same ID are threads of one client.
	ProcessID string
	// Endpoint is the process's query endpoint, host:port, or empty.
	Endpoint string
	// Capacity is the number of stream threads this member stands for
	// (normally 1: one group member per thread).
	Capacity int32
	// Tags are the process's rack-awareness tags.
	Tags map[string]string
	// Tasks lists every task directory the process holds on disk, owned
	// or not.
	Tasks []TaskOffsets
	// OwnedActive and OwnedStandby are this member's own share of its
	// process's last assignment, used to keep tasks on the same thread.
	// The Balancer fills them in.
	OwnedActive  []task.ID
	OwnedStandby []task.ID
	// ShutdownReason, when not empty, asks the leader to shut the whole
	// application down, and says why (version 2 on; a version 1 encoding
	// drops it).
	ShutdownReason string
}

// AssignmentInfo is the user data the leader sends each member.
type AssignmentInfo struct {
	// Version and LatestSupportedVersion: as in SubscriptionInfo; the
	// latter is the leader's.
	Version                int32
	LatestSupportedVersion int32
	ErrorCode              ErrorCode
	// Active, Standby and Warmup are this member's tasks, sorted.
	Active  []task.ID
	Standby []task.ID
	Warmup  []task.ID
	// NextProbingRebalanceMs is the Unix time in milliseconds at which the
	// group should rebalance again to check on warmups, or 0.
	NextProbingRebalanceMs int64
	// PartitionsByHost maps each process endpoint to the tasks it runs as
	// active, StandbyPartitionsByHost to those it holds as standby, and
	// WarmupPartitionsByHost to those it holds as warmup. Task IDs name
	// partitions: task s_p holds partition p of every store of
	// sub-topology s. Processes without an endpoint are left out.
	//
	// Only versions 1 and 2 carry them: with them every member's
	// assignment grows with the whole group, and the group's SyncGroup
	// with members × tasks. From version 3 on they are not encoded (a
	// leader still fills them, for the older versions); members rebuild
	// the same maps from DescribeGroups instead (GroupRouting).
	PartitionsByHost        map[string][]task.ID
	StandbyPartitionsByHost map[string][]task.ID
	WarmupPartitionsByHost  map[string][]task.ID
	// ShutdownReason is, with ErrShutdownApplication, the reason the member
	// that asked for the shutdown gave (version 2 on).
	ShutdownReason string
	// Epoch names the balance that produced the assignment: the leader
	// gives every member of one balance the same non-zero value, and a
	// different one in each balance (version 3 on; 0 in earlier versions).
	// A routing table rebuilt from DescribeGroups is the group's as of
	// this assignment only when every member's assignment carries this
	// epoch.
	Epoch int64
}

// EncodeSubscription encodes s in the given version.
func EncodeSubscription(s SubscriptionInfo, version int32) ([]byte, error) {
	return defaultFormat.encodeSubscription(s, version)
}

// DecodeSubscription decodes a subscription. For a version this build does
// not support it returns an *UnsupportedVersionError along with a
// SubscriptionInfo that has only the two version fields set.
func DecodeSubscription(b []byte) (SubscriptionInfo, error) {
	return defaultFormat.decodeSubscription(b)
}

// EncodeAssignment encodes a in the given version.
func EncodeAssignment(a AssignmentInfo, version int32) ([]byte, error) {
	return defaultFormat.encodeAssignment(a, version)
}

// DecodeAssignment decodes an assignment, with errors as DecodeSubscription.
func DecodeAssignment(b []byte) (AssignmentInfo, error) {
	return defaultFormat.decodeAssignment(b)
}

// codec reads and writes the body of one version.
type codec struct {
	writeSub   func(*writer, *SubscriptionInfo)
	readSub    func(*reader, *SubscriptionInfo)
	writeAssig func(*writer, *AssignmentInfo)
	readAssig  func(*reader, *AssignmentInfo)
}

// format is the set of versions a build speaks. Tests build formats with
// extra versions to exercise negotiation.
type format struct {
	min, latest int32
	codecs      map[int32]codec
}

var defaultFormat = &format{min: 1, latest: 3, codecs: map[int32]codec{1: v1Codec, 2: v2Codec, 3: v3Codec}}

var (
	v1Codec = codec{writeSub: writeSubV1, readSub: readSubV1, writeAssig: writeAssigV1, readAssig: readAssigV1}
	v2Codec = codec{writeSub: writeSubV2, readSub: readSubV2, writeAssig: writeAssigV2, readAssig: readAssigV2}
	v3Codec = codec{writeSub: writeSubV3, readSub: readSubV3, writeAssig: writeAssigV3, readAssig: readAssigV3}
)

// negotiate returns the version a leader that supports up to ours should
// encode assignments in for members that support up to theirs: the lowest.
func negotiate(ours int32, theirs []int32) int32 {
	v := ours
	for _, t := range theirs {
		v = min(v, t)
	}
	return v
}

func (f *format) codec(version int32) (codec, error) {
	c, ok := f.codecs[version]
	if !ok || version < f.min || version > f.latest {
		return codec{}, &UnsupportedVersionError{Version: version, LatestSupported: f.latest, MinSupported: f.min, MaxSupported: f.latest}
	}
	return c, nil
}

func (f *format) header(version int32) *writer {
	w := &writer{b: magic[:]}
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(version))
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(f.latest))
	return w
}

// open reads the header and returns the body's codec and reader.
func (f *format) open(b []byte) (c codec, r *reader, version, latest int32, err error) {
	if len(b) < headerLen {
		return codec{}, nil, 0, 0, fmt.Errorf("%w: %d bytes, shorter than the header", ErrMalformed, len(b))
	}
	if b[0] != magic[0] || b[1] != magic[1] {
		return codec{}, nil, 0, 0, fmt.Errorf("%w: no Eddy magic (another group protocol?)", ErrMalformed)
	}
	version = int32(binary.BigEndian.Uint32(b[2:]))
	latest = int32(binary.BigEndian.Uint32(b[6:]))
	if latest < version {
		return codec{}, nil, 0, 0, fmt.Errorf("%w: version %d above the sender's latest %d", ErrMalformed, version, latest)
	}
	c, err = f.codec(version)
	if err != nil {
		err.(*UnsupportedVersionError).LatestSupported = latest
		return codec{}, nil, version, latest, err
	}
	return c, &reader{b: b[headerLen:]}, version, latest, nil
}

func (f *format) encodeSubscription(s SubscriptionInfo, version int32) ([]byte, error) {
	c, err := f.codec(version)
	if err != nil {
		return nil, err
	}
	w := f.header(version)
	c.writeSub(w, &s)
	return w.b, nil
}

func (f *format) decodeSubscription(b []byte) (SubscriptionInfo, error) {
	c, r, version, latest, err := f.open(b)
	s := SubscriptionInfo{Version: version, LatestSupportedVersion: latest}
	if err != nil {
		return s, err
	}
	c.readSub(r, &s)
	if err := r.finish(); err != nil {
		return SubscriptionInfo{}, fmt.Errorf("subscription v%d: %w", version, err)
	}
	return s, nil
}

func (f *format) encodeAssignment(a AssignmentInfo, version int32) ([]byte, error) {
	c, err := f.codec(version)
	if err != nil {
		return nil, err
	}
	w := f.header(version)
	c.writeAssig(w, &a)
	return w.b, nil
}

func (f *format) decodeAssignment(b []byte) (AssignmentInfo, error) {
	c, r, version, latest, err := f.open(b)
	a := AssignmentInfo{Version: version, LatestSupportedVersion: latest}
	if err != nil {
		return a, err
	}
	c.readAssig(r, &a)
	if err := r.finish(); err != nil {
		return AssignmentInfo{}, fmt.Errorf("assignment v%d: %w", version, err)
	}
	return a, nil
}

// Version 1.
//
// Subscription: processID, endpoint, capacity, tags, a dictionary of the
// changelog topics named in positions, the task directories (each: task,
// role, positions as dictionary index and offset), owned actives, owned
// standbys. Assignment: error code, actives, standbys, warmups, next probing
// rebalance, actives by host, standbys by host. Strings and lists carry a
// uvarint length; numbers are varints; maps and lists are written sorted, so
// equal values encode to equal bytes.

func writeSubV1(w *writer, s *SubscriptionInfo) {
	w.str(s.ProcessID)
	w.str(s.Endpoint)
	w.uvarint(uint64(max(s.Capacity, 0)))
	w.strMap(s.Tags)

	topicSet := map[string]bool{}
	for _, t := range s.Tasks {
		for topic := range t.Positions {
			topicSet[topic] = true
		}
	}
	topics := slices.Sorted(maps.Keys(topicSet))
	index := make(map[string]int, len(topics))
	w.uvarint(uint64(len(topics)))
	for i, t := range topics {
		index[t] = i
		w.str(t)
	}
	ts := slices.Clone(s.Tasks)
	slices.SortStableFunc(ts, func(a, b TaskOffsets) int { return a.Task.Compare(b.Task) })
	ts = slices.CompactFunc(ts, func(a, b TaskOffsets) bool { return a.Task == b.Task })
	w.uvarint(uint64(len(ts)))
	for _, t := range ts {
		w.taskID(t.Task)
		w.b = append(w.b, byte(t.Role))
		w.uvarint(uint64(len(t.Positions)))
		for _, topic := range slices.Sorted(maps.Keys(t.Positions)) {
			w.uvarint(uint64(index[topic]))
			w.varint(t.Positions[topic])
		}
	}
	w.taskList(s.OwnedActive)
	w.taskList(s.OwnedStandby)
}

func readSubV1(r *reader, s *SubscriptionInfo) {
	s.ProcessID = r.str()
	s.Endpoint = r.str()
	s.Capacity = int32(r.uvarintMax(math.MaxInt32))
	s.Tags = r.strMap()
	topics := make([]string, r.count())
	for i := range topics {
		topics[i] = r.str()
		if i > 0 && topics[i] <= topics[i-1] {
			r.fail("changelog topics not sorted")
		}
	}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		t := TaskOffsets{Task: r.taskID()}
		if i > 0 && t.Task.Compare(s.Tasks[i-1].Task) <= 0 {
			r.fail("task directories not sorted")
		}
		t.Role = TaskRole(r.byte())
		if t.Role > RoleActive {
			r.fail("unknown task role %d", t.Role)
		}
		np := r.count()
		last := -1
		for range np {
			idx := int(r.uvarintMax(uint64(len(topics))))
			off := r.varint()
			if r.err != nil {
				break
			}
			if idx >= len(topics) || idx <= last {
				r.fail("bad changelog topic index %d", idx)
				break
			}
			last = idx
			if t.Positions == nil {
				t.Positions = make(map[string]int64, np)
			}
			t.Positions[topics[idx]] = off
		}
		s.Tasks = append(s.Tasks, t)
	}
	s.OwnedActive = r.taskList()
	s.OwnedStandby = r.taskList()
}

func writeAssigV1(w *writer, a *AssignmentInfo) {
	w.varint(int64(a.ErrorCode))
	w.taskList(a.Active)
	w.taskList(a.Standby)
	w.taskList(a.Warmup)
	w.varint(a.NextProbingRebalanceMs)
	w.hostMap(a.PartitionsByHost)
	w.hostMap(a.StandbyPartitionsByHost)
	w.hostMap(a.WarmupPartitionsByHost)
}

func readAssigV1(r *reader, a *AssignmentInfo) {
	a.ErrorCode = r.errorCode()
	a.Active = r.taskList()
	a.Standby = r.taskList()
	a.Warmup = r.taskList()
	a.NextProbingRebalanceMs = r.varint()
	a.PartitionsByHost = r.hostMap()
	a.StandbyPartitionsByHost = r.hostMap()
	a.WarmupPartitionsByHost = r.hostMap()
}

// Version 2: version 1 with the shutdown reason appended to both the
// subscription and the assignment.

func writeSubV2(w *writer, s *SubscriptionInfo) { writeSubV1(w, s); w.str(s.ShutdownReason) }
func readSubV2(r *reader, s *SubscriptionInfo)  { readSubV1(r, s); s.ShutdownReason = r.str() }

func writeAssigV2(w *writer, a *AssignmentInfo) { writeAssigV1(w, a); w.str(a.ShutdownReason) }
func readAssigV2(r *reader, a *AssignmentInfo)  { readAssigV1(r, a); a.ShutdownReason = r.str() }

// Version 3: the assignment drops the three host maps and ends with the
// epoch: error code, actives, standbys, warmups, next probing rebalance,
// shutdown reason, epoch. Its size no longer depends on the rest of the
// group. The subscription carries version 2's fields in fewer bytes, since
// the coordinator stores every member's subscription beside its assignment
// in one record: the changelog topic dictionary is written as the names'
// common prefix and suffix and each name's middle, and a member's owned
// tasks that are among its task directories are flags on the directory's
// role byte (ownedActiveFlag, ownedStandbyFlag), the owned lists holding only
// the rest.

const (
	ownedActiveFlag  = 0x10
	ownedStandbyFlag = 0x20
	roleMask         = 0x0f
)

func writeSubV3(w *writer, s *SubscriptionInfo) {
	w.str(s.ProcessID)
	w.str(s.Endpoint)
	w.uvarint(uint64(max(s.Capacity, 0)))
	w.strMap(s.Tags)

	topicSet := map[string]bool{}
	for _, t := range s.Tasks {
		for topic := range t.Positions {
			topicSet[topic] = true
		}
	}
	topics := slices.Sorted(maps.Keys(topicSet))
	prefix, suffix := affixes(topics)
	w.str(prefix)
	w.str(suffix)
	w.uvarint(uint64(len(topics)))
	index := make(map[string]int, len(topics))
	for i, t := range topics {
		index[t] = i
		w.str(t[len(prefix) : len(t)-len(suffix)])
	}
	ownedA := taskSet(s.OwnedActive)
	ownedS := taskSet(s.OwnedStandby)
	ts := slices.Clone(s.Tasks)
	slices.SortStableFunc(ts, func(a, b TaskOffsets) int { return a.Task.Compare(b.Task) })
	ts = slices.CompactFunc(ts, func(a, b TaskOffsets) bool { return a.Task == b.Task })
	w.uvarint(uint64(len(ts)))
	for _, t := range ts {
		w.taskID(t.Task)
		role := byte(t.Role) & roleMask
		if ownedA[t.Task] {
			role |= ownedActiveFlag
			delete(ownedA, t.Task)
		}
		if ownedS[t.Task] {
			role |= ownedStandbyFlag
			delete(ownedS, t.Task)
		}
		w.b = append(w.b, role)
		w.uvarint(uint64(len(t.Positions)))
		for _, topic := range slices.Sorted(maps.Keys(t.Positions)) {
			w.uvarint(uint64(index[topic]))
			w.varint(t.Positions[topic])
		}
	}
	w.taskList(slices.Collect(maps.Keys(ownedA)))
	w.taskList(slices.Collect(maps.Keys(ownedS)))
	w.str(s.ShutdownReason)
}

func readSubV3(r *reader, s *SubscriptionInfo) {
	s.ProcessID = r.str()
	s.Endpoint = r.str()
	s.Capacity = int32(r.uvarintMax(math.MaxInt32))
	s.Tags = r.strMap()
	prefix, suffix := r.str(), r.str()
	// Each name costs at least its middle's length byte, so the count is
	// bounded by the bytes left.
	topics := make([]string, r.count())
	for i := range topics {
		topics[i] = prefix + r.str() + suffix
		if i > 0 && topics[i] <= topics[i-1] {
			r.fail("changelog topics not sorted")
		}
	}
	var ownedA, ownedS []task.ID
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		t := TaskOffsets{Task: r.taskID()}
		if i > 0 && t.Task.Compare(s.Tasks[i-1].Task) <= 0 {
			r.fail("task directories not sorted")
		}
		b := r.byte()
		if b&^(roleMask|ownedActiveFlag|ownedStandbyFlag) != 0 || TaskRole(b&roleMask) > RoleActive {
			r.fail("unknown task role byte %#x", b)
		}
		t.Role = TaskRole(b & roleMask)
		if b&ownedActiveFlag != 0 {
			ownedA = append(ownedA, t.Task)
		}
		if b&ownedStandbyFlag != 0 {
			ownedS = append(ownedS, t.Task)
		}
		np := r.count()
		last := -1
		for range np {
			idx := int(r.uvarintMax(uint64(len(topics))))
			off := r.varint()
			if r.err != nil {
				break
			}
			if idx >= len(topics) || idx <= last {
				r.fail("bad changelog topic index %d", idx)
				break
			}
			last = idx
			if t.Positions == nil {
				t.Positions = make(map[string]int64, np)
			}
			t.Positions[topics[idx]] = off
		}
		s.Tasks = append(s.Tasks, t)
	}
	s.OwnedActive = mergeTasks(ownedA, r.taskList())
	s.OwnedStandby = mergeTasks(ownedS, r.taskList())
	s.ShutdownReason = r.str()
}

// affixes returns the longest prefix and then the longest suffix all names
// share that do not overlap in any name.
func affixes(names []string) (prefix, suffix string) {
	if len(names) == 0 {
		return "", ""
	}
	prefix = names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(prefix) && i < len(n) && prefix[i] == n[i] {
			i++
		}
		prefix = prefix[:i]
	}
	suffix = names[0][len(prefix):]
	for _, n := range names[1:] {
		i := 0
		for i < len(suffix) && i < len(n)-len(prefix) && suffix[len(suffix)-1-i] == n[len(n)-1-i] {
			i++
		}
		suffix = suffix[len(suffix)-i:]
	}
	return prefix, suffix
}

func taskSet(ts []task.ID) map[task.ID]bool {
	m := make(map[task.ID]bool, len(ts))
	for _, t := range ts {
		m[t] = true
	}
	return m
}

// mergeTasks returns the sorted union of two task lists, nil if empty.
func mergeTasks(a, b []task.ID) []task.ID {
	if len(a)+len(b) == 0 {
		return nil
	}
	return slices.Compact(slices.SortedFunc(slices.Values(slices.Concat(a, b)), task.ID.Compare))
}

func writeAssigV3(w *writer, a *AssignmentInfo) {
	w.varint(int64(a.ErrorCode))
	w.taskList(a.Active)
	w.taskList(a.Standby)
	w.taskList(a.Warmup)
	w.varint(a.NextProbingRebalanceMs)
	w.str(a.ShutdownReason)
	w.varint(a.Epoch)
}

func readAssigV3(r *reader, a *AssignmentInfo) {
	a.ErrorCode = r.errorCode()
	a.Active = r.taskList()
	a.Standby = r.taskList()
	a.Warmup = r.taskList()
	a.NextProbingRebalanceMs = r.varint()
	a.ShutdownReason = r.str()
	a.Epoch = r.varint()
}

type writer struct{ b []byte }

func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *writer) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *writer) strMap(m map[string]string) {
	w.uvarint(uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		w.str(k)
		w.str(m[k])
	}
}

func (w *writer) taskID(t task.ID) {
	w.uvarint(uint64(max(t.SubTopology, 0)))
	w.uvarint(uint64(max(t.Partition, 0)))
}

func (w *writer) taskList(ts []task.ID) {
	s := slices.SortedFunc(slices.Values(ts), task.ID.Compare)
	s = slices.Compact(s)
	w.uvarint(uint64(len(s)))
	for _, t := range s {
		w.taskID(t)
	}
}

func (w *writer) hostMap(m map[string][]task.ID) {
	w.uvarint(uint64(len(m)))
	for _, h := range slices.Sorted(maps.Keys(m)) {
		w.str(h)
		w.taskList(m[h])
	}
}

// reader decodes with a sticky error: after the first failure every read
// returns a zero value, so decoders need not check after each field.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (r *reader) finish() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarintMax(limit uint64) uint64 {
	v := r.uvarint()
	if v > limit {
		r.fail("value %d above %d", v, limit)
		return 0
	}
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length of items that each take at least one byte, so it can
// never exceed the bytes left; this bounds allocations on hostile input.
func (r *reader) count() int {
	v := r.uvarint()
	if v > uint64(len(r.b)) {
		r.fail("length %d above the %d bytes left", v, len(r.b))
		return 0
	}
	return int(v)
}

// errorCode reads an assignment's error code, which Kafka's protocol
// carries as an int16.
func (r *reader) errorCode() ErrorCode {
	code := r.varint()
	if code < math.MinInt16 || code > math.MaxInt16 {
		r.fail("error code %d out of range", code)
	}
	return ErrorCode(code)
}

func (r *reader) str() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) strMap() map[string]string {
	n := r.count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	last := ""
	for i := 0; i < n && r.err == nil; i++ {
		k, v := r.str(), r.str()
		if i > 0 && k <= last {
			r.fail("map keys not sorted")
		}
		last = k
		m[k] = v
	}
	return m
}

func (r *reader) taskID() task.ID {
	sub := r.uvarintMax(math.MaxInt32)
	part := r.uvarintMax(math.MaxInt32)
	return task.ID{SubTopology: int(sub), Partition: int32(part)}
}

func (r *reader) taskList() []task.ID {
	n := r.count()
	if n == 0 {
		return nil
	}
	ts := make([]task.ID, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		t := r.taskID()
		if i > 0 && t.Compare(ts[i-1]) <= 0 {
			r.fail("task list not sorted")
		}
		ts = append(ts, t)
	}
	return ts
}

func (r *reader) hostMap() map[string][]task.ID {
	n := r.count()
	if n == 0 {
		return nil
	}
	m := make(map[string][]task.ID, n)
	last := ""
	for i := 0; i < n && r.err == nil; i++ {
		h := r.str()
		if i > 0 && h <= last {
			r.fail("hosts not sorted")
		}
		last = h
		m[h] = r.taskList()
	}
	return m
}
