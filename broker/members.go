package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group members outlive a broker that was killed.
//
// Kafka stores a group's members with its assignment in the offsets topic
// and, when a coordinator restarts, reloads the group with them: each
// member keeps its ID, generation and partitions and is dropped only a
// session timeout after its last heartbeat. kfake saves members only when
// it is closed (its session_state.json, read back and deleted at the next
// start), so after a kill the first member to rejoin formed a generation of
// its own and was given partitions that members still within their
// session held, and went on writing to.
//
// memberFile keeps what kfake would save, for classic groups, in
// DataDir/members.json while the broker runs: it learns each member's
// protocols and timeouts from its JoinGroup, the generation's assignments
// from the leader's SyncGroup and liveness from heartbeats (through the
// group guard's request hooks), and takes the members, their hosts and the
// group's state from kfake every memberFileEvery. Start turns a file a
// killed broker left into kfake's session_state.json, which kfake restores
// as it restores its own; a broker that closes removes it, since kfake then
// saves its members itself.
type memberFile struct {
	cluster *kfake.Cluster
	path    string
	logger  *slog.Logger
	stop    context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	groups map[string]*keptGroup
}

// memberFileName is the file, in the data directory, holding the members a
// running broker's classic groups have.
const memberFileName = "members.json"

// kfakeSessionFile is where kfake saves its groups' members on Close and
// looks for them at start.
const kfakeSessionFile = "session_state.json"

// memberFileEvery is how often the members are written when they changed:
// well under any session timeout, so a member that was in the group when the
// broker died is there when it restarts.
const memberFileEvery = 100 * time.Millisecond

// keptGroup is what the hooks learned of one group's members.
type keptGroup struct {
	joins       map[string]memberJoin // by member ID
	staticJoins map[string]memberJoin // by instance ID: a static member's first join has no member ID
	heartbeats  map[string]time.Time  // by member ID
	// generation, leader and assignments are those of the last SyncGroup
	// that carried the generation's assignment.
	generation  int32
	leader      string
	assignments map[string][]byte
}

// memberJoin is what a member's JoinGroup says that the group's state in
// kfake does not.
type memberJoin struct {
	protocols        []string
	sessionTimeout   int32
	rebalanceTimeout int32
}

// The shapes below are those of kfake's session_state.json for classic
// groups (kfake's persist.go), the only part of that file written here.
type (
	sessionFile struct {
		ShutdownAt    time.Time                      `json:"shutdownAt"`
		ClassicGroups map[string]sessionClassicGroup `json:"classicGroups,omitempty"`
	}
	sessionClassicGroup struct {
		Leader  string                 `json:"leader"`
		Members []sessionClassicMember `json:"members"`
		State   int8                   `json:"state,omitempty"`
	}
	sessionClassicMember struct {
		ID                 string    `json:"id"`
		InstanceID         *string   `json:"instance,omitempty"`
		ClientID           string    `json:"clientID"`
		ClientHost         string    `json:"clientHost"`
		Protocols          []string  `json:"protocols"`
		Assignment         []byte    `json:"assignment,omitempty"`
		SessionTimeoutMs   int32     `json:"sessionTimeoutMs"`
		RebalanceTimeoutMs int32     `json:"rebalanceTimeoutMs"`
		LastHeartbeat      time.Time `json:"lastHeartbeat,omitzero"`
	}
)

// kfake's group states, as its session file numbers them.
const (
	sessionStable             int8 = 1
	sessionPreparingRebalance int8 = 2
)

