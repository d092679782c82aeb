package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/task"
)

// Routing-table refresh backoff: the first retry comes soon, since the
// group is usually Stable a few milliseconds after this member's own
// SyncGroup answer; later ones back off so that an instance cut off from
// the coordinator does not hammer it.
const (
	routingRetryMin = 20 * time.Millisecond
	routingRetryMax = 2 * time.Second
	// routingDescribeTimeout bounds one DescribeGroups.
	routingDescribeTimeout = 10 * time.Second
)

// router keeps the instance's routing table (App.routing, what
// Queries().Metadata returns) in step with the group's assignments.
//
// Assignments in wire version 1 or 2 carry the whole table, which is used
// as it is. From version 3 on an assignment carries only the member's own
// tasks and the balance's epoch, and the router rebuilds the table from
// DescribeGroups (groupproto.GroupRouting), accepting a description only when
// every member's assignment carries the epoch of this instance's latest
// assignment: the table is then exactly the balance's, never older than
// this instance's own assignment. Until it is accepted the table holds
// only what this instance itself knows, its own threads' tasks of that
// epoch: a query for another partition finds no host and is refused as
// unavailable rather than routed on a previous balance, which may name a
// host that no longer holds the partition. The description is retried with
// backoff until it shows the epoch, and is needed again only at the next
// assignment: membership and endpoints change only through a rebalance.
type router struct {
	a *App
	// describeGroup is describe; tests replace it.
	describeGroup func() (groupproto.Routing, error)
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup

	mu sync.Mutex
	// shares holds each thread's latest assignment, by thread index.
	shares map[int]groupproto.AssignmentInfo
	// want is the epoch whose table is still to be described, 0 if none;
	// accepted is the epoch of the table in use, 0 if it came from an
	// assignment's host maps or is local.
	want, accepted int64
	// table is the routing table in use and complete whether it is the
	// group's (not only this instance's own share).
	table    groupproto.Routing
	complete bool
	running  bool
	closed   bool
	// unsaved is the latest complete table use took that keepTable has
	// not written to the state directory yet.
	unsaved *groupproto.Routing

	// saveMu orders keepTable's writes, so the file ends with the latest
	// table; it guards nothing else, and mu is never taken across a write,
	// which must not hold up the group goroutine or App.Assignment.
	saveMu sync.Mutex
}

func newRouter(a *App) *router {
	ctx, cancel := context.WithCancel(a.killCtx)
	r := &router{a: a, ctx: ctx, cancel: cancel, shares: make(map[int]groupproto.AssignmentInfo)}
	r.describeGroup = r.describe
	return r
}

// assigned takes a thread's new assignment (ErrorCode ErrNone). It runs on
// the thread's group goroutine and waits for nothing but the write of a
// complete table to the state directory.
func (r *router) assigned(idx int, info groupproto.AssignmentInfo) {
	defer r.keepTable() // once mu is released
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shares[idx] = info
	if table, ok := groupproto.AssignmentRouting(info); ok {
		r.want, r.accepted = 0, 0
		r.use(table, true)
		return
	}
	if info.Epoch == r.accepted {
		// Another thread's share of the balance whose table is in use.
		return
	}
	r.want = info.Epoch
	r.use(r.local(info.Epoch), false)
	if !r.running && !r.closed {
		r.running = true
		r.wg.Add(1)
		go r.refresh()
	}
}

// use makes table the one queries route on, and marks a complete one to
// be kept in the state directory for the next start (learnGroup): the
// caller calls keepTable once it has released r.mu. Called with r.mu held.
func (r *router) use(table groupproto.Routing, complete bool) {
	r.table, r.complete = table, complete
	r.a.routing.Store(r.a.routingTable(table))
	if complete {
		r.unsaved = &table
	}
}

// keepTable writes the table use last marked, if any, to the state
// directory. Called without r.mu.
func (r *router) keepTable() {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	table := r.unsaved
	r.unsaved = nil
	r.mu.Unlock()
	if table == nil || r.a.dir == nil {
		return
	}
	if err := saveRouting(r.a.dir.path, *table); err != nil {
		// Under saveMu, which only the next save waits for, as it waits
		// for this one's write.
		r.a.log.Debug("cannot keep the routing table in the state directory", "err", err)
	}
}

