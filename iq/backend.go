package iq

import (
	"fmt"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// Role is what a replica is to its partition on the instance holding it.
// The zero Role is invalid, so a backend that forgets to set one never
// passes for an active.
type Role int

// Replica roles.
const (
	// RoleActive is a running active task: it processes the partition's
	// input and its store is the source of truth.
	RoleActive Role = iota + 1
	// RoleRestoring is an active task still reading its changelog.
	RoleRestoring
	// RoleStandby is a standby task following the changelog.
	RoleStandby
	// RoleWarmup is a standby placed to catch up before the active moves
	// to it.
	RoleWarmup
)

var roleNames = [...]string{RoleActive: "active", RoleRestoring: "restoring", RoleStandby: "standby", RoleWarmup: "warmup"}

// String returns active, restoring, standby or warmup.
func (r Role) String() string {
	if r < RoleActive || r > RoleWarmup {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole parses a role name as String spells it.
func ParseRole(s string) (Role, error) {
	for r := RoleActive; r <= RoleWarmup; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("iq: unknown role %q (want active, restoring, standby or warmup)", s)
}

// MarshalText encodes the role as its name, which is how JSON carries it.
func (r Role) MarshalText() ([]byte, error) {
	if r < RoleActive || r > RoleWarmup {
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
	// Partitions maps each queryable store to its partition count.
	Partitions map[string]int32
}

// ReplicaInfo describes one local replica of a store partition at one
// moment.
type ReplicaInfo struct {
	Store     string
	Partition int32
	Role      Role
	// Position is the changelog offset of the next record to apply: the
	// store's contents reflect everything before it.
	Position int64
	// End is the end offset (high watermark) last known for the changelog
	// partition.
	End int64
	// Lag is End - Position, never negative.
	Lag int64
	// SinceCaughtUp is how long ago this replica last had lag 0; 0 if it
	// is caught up now. A replica never caught up reports the time since
	// it was created.
	SinceCaughtUp time.Duration
	// Restored counts records applied by restoration since the instance
	// started.
	Restored int64
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
	// ErrNotStarted before the first one, ErrShuttingDown when closing.
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
	// AcceptableRecoveryLag is the lag within which a replica other than
	// a running active counts as near caught up.
	AcceptableRecoveryLag() int64
}