// newMemberFile starts keeping the members of c's classic groups in
// dataDir. restored are the groups kfake restored at its start (see
// restoreKeptMembers): their members joined before the hooks could see it.
func newMemberFile(c *kfake.Cluster, dataDir string, restored map[string]sessionClassicGroup, logger *slog.Logger) *memberFile {
	ctx, cancel := context.WithCancel(context.Background())
	f := &memberFile{
		cluster: c,
		path:    filepath.Join(dataDir, memberFileName),
		logger:  logger,
		stop:    cancel,
		done:    make(chan struct{}),
		groups:  make(map[string]*keptGroup),
	}
	for name, sg := range restored {
		g := f.group(name)
		g.leader = sg.Leader
		g.assignments = make(map[string][]byte)
		if info := c.GroupInfo(name); info != nil {
			g.generation = info.Epoch
		}
		for _, m := range sg.Members {
			g.joins[m.ID] = memberJoin{protocols: m.Protocols, sessionTimeout: m.SessionTimeoutMs, rebalanceTimeout: m.RebalanceTimeoutMs}
			g.heartbeats[m.ID] = m.LastHeartbeat
			g.assignments[m.ID] = m.Assignment
		}
	}
	go f.run(ctx)
	return f
}

// close stops the writer and removes the file: a broker that closes leaves
// its members to kfake's own session file.
func (f *memberFile) close() {
	f.stop()
	<-f.done
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.logger.Warn("remove the group members file", "err", err)
	}
}

func (f *memberFile) group(name string) *keptGroup {
	g := f.groups[name]
	if g == nil {
		g = &keptGroup{
			joins:       make(map[string]memberJoin),
			staticJoins: make(map[string]memberJoin),
			heartbeats:  make(map[string]time.Time),
		}
		f.groups[name] = g
	}
	return g
}

func (f *memberFile) joined(req *kmsg.JoinGroupRequest) {
	j := memberJoin{sessionTimeout: req.SessionTimeoutMillis, rebalanceTimeout: req.RebalanceTimeoutMillis}
	for _, p := range req.Protocols {
		j.protocols = append(j.protocols, p.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.group(req.Group)
	if req.MemberID != "" {
		g.joins[req.MemberID] = j
		g.heartbeats[req.MemberID] = time.Now()
	}
	if req.InstanceID != nil {
		g.staticJoins[*req.InstanceID] = j
	}
}

func (f *memberFile) synced(req *kmsg.SyncGroupRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.group(req.Group)
	g.heartbeats[req.MemberID] = time.Now()
	if len(req.GroupAssignment) == 0 {
		return
	}
	g.generation = req.Generation
	g.leader = req.MemberID
	g.assignments = make(map[string][]byte, len(req.GroupAssignment))
	for _, a := range req.GroupAssignment {
		g.assignments[a.MemberID] = a.MemberAssignment
	}
}

func (f *memberFile) heartbeat(req *kmsg.HeartbeatRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.group(req.Group).heartbeats[req.MemberID] = time.Now()
}

// run writes the file whenever what it would hold changed.
func (f *memberFile) run(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(memberFileEvery)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		names := slices.Sorted(maps.Keys(f.groups))
		f.mu.Unlock()
		infos := make(map[string]*kfake.GroupInfo, len(names))
		for _, name := range names {
			if info := f.cluster.GroupInfo(name); info != nil {
				infos[name] = info
			}
		}
		data, err := json.Marshal(f.snapshot(infos))
		if err != nil || bytes.Equal(data, last) {
			continue
		}
		if err := writeFileAtomic(f.path, data); err != nil {
			f.logger.Warn("write the group members file", "err", err)
			continue
		}
		last = data
	}
}

// snapshot is the session file kfake would write for these groups. Its
// ShutdownAt is left zero: kfake reads it only for members with no
// heartbeat time, and every member here has one.
func (f *memberFile) snapshot(infos map[string]*kfake.GroupInfo) sessionFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := sessionFile{ClassicGroups: make(map[string]sessionClassicGroup)}
	for name, info := range infos {
		g := f.groups[name]
		sg := sessionClassicGroup{State: sessionPreparingRebalance}
		if info.State == "Stable" {
			sg.State = sessionStable
		}
		if info.Epoch == g.generation {
			sg.Leader = g.leader
		}
		for _, m := range info.Members {
			j, ok := g.joins[m.MemberID]
			if !ok && m.InstanceID != nil {
				j, ok = g.staticJoins[*m.InstanceID]
			}
			if !ok {
				// Its JoinGroup was never seen (it came while the hooks
				// were being installed): left out, and the group
				// rebalances after a restart, which asks it again.
				sg.State = sessionPreparingRebalance
				continue
			}
			sm := sessionClassicMember{
				ID:                 m.MemberID,
				InstanceID:         m.InstanceID,
				ClientID:           m.ClientID,
				ClientHost:         m.ClientHost,
				Protocols:          j.protocols,
				SessionTimeoutMs:   j.sessionTimeout,
				RebalanceTimeoutMs: j.rebalanceTimeout,
				LastHeartbeat:      g.heartbeats[m.MemberID],
			}
			if info.Epoch == g.generation {
				sm.Assignment = g.assignments[m.MemberID]
			}
			if sm.LastHeartbeat.IsZero() {
				sm.LastHeartbeat = time.Now()
			}
			sg.Members = append(sg.Members, sm)
		}
		if len(sg.Members) > 0 {
			out.ClassicGroups[name] = sg
		}
	}
	f.forget(infos)
	return out
}