// routingFileName is the file in the application's state directory that
// keeps the last complete routing table this instance used.
const routingFileName = "routing.json"

// routingFileVersion is the version of routingFile this binary writes; a
// file of another version is ignored.
const routingFileVersion = 1

// routingFile is a routing table as saved in the state directory: task
// IDs as their strings, by host.
type routingFile struct {
	Version int                 `json:"version"`
	Epoch   int64               `json:"epoch"`
	Active  map[string][]string `json:"active"`
	Standby map[string][]string `json:"standby"`
	Warmup  map[string][]string `json:"warmup,omitempty"`
}

// saveRouting writes table to dir, replacing the file whole (a rename), so
// a crash leaves the old table or the new one. It is not synced: the file
// is a hint for the next start, which ignores one it cannot read.
func saveRouting(dir string, table groupproto.Routing) error {
	ids := func(m map[string][]task.ID) map[string][]string {
		out := make(map[string][]string, len(m))
		for h, ts := range m {
			for _, t := range ts {
				out[h] = append(out[h], t.String())
			}
		}
		return out
	}
	b, err := json.Marshal(routingFile{Version: routingFileVersion, Epoch: table.Epoch,
		Active: ids(table.Active), Standby: ids(table.Standby), Warmup: ids(table.Warmup)})
	if err != nil {
		return err
	}
	p := filepath.Join(dir, routingFileName)
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// loadRouting reads the table saveRouting wrote to dir.
func loadRouting(dir string) (groupproto.Routing, error) {
	b, err := os.ReadFile(filepath.Join(dir, routingFileName))
	if err != nil {
		return groupproto.Routing{}, err
	}
	var f routingFile
	if err := json.Unmarshal(b, &f); err != nil {
		return groupproto.Routing{}, fmt.Errorf("runtime: %s: %w", routingFileName, err)
	}
	if f.Version != routingFileVersion {
		return groupproto.Routing{}, fmt.Errorf("runtime: %s is version %d, this binary reads %d", routingFileName, f.Version, routingFileVersion)
	}
	ids := func(m map[string][]string) (map[string][]task.ID, error) {
		out := make(map[string][]task.ID, len(m))
		for h, ts := range m {
			for _, s := range ts {
				id, err := task.ParseID(s)
				if err != nil {
					return nil, fmt.Errorf("runtime: %s: %w", routingFileName, err)
				}
				out[h] = append(out[h], id)
			}
		}
		return out, nil
	}
	r := groupproto.Routing{Epoch: f.Epoch}
	if r.Active, err = ids(f.Active); err != nil {
		return groupproto.Routing{}, err
	}
	if r.Standby, err = ids(f.Standby); err != nil {
		return groupproto.Routing{}, err
	}
	if r.Warmup, err = ids(f.Warmup); err != nil {
		return groupproto.Routing{}, err
	}
	return r, nil
}

// groupTable returns the group's routing table of the given epoch (0 for
// one carried by a version 1 or 2 assignment), false until it is known.
func (r *router) groupTable(epoch int64) (groupproto.Routing, bool) {
	if r == nil {
		return groupproto.Routing{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.complete || r.table.Epoch != epoch {
		return groupproto.Routing{}, false
	}
	return r.table, true
}

// local is the routing table as far as this instance knows it: its own
// threads' tasks of the given epoch. Called with r.mu held.
func (r *router) local(epoch int64) groupproto.Routing {
	out := groupproto.Routing{Epoch: epoch}
	self := r.a.cfg.Endpoint
	if self == "" {
		return out
	}
	var act, sb, wu []task.ID
	for _, info := range r.shares {
		if info.Epoch == epoch {
			act = append(act, info.Active...)
			sb = append(sb, info.Standby...)
			wu = append(wu, info.Warmup...)
		}
	}
	sorted := func(ts []task.ID) []task.ID {
		return slices.Compact(slices.SortedFunc(slices.Values(ts), task.ID.Compare))
	}
	out.Active = map[string][]task.ID{self: sorted(act)}
	out.Standby = map[string][]task.ID{self: sorted(sb)}
	if len(wu) > 0 {
		out.Warmup = map[string][]task.ID{self: sorted(wu)}
	}
	return out
}

// learnGroup routes queries on the group's table until this instance's
// first assignment: an instance that starts, or restarts in a rolling
// restart, serves its query port from Start on, and without a table every
// lookup through it would be refused while the group still holds every
// partition elsewhere. It starts from the table the group showed when
// Start checked access to it (start), or, when the group was not settled
// then (a rolling restart finds it still rebalancing after this
// instance's own departure), from the last table this instance used
// before it stopped (routingFileName). It describes the group again every
// routingRetryMax until the first assignment arrives, and publishes each
// settled table marked Unassigned: this instance holds nothing yet.
// Routing on an old table is safe: every replica asked checks the bound
// itself and names its own role, so an old table costs only refusals
// from hosts that no longer hold a partition.
func (r *router) learnGroup(start *groupproto.Routing) {
	if start == nil {
		// Read before mu is taken: the file may be slow to read, and is
		// only wanted if no assignment arrives meanwhile.
		if last, err := loadRouting(r.a.dir.path); err == nil {
			start = &last
		} else if !errors.Is(err, os.ErrNotExist) {
			r.a.log.Warn("ignoring the routing table saved in the state directory", "err", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.shares) > 0 {
		return
	}
	if start != nil {
		r.useUnassigned(*start)
	}
	r.wg.Go(func() {
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(routingRetryMax):
			}
			table, err := r.describeGroup()
			r.mu.Lock()
			if len(r.shares) > 0 || r.closed {
				r.mu.Unlock()
				return
			}
			if err == nil {
				r.useUnassigned(table)
			}
			r.mu.Unlock()
		}
	})
}

// useUnassigned publishes the group's table for an instance holding
// nothing yet. Called with r.mu held.
func (r *router) useUnassigned(table groupproto.Routing) {
	md := r.a.routingTable(table)
	md.Unassigned = true
	r.a.routing.Store(md)
}

// refresh describes the group until its table is that of the wanted epoch,
// then stops; assigned starts it again for the next epoch.
func (r *router) refresh() {
	defer r.wg.Done()
	wait := routingRetryMin
	tries := 0
	for {
		r.mu.Lock()
		epoch := r.want
		if epoch == 0 || r.closed {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()

		table, err := r.describeGroup()
		if err == nil && table.Epoch != epoch {
			err = fmt.Errorf("%w: the group is at epoch %d, this instance's assignment at %d", groupproto.ErrRoutingUnsettled, table.Epoch, epoch)
		}
		if err == nil {
			r.mu.Lock()
			rebuilt := r.want == epoch && !r.closed
			if rebuilt {
				r.want, r.accepted = 0, epoch
				r.use(table, true)
			}
			r.mu.Unlock()
			// The logger is user code: it runs with mu released.
			if rebuilt {
				r.a.log.Debug("routing table rebuilt from the group", "epoch", epoch, "hosts", len(table.Active), "tries", tries+1)
			}
			r.keepTable()
			wait, tries = routingRetryMin, 0
			continue
		}
		tries++
		switch {
		case r.ctx.Err() != nil:
		case errors.Is(err, groupproto.ErrRoutingUnsettled) && tries < 20:
			r.a.log.Debug("routing table not settled yet", "epoch", epoch, "err", err)
		default:
			r.a.log.Warn("cannot rebuild the routing table from the group; queries route only to this instance's own partitions meanwhile", "epoch", epoch, "tries", tries, "err", err)
		}
		select {
		case <-r.ctx.Done():
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, routingRetryMax)
	}
}

// describe asks the group's coordinator for its members and rebuilds the
// routing table of their assignments.
func (r *router) describe() (groupproto.Routing, error) {
	ctx, cancel := context.WithTimeout(r.ctx, routingDescribeTimeout)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{r.a.cfg.ApplicationID}
	resp, err := req.RequestWith(ctx, r.a.adminCl)
	if err != nil {
		return groupproto.Routing{}, err
	}
	if len(resp.Groups) != 1 {
		return groupproto.Routing{}, fmt.Errorf("runtime: DescribeGroups answered %d groups for one", len(resp.Groups))
	}
	return groupproto.GroupRouting(resp.Groups[0])
}

// close stops the refresh and waits for it, before the admin client it
// describes the group with is closed.
func (r *router) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}
