package iq

import (
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// Role is what a replica is to its partition on the instance holding it.
// The zero Role is invalid, so a backend that forgets to set one never
// passes for an active.
type Role int

// Replica roles.
const (
	// RoleActive is a running active task whose group membership was
	// confirmed recently (ReplicaInfo.ContactAgo): it processes the
	// partition's input and its store is the source of truth.
	RoleActive Role = iota + 1
	// RoleRestoring is an active task still reading its changelog.
	RoleRestoring
	// RoleStandby is a standby task following the changelog.
	RoleStandby
	// RoleWarmup is a standby placed to catch up before the active moves
	// to it.
	RoleWarmup
	// RoleGlobal is a global store (topology.GlobalTable): every instance
	// holds all of it, read from its topic by the instance's global
	// thread. It has one partition in queries, 0, and no active: its
	// Position is the sum over the topic's partitions of the offsets read
	// so far, its Lag the sum of their lags (end offset minus position),
	// and its CaughtUpAgo the time since that sum was last 0. It answers
	// ActiveOnly once restored (not Rebuilding), and the other bounds as
	// any replica does; routers answer it where it is asked.
	RoleGlobal
	// RoleUnconfirmed is a running active task whose instance has not
	// heard the group confirm its membership for longer than the
	// backend's contact window (ReplicaInfo.ContactAgo): the instance may
	// be cut off from the broker or have been paused, and the group may
	// be giving the partition to another instance. It processes nothing
	// it can vouch for, so it answers as a replica whose lag is unknown
	// and whose age counts from that last confirmation: it fails
	// ActiveOnly and every lag bound, and passes MaxAge(d) only while its
	// age is within d. Once its group session must have expired it does
	// not answer at all.
	RoleUnconfirmed
)

// lastRole is the highest valid Role.
const lastRole = RoleUnconfirmed

var roleNames = [...]string{RoleActive: "active", RoleRestoring: "restoring", RoleStandby: "standby", RoleWarmup: "warmup", RoleGlobal: "global",
	RoleUnconfirmed: "unconfirmed"}

// String returns active, restoring, standby, warmup, global or
// unconfirmed.
func (r Role) String() string {
	if r < RoleActive || r > lastRole {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole parses a role name as String spells it.
func ParseRole(s string) (Role, error) {
	for r := RoleActive; r <= lastRole; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("iq: unknown role %q (want active, restoring, standby, warmup, global or unconfirmed)", s)
}

// MarshalText encodes the role as its name, which is how JSON carries it.
func (r Role) MarshalText() ([]byte, error) {
	if r < RoleActive || r > lastRole {
		return nil, fmt.Errorf("iq: cannot encode invalid role %d", int(r))
	}
	return []byte(roleNames[r]), nil
}

// UnmarshalText decodes a role name.
func (r *Role) UnmarshalText(b []byte) error {
	v, err := ParseRole(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// StorePartition names one partition of one store.
type StorePartition struct {
	Store     string `json:"store"`
	Partition int32  `json:"partition"`
}

// HostMetadata is what one instance holds according to the latest
// assignment.
type HostMetadata struct {
	// Host is the instance's query endpoint, host:port.
	Host    string
	Active  []StorePartition
	Standby []StorePartition
	Warmup  []StorePartition
}

// Metadata is the routing table of the latest assignment.
type Metadata struct {
	// Hosts is sorted by Host.
	Hosts []HostMetadata
	// Partitions maps each queryable store to its partition count (1 for
	// a global store).
	Partitions map[string]int32
	// Global lists the global stores, sorted: every instance holds them
	// whole, so they are asked of any instance and never routed by
	// partition.
	Global []string
	// Unassigned marks the table an instance serves before its first
	// assignment, when it holds no replica of its own. It names the
	// global stores (restored before the instance's Start returned, so
	// already answerable) and, once the instance has read it from the
	// group, the group's current hosts, so lookups route to them; until
	// then it names no hosts and lookups of the other stores, not unknown
	// but not placed yet, fail with ErrNotStarted.
	Unassigned bool
}

// IsGlobal reports whether store is a global store of the table.
func (m Metadata) IsGlobal(store string) bool { return slices.Contains(m.Global, store) }

// partitionsOf returns a store's partition count in the table:
// ErrNotStarted for a store an unassigned table cannot name yet,
// ErrUnknownStore for one the table lacks.
func (m Metadata) partitionsOf(store string) (int32, error) {
	if n, ok := m.Partitions[store]; ok {
		return n, nil
	}
	if m.Unassigned {
		return 0, fmt.Errorf("%w (store %q)", ErrNotStarted, store)
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownStore, store)
}

// Unknown is the value of a ReplicaInfo duration that is not known: a
// replica never caught up, a lag never confirmed, an active whose commits
// were never observed.
const Unknown time.Duration = -1

// ReplicaInfo describes one local replica of a store partition at one
// moment. Every figure in it is one the replica can vouch for: a position
// at which its contents are a consistent snapshot, a lag the broker
// confirmed recently, an age measured against the partition's input.
type ReplicaInfo struct {
	Store     string
	Partition int32
	Role      Role
	// Position is the changelog offset of the next record to apply: the
	// store's contents are a consistent snapshot of the changelog before
	// it. -1 while Rebuilding: the replica has no consistent position.
	Position int64
	// Rebuilding is set while the replica reads its changelog from empty
	// (a fresh replica, or one reset because its position no longer fit)
	// and has not yet reached the end offset taken when it began. A
	// compacted changelog read part way is no snapshot of any offset, so
	// such a replica answers only AnyStaleness.
	Rebuilding bool
	// End is the changelog end offset the broker last confirmed (the last
	// stable offset when reading committed), -1 if never.
	End int64
	// Lag is End - Position, never negative; -1 (unknown) when End was
	// never confirmed, when the last confirmation is older than the
	// backend's confirmation window (the replica may be cut off from the
	// broker), or while Rebuilding.
	Lag int64
	// LagConfirmedAgo is how long ago the broker last confirmed End;
	// Unknown if never. 0 for a running active, the changelog's writer.
	LagConfirmedAgo time.Duration
	// CaughtUpAgo is how long ago the replica last had a confirmed lag of
	// 0 (0 if it has now); Unknown if it never had since it was opened.
	CaughtUpAgo time.Duration
	// InputCommittedAgo is how long ago the partition's active task was
	// last known to have committed all the input then present on its
	// source partitions (observed from the group's committed offsets and
	// the source partitions' end offsets); Unknown if never observed. A
	// replica of a dead or stalled active ages with it even when its
	// changelog, no longer written, shows no lag. 0 for a running active.
	InputCommittedAgo time.Duration
	// Restored counts records applied by restoration since the instance
	// started.
	Restored int64
	// ContactAgo is how long ago the group coordinator last confirmed
	// the membership of the stream thread the replica is held for (the
	// one running an active, the one assigned a standby): the time
	// since the last request it answered without error was sent. Past
	// the backend's contact window a running active is
	// RoleUnconfirmed; past the session timeout no replica answers.
	// Unknown for a global store, and for a replica never confirmed.
	ContactAgo time.Duration
}

// Age is how stale the replica's contents may be: the longer of the time
// since it last caught up with its changelog and the time since its
// partition's active last covered its input. A running active has age 0.
// ok is false when the age is not known (a rebuilding replica, one never
// caught up, an active never observed): such a replica fails every age
// bound.
func (i ReplicaInfo) Age() (age time.Duration, ok bool) {
	if i.Role == RoleActive {
		return 0, true
	}
	if i.Rebuilding || i.CaughtUpAgo < 0 || i.InputCommittedAgo < 0 {
		return 0, false
	}
	return max(i.CaughtUpAgo, i.InputCommittedAgo), true
}

// Replica is a local replica of one store partition.
type Replica interface {
	// Info returns the replica's role, position and lag now. It must be
	// cheap (no I/O, no broker request): it is called twice per read.
	Info() ReplicaInfo
	// Store returns the replica's committed data. Readers must see whole
	// batches only: never a half-applied restoration batch, never
	// uncommitted writes of a record cache.
	Store() statestore.Store
}

// Backend is what the runtime provides to serve queries. Every method is
// called concurrently from many goroutines (HTTP handlers, application
// code) and must never wait for a stream thread.
type Backend interface {
	// Self returns this instance's query endpoint host:port, or "" if it
	// has none.
	Self() string
	// Metadata returns the routing table of the latest assignment:
	// before the first one, a table marked Unassigned of the global
	// stores and the group's hosts as far as they are known, else
	// ErrNotStarted;
	// ErrShuttingDown when closing.
	// Callers treat the result as read-only, so the backend may hand the
	// same snapshot to every caller.
	Metadata() (Metadata, error)
	// KeyPartition returns the partition of store holding a serialized
	// key, hashed as the producer's default partitioner does. It fails
	// with ErrUnknownStore for a store the topology lacks.
	KeyPartition(store string, key []byte) (int32, error)
	// Replica returns the local replica, of any role, of a store
	// partition, or ErrNotHostedHere (wrapped) if there is none.
	Replica(store string, partition int32) (Replica, error)
	// LocalReplicas describes every local replica.
	LocalReplicas() []ReplicaInfo
}
