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

// StandbyConfig is what a standby replica needs to start.
type StandbyConfig struct {
	ID       task.ID
	Topology *topology.Topology
	// Changelog maps a logged store's name to its changelog topic.
	Changelog func(store string) string
	Open      StoreOpener
	// Stores are stores already open for this task (a parked active's);
	// the rest are opened.
	Stores []*StoreHandle
	Logger *slog.Logger
}

// Standby holds the stores of a standby (or warmup) replica of a task: its
// logged stores, kept current from their changelogs by the runtime, and no
// processors. Unlogged stores have nothing to follow, so a standby holds
// only the logged ones. Whether the replica is a standby or a warmup, and
// when it stops being either, is the runtime's replica lifecycle
// (task.State); a Standby only opens, hands over and closes stores.
type Standby struct {
	id     task.ID
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
	s = &Standby{id: cfg.ID, log: cfg.Logger.With("standby", cfg.ID.String())}
	// The failing returns below set s to nil: close through a copy.
	opened := s
	defer func() {
		if err != nil {
			opened.Close()
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

// Stores returns the replica's stores.
func (s *Standby) Stores() []*StoreHandle { return s.stores }

// Release gives up the replica's stores without closing them, for an
// active task to adopt (a promotion). The caller must have stopped the
// changelog reader from writing to them.
func (s *Standby) Release() []*StoreHandle {
	st := s.stores
	s.stores = nil
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
	return errors.Join(errs...)
}
