package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// A broker that lost its data (restarted with an empty data directory, or
// an operator who deleted and recreated topics) shows the same topic names
// with new topic IDs, or none at all. kgo never adopts a recreated topic's
// new ID: a client that used the topic gets UNKNOWN_TOPIC_ID for it until
// the topic is purged from it, and its committed offsets, the group and
// the changelogs the stores' positions refer to are gone. Nothing in a
// running client heals that, so the App watches the IDs itself and, on a
// change, pauses its threads, waits for the user's topics, recreates its
// internal ones, resets every store whose changelog is new, and starts
// again with new clients: the state is rebuilt from the new changelogs and
// the input is read from the start of the new topics, which is the only
// state consistent with what the broker now holds.

// topicWatchInterval is how often the App compares the topic IDs the
// broker reports with those it started with.
const topicWatchInterval = 2 * time.Second

// missingLogEvery rate-limits the warning naming user topics that are
// missing.
const missingLogEvery = 10 * time.Second

// rewire is a request for a thread to let go of its client and tasks and
// wait until the App says the topics are back.
type rewire struct {
	paused chan struct{} // closed by the thread once it let go
	resume chan struct{} // closed by the App once the topics are back
}

// topicIDs describes the topics the App uses with a fresh metadata request
// and returns the ID of each that exists. The answer is read in place:
// kadm's ListTopics maps every partition of every topic, which at
// thousands of partitions, every topicWatchInterval, is a share of an
// idle instance's CPU.
func (a *App) topicIDs(ctx context.Context) (map[string]kadm.TopicID, error) {
	names := slices.Sorted(maps.Keys(a.plan.partitions))
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	// Sent as it is, not answered from the client's cache: a recreated
	// topic shows only in a fresh answer.
	resp, err := req.RequestWith(ctx, a.adminCl)
	if err != nil {
		return nil, err
	}
	ids := make(map[string]kadm.TopicID, len(names))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed):
			return nil, fmt.Errorf("topic %s: %w", *t.Topic, err)
		case err == nil && len(t.Partitions) > 0:
			if _, ok := a.plan.partitions[*t.Topic]; ok {
				ids[*t.Topic] = t.TopicID
			}
		}
	}
	return ids, nil
}

// watchTopics compares the topic IDs with the ones the App started with
// and rewires the App when one changed or went missing.
func (a *App) watchTopics(ctx context.Context, known map[string]kadm.TopicID) {
	tick := time.NewTicker(topicWatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ids, err := a.topicIDs(ctx)
		if err != nil {
			continue // the broker may be restarting; ask again
		}
		var changed []string
		for name, id := range known {
			if now, ok := ids[name]; !ok || now != id {
				changed = append(changed, name)
			}
		}
		if len(changed) == 0 {
			continue
		}
		slices.Sort(changed)
		next, err := a.rewireAll(ctx, known, changed)
		if err != nil {
			if ctx.Err() == nil {
				a.fail(err)
			}
			return
		}
		known = next
	}
}

// rewireAll pauses every thread, waits for the user's topics, recreates the
// internal topics, resets the state of recreated changelogs and lets the
// threads start again. It returns the topic IDs it resumed with.
func (a *App) rewireAll(ctx context.Context, known map[string]kadm.TopicID, changed []string) (map[string]kadm.TopicID, error) {
	a.log.Warn("topics this application uses were deleted or recreated (a broker that lost its data?): pausing, recreating the internal topics and rebuilding the state from their new changelogs",
		"topics", changed)
	a.rewires.Add(1)
	resume, err := a.pauseThreads(ctx)
	defer resume()
	if err != nil {
		return nil, err
	}
	if err := a.awaitUserTopics(ctx); err != nil {
		return nil, err
	}
	// Internal topics: created again if missing. Which changelogs are new
	// is decided after, by ID: a missing changelog another instance
	// recreated meanwhile is new all the same.
	if err := changelog.EnsureTopics(ctx, a.admin, a.plan.specs); err != nil {
		return nil, fmt.Errorf("runtime: recreating internal topics: %w", err)
	}
	ids, err := a.topicIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime: describing topics after recreating them: %w", err)
	}
	recreated := make(map[string]bool)
	for name, id := range known {
		if ids[name] != id {
			recreated[name] = true
		}
	}
	all := slices.Sorted(maps.Keys(a.plan.partitions))
	a.adminCl.PurgeTopicsFromClient(all...)
	if err := a.registry.rewire(recreated); err != nil {
		return nil, err
	}
	if err := a.recordChangelogIDs(ids); err != nil {
		return nil, err
	}
	a.log.Info("topics back; threads rejoin the group with new clients", "recreated", slices.Sorted(maps.Keys(recreated)))
	return ids, nil
}