// forgetAfter is how long a member that is no longer in its group is
// remembered: a member may send its JoinGroup before kfake lists it.
const forgetAfter = time.Minute

// forget drops groups kfake no longer has, and members that left their
// group a while ago.
func (f *memberFile) forget(infos map[string]*kfake.GroupInfo) {
	for name, g := range f.groups {
		info, ok := infos[name]
		if !ok {
			delete(f.groups, name)
			continue
		}
		in := make(map[string]bool, len(info.Members))
		for _, m := range info.Members {
			in[m.MemberID] = true
		}
		for id := range g.joins {
			if !in[id] && time.Since(g.heartbeats[id]) > forgetAfter {
				delete(g.joins, id)
				delete(g.heartbeats, id)
			}
		}
		for id, at := range g.heartbeats {
			if !in[id] && time.Since(at) > forgetAfter {
				delete(g.heartbeats, id)
			}
		}
	}
}

// restoreKeptMembers runs before kfake starts on dataDir. It hands the
// members a killed broker left there to kfake, as its session file, and
// returns every classic group that file then holds (kfake's own, from a
// broker that closed, included), with how many members came from the
// killed broker. A session file already there keeps its other sections.
func restoreKeptMembers(dataDir string) (map[string]sessionClassicGroup, int, error) {
	session := make(map[string]json.RawMessage)
	path := filepath.Join(dataDir, kfakeSessionFile)
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &session); err != nil {
			session = make(map[string]json.RawMessage) // kfake ignores it too
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, 0, err
	}
	groups := make(map[string]sessionClassicGroup)
	if raw, ok := session["classicGroups"]; ok {
		if err := json.Unmarshal(raw, &groups); err != nil {
			groups = make(map[string]sessionClassicGroup)
		}
	}
	kept, err := os.ReadFile(filepath.Join(dataDir, memberFileName))
	if errors.Is(err, os.ErrNotExist) {
		return groups, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var members sessionFile
	if err := json.Unmarshal(kept, &members); err != nil {
		// Written by rename, so never torn: a file that does not parse
		// was not written here.
		return nil, 0, fmt.Errorf("%s: %w", memberFileName, err)
	}
	n := 0
	for name, g := range members.ClassicGroups {
		if _, ok := groups[name]; !ok {
			groups[name] = g
			n += len(g.Members)
		}
	}
	if session["classicGroups"], err = json.Marshal(groups); err != nil {
		return nil, 0, err
	}
	if _, ok := session["shutdownAt"]; !ok {
		if session["shutdownAt"], err = json.Marshal(time.Now()); err != nil {
			return nil, 0, err
		}
	}
	data, err := json.Marshal(session)
	if err != nil {
		return nil, 0, err
	}
	if err := writeFileAtomic(path, data); err != nil {
		return nil, 0, err
	}
	return groups, n, os.Remove(filepath.Join(dataDir, memberFileName))
}

// writeFileAtomic replaces path with data so that a reader, or a crash,
// sees the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
