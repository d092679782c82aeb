package taskrun

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// StandbyState is where a standby replica is in its life.
//
//	Created ──► Updating ──► Closed
//	   │                       ▲
//	   └───────────────────────┘
//
// A standby is Updating while it applies its changelogs; it leaves by
// closing, or by handing its open stores to an active task (promotion),
// which also closes it.
type StandbyState int

// The states of a standby replica.
const (
	StandbyCreated StandbyState = iota
	StandbyUpdating
	StandbyClosed
)

func (s StandbyState) String() string {
	switch s {
	case StandbyCreated:
		return "created"
	case StandbyUpdating:
		return "updating"
	case StandbyClosed:
		return "closed"
	}
	return fmt.Sprintf("StandbyState(%d)", int(s))
}

// StandbyConfig is what a standby replica needs to start.
type StandbyConfig struct {
	ID       task.ID
	Topology *topology.Topology
	// Changelog maps a logged store's name to its changelog topic.
	Changelog func(store string) string
	Open      StoreOpener
	// Stores are stores already open for this task (from an active task
	// that became a standby); the rest are opened.
	Stores []*StoreHandle
	// Warmup marks a replica placed to catch up before its task moves
	// here; it is otherwise a standby.
	Warmup bool
	Logger *slog.Logger
}

// Standby is a standby replica of a task: its logged stores, kept current
// from their changelogs, and no processors. Unlogged stores have nothing to
// follow, so a standby holds only the logged ones.
type Standby struct {
	id     task.ID
	warmup bool
	state  StandbyState
	stores []*StoreHandle
	log    *slog.Logger
}

// NewStandby opens (or adopts) the task's logged stores.
func NewStandby(cfg StandbyConfig) (s *Standby, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	subs := graph.Of(cfg.Topology).SubTopologies()
	if cfg.ID.SubTopology < 0 || cfg.ID.SubTopology >= len(subs) {
		return nil, fmt.Errorf("standby %s: no such sub-topology", cfg.ID)
	}
	adopted := make(map[string]*StoreHandle)
	for _, h := range cfg.Stores {
		adopted[h.Info.Name] = h
	}
	s = &Standby{id: cfg.ID, warmup: cfg.Warmup, log: cfg.Logger.With("standby", cfg.ID.String())}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, info := range subs[cfg.ID.SubTopology].Stores {
		if h, ok := adopted[info.Name]; ok {
			delete(adopted, info.Name)
			if info.Logged {
				s.stores = append(s.stores, h)
			} else if cerr := h.Inner.Close(); cerr != nil {
				s.log.Warn("close unlogged store", "store", info.Name, "err", cerr)
			}
			continue
		}
		if !info.Logged {
			continue
		}
		inner, err := cfg.Open(cfg.ID, info)
		if err != nil {
			return nil, fmt.Errorf("standby %s: open store %q: %w", cfg.ID, info.Name, err)
		}
		s.stores = append(s.stores, &StoreHandle{Info: info, Inner: inner, Cache: cache.New(inner, nil), Changelog: cfg.Changelog(info.Name)})
	}
	if len(adopted) > 0 {
		return nil, fmt.Errorf("standby %s: adopted stores the sub-topology does not declare", cfg.ID)
	}
	return s, nil
}

// ID returns the task's ID.
func (s *Standby) ID() task.ID { return s.id }

// Warmup reports whether the replica is a warmup.
func (s *Standby) Warmup() bool { return s.warmup }

// SetWarmup changes whether the replica counts as a warmup; the assignor may
// turn a warmup into a standby and back without moving any state.
func (s *Standby) SetWarmup(w bool) { s.warmup = w }

// State returns the replica's state.
func (s *Standby) State() StandbyState { return s.state }

// Stores returns the replica's stores.
func (s *Standby) Stores() []*StoreHandle { return s.stores }

// StartUpdating moves a created replica to Updating.
func (s *Standby) StartUpdating() error {
	if s.state != StandbyCreated {
		return fmt.Errorf("standby %s: start updating in state %s", s.id, s.state)
	}
	s.state = StandbyUpdating
	return nil
}

// Release closes the replica without closing its stores and returns them,
// for an active task to adopt. The caller must have stopped the changelog
// reader from writing to them.
func (s *Standby) Release() []*StoreHandle {
	st := s.stores
	s.stores = nil
	s.state = StandbyClosed
	return st
}

// Close closes the replica's stores.
func (s *Standby) Close() error {
	var errs []error
	for _, h := range s.stores {
		if err := h.Inner.Close(); err != nil {
			errs = append(errs, fmt.Errorf("standby %s: close store %q: %w", s.id, h.Info.Name, err))
		}
	}
	s.stores = nil
	s.state = StandbyClosed
	return errors.Join(errs...)
}