// pauseThreads asks every thread to pause for a rewire and waits until
// each has; resume lets them all go on, whether or not they paused.
func (a *App) pauseThreads(ctx context.Context) (resume func(), err error) {
	req := &rewire{paused: make(chan struct{}), resume: make(chan struct{})}
	var paused []chan struct{}
	for _, th := range a.threads {
		r := &rewire{paused: make(chan struct{}), resume: req.resume}
		th.rewireReq.Store(r)
		paused = append(paused, r.paused)
	}
	resume = func() { close(req.resume) }
	for _, p := range paused {
		select {
		case <-p:
		case <-ctx.Done():
			return resume, ctx.Err()
		}
	}
	return resume, nil
}

// awaitUserTopics waits until every user topic the App reads or writes
// exists again (creating them if Config.CreateMissingTopics allows) with
// the partition count the App started with.
func (a *App) awaitUserTopics(ctx context.Context) error {
	external := a.plan.external
	var lastLog time.Time
	for {
		missing, err := a.missingUserTopics(ctx)
		if err == nil && len(missing) == 0 {
			break
		}
		if err == nil && a.cfg.CreateMissingTopics {
			if err = a.recreateUserTopics(ctx, missing); err == nil {
				continue // to learn their new IDs
			}
		}
		if time.Since(lastLog) >= missingLogEvery {
			lastLog = time.Now()
			if err != nil {
				a.log.Warn("waiting for the broker to describe (or create) the application's topics", "err", err)
			} else {
				a.log.Warn("waiting for the application's input and output topics to exist; create them to resume", "missing", missing)
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	for _, name := range external {
		if want := a.plan.partitions[name]; want > 0 {
			if err := a.checkPartitionCount(ctx, name, want); err != nil {
				return err
			}
		}
	}
	return nil
}

// missingUserTopics lists the user topics the broker does not describe.
func (a *App) missingUserTopics(ctx context.Context) ([]string, error) {
	ids, err := a.topicIDs(ctx)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, name := range a.plan.external {
		if _, ok := ids[name]; !ok {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// checkPartitionCount requires a user topic to have the partition count
// the App started with: tasks and stores are partitioned by it.
func (a *App) checkPartitionCount(ctx context.Context, name string, want int32) error {
	details, err := a.admin.ListTopics(kadm.WithAuthorizedOps(ctx), name)
	if err != nil {
		return fmt.Errorf("runtime: describe topic %q: %w", name, err)
	}
	if got := int32(len(details[name].Partitions)); got != want {
		return fmt.Errorf("runtime: topic %q came back with %d partitions, the application was started with %d; restart it", name, got, want)
	}
	return nil
}

// pauseForRewire is run by a thread that was asked to let go, once its core
// dropped its tasks (EvRewire, then ActReconnect): it closes its client and
// restorer, waits for the App and connects again. The batch stays in
// flight meanwhile, which holds back every event but the closing client's
// callbacks; App.Tasks reads what the thread published.
func (th *thread) pauseForRewire() error {
	r := th.rewiring
	th.rewiring = nil
	th.log.Warn("letting go of tasks and client until the application's topics are back")
	th.releaseClient()
	th.rest.stop()
	// It holds no task now; Tasks reads that here while the pause lasts.
	th.publishTasks()
	close(r.paused)
	select {
	case <-r.resume:
	case <-th.ctx.Done():
	}
	if err := th.rest.start(th.app, th.log); err != nil {
		return err
	}
	return th.connect()
}

// rewire resets what the registry holds for recreated changelogs: the
// core is paused, which closes every standby and parked replica; the task
// directories with a store on a recreated changelog are wiped, and the
// standby reader is replaced, since its client knows the old topic IDs.
// Threads must have let go of their tasks.
func (r *registry) rewire(recreated map[string]bool) error {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvPause}, nil)
	r.unlock()
	r.carry(acts)
	r.awaitQuiet()
	r.cancel()
	r.follower.Close()
	<-r.exited
	rd, err := r.newFollower()
	if err != nil {
		return err
	}
	r.mu.Lock()
	var wipe []instancecore.Action
	for _, id := range slices.SortedFunc(maps.Keys(r.disk), task.ID.Compare) {
		if r.core.OnDisk(id) && r.onRecreated(id, recreated) {
			wipe = append(wipe, r.stepLocked(instancecore.Event{Kind: instancecore.EvWipe, Task: id}, nil)...)
		}
	}
	r.unlock()
	var errs []error
	wiped := 0
	for _, a := range wipe {
		if a.Kind != instancecore.ActDelete {
			continue
		}
		n := storesOnRecreated(r.app, a.Task, recreated)
		err := r.removeDir(a.Task)
		if err == nil {
			r.app.recreatedResets.Add(n)
			wiped++
		} else {
			errs = append(errs, fmt.Errorf("runtime: delete the state of task %s, whose changelog was recreated: %w", a.Task, err))
		}
		r.carry(r.deletedLocking(a.Task, err))
	}
	if wiped > 0 {
		r.log.Warn("deleted the state of tasks whose changelogs were recreated; it is rebuilt from the new changelogs", "tasks", wiped)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.follower = rd
	r.cancel = cancel
	r.exited = make(chan struct{})
	acts = r.stepLocked(instancecore.Event{Kind: instancecore.EvResume}, nil)
	r.unlock()
	go r.follow(ctx)
	go r.tick(ctx)
	r.carry(acts)
	return errors.Join(errs...)
}

// onRecreated reports whether a task has a logged store whose changelog
// was recreated.
func (r *registry) onRecreated(id task.ID, recreated map[string]bool) bool {
	return onRecreated(r.app, id, recreated)
}

// storesOnRecreated counts the persistent stores a task directory holds
// on disk whose changelog was recreated: deleting it resets them.
func storesOnRecreated(a *App, id task.ID, recreated map[string]bool) int64 {
	var n int64
	for _, s := range graph.Of(a.topo).SubTopologies()[id.SubTopology].Stores {
		if !s.Persistent || !s.Logged || !recreated[changelog.TopicName(a.cfg.ApplicationID, s.Name)] {
			continue
		}
		if a.hasStore(id, s.Name) {
			n++
		}
	}
	return n
}

func onRecreated(a *App, id task.ID, recreated map[string]bool) bool {
	for _, s := range graph.Of(a.topo).SubTopologies()[id.SubTopology].Stores {
		if s.Logged && recreated[changelog.TopicName(a.cfg.ApplicationID, s.Name)] {
			return true
		}
	}
	return false
}

// changelogIDsFile records, in the application's state directory, the topic
// IDs of the changelogs the stores on disk were written from. An instance
// that was stopped while the broker lost its data comes back to
// changelogs with the same names and new IDs; its stores' positions count
// records of the old logs and may well fall inside the new ones, where
// restoring from them would mix old state with new.
const changelogIDsFile = "changelog-topic-ids"

// forgetRecreatedState deletes, before the state directory is scanned, the
// task directories whose changelogs have other IDs than the ones recorded,
// and records the current IDs.
func (a *App) forgetRecreatedState(ids map[string]kadm.TopicID) error {
	path := filepath.Join(a.appDir(), changelogIDsFile)
	recorded := make(map[string]string)
	if b, err := os.ReadFile(path); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, id, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				recorded[name] = id
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("runtime: read %s: %w", path, err)
	}
	recreated := make(map[string]bool)
	for _, name := range a.changelogNames() {
		if old, ok := recorded[name]; ok && old != ids[name].String() {
			recreated[name] = true
		}
	}
	if len(recreated) > 0 {
		entries, err := os.ReadDir(a.appDir())
		if err != nil {
			return fmt.Errorf("runtime: read state directory: %w", err)
		}
		subs := graph.Of(a.topo).SubTopologies()
		for _, e := range entries {
			id, err := task.ParseID(e.Name())
			if !e.IsDir() || err != nil || id.SubTopology >= len(subs) {
				continue
			}
			if !onRecreated(a, id, recreated) {
				continue
			}
			a.log.Warn("the changelog of a task's state on disk was recreated since it was written; deleting the state to rebuild it from the new changelog",
				"task", id, "changelogs", slices.Sorted(maps.Keys(recreated)))
			n := storesOnRecreated(a, id, recreated)
			if err := a.removeTaskState(id); err != nil {
				return fmt.Errorf("runtime: delete the state of task %s, whose changelog was recreated: %w", id, err)
			}
			a.recreatedResets.Add(n)
		}
	}
	for _, gs := range graph.Of(a.topo).GlobalStores() {
		if !recreated[gs.Topic] || !gs.Store.Persistent {
			continue
		}
		dir := filepath.Join(a.appDir(), globalDirName, gs.Store.Name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		a.log.Warn("the topic of a global store on disk was recreated since it was read; deleting the store to read the new topic", "store", gs.Store.Name, "topic", gs.Topic)
		if err := statestore.DestroyBadger(dir); err != nil {
			return fmt.Errorf("runtime: delete global store %s, whose topic was recreated: %w", gs.Store.Name, err)
		}
		a.recreatedResets.Add(1)
	}
	return a.recordChangelogIDs(ids)
}

// recordChangelogIDs writes the changelogs' current IDs to the state
// directory, atomically.
func (a *App) recordChangelogIDs(ids map[string]kadm.TopicID) error {
	var sb strings.Builder
	for _, name := range a.changelogNames() {
		if id, ok := ids[name]; ok {
			fmt.Fprintf(&sb, "%s %s\n", name, id)
		}
	}
	path := filepath.Join(a.appDir(), changelogIDsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("runtime: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("runtime: write %s: %w", path, err)
	}
	return nil
}

// changelogNames lists the application's changelog topics, and the topics
// of its global tables (their stores' changelogs, in effect), sorted.
func (a *App) changelogNames() []string {
	var out []string
	for _, names := range a.plan.changelogs {
		out = append(out, names...)
	}
	for _, gs := range graph.Of(a.topo).GlobalStores() {
		out = append(out, gs.Topic)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
