package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/topology"
)

// Resetting an application makes its next start process its input again
// from the beginning (or from a time), as if it had never run: Kafka
// Streams' application reset tool plus KafkaStreams.cleanUp. What must go:
//
//   - the internal topics: changelogs hold state built from the old run,
//     repartition topics records derived from it. Deleting a topic also
//     drops the group's committed offsets on it, on Kafka and on kfake;
//   - the group's committed offsets on the input topics, replaced by the
//     start (or the first offset at the time);
//   - the local state directory, whose stores hold the old state.
//
// State directories on other machines are not reachable from here; they
// are safe all the same, because the changelogs are recreated with new
// topic IDs and an instance deletes, at start, state recorded against
// another ID (changelogIDsFile in wipe.go).

// ResetOptions says how Reset resets an application.
type ResetOptions struct {
	// ToTime, when set, resets the input offsets to the first record
	// whose timestamp is at or after it (the end of a partition with no
	// such record), instead of to the start of the input.
	ToTime time.Time
	// DryRun makes Reset check and plan everything and change nothing:
	// the report says what it would do.
	DryRun bool
	// KeepLocalState leaves the state directory on this machine alone.
	// It is then deleted at the next start all the same, since its
	// changelogs have new topic IDs.
	KeepLocalState bool
	// RemoveStaticMembers removes the group's static members (by their
	// group instance IDs) before checking that the group is empty. A
	// static member of an instance that was killed stays in the group
	// until its session timeout; only set this when no instance runs,
	// since a live static member removed this way rejoins and the group
	// is no longer empty (Reset then refuses).
	RemoveStaticMembers bool
}

// ResetReport says what Reset did, or with DryRun would do.
type ResetReport struct {
	Group  string
	DryRun bool
	// InternalTopics are the changelog and repartition topics deleted.
	InternalTopics []string
	// Offsets are the committed offsets written, per input topic and
	// partition.
	Offsets map[string]map[int32]int64
	// IntermediateTopics are user topics the topology both writes and
	// reads; their offsets are set to their end, since the reprocessed
	// input writes them again.
	IntermediateTopics []string
	// StateDir is the local state directory emptied ("" when kept), and
	// StateEntries what was deleted from it.
	StateDir     string
	StateEntries []string
	// RemovedStaticMembers are the group instance IDs removed from the
	// group (RemoveStaticMembers).
	RemovedStaticMembers []string
}

// WriteTo prints the report for people, one action per line.
func (r *ResetReport) WriteTo(w io.Writer) (int64, error) {
	var sb strings.Builder
	verb := func(done, planned string) string {
		if r.DryRun {
			return planned
		}
		return done
	}
	if r.DryRun {
		fmt.Fprintf(&sb, "dry run: nothing is changed\n")
	}
	for _, id := range r.RemovedStaticMembers {
		fmt.Fprintf(&sb, "%s static member %s from group %s\n", verb("removed", "would remove"), id, r.Group)
	}
	if len(r.InternalTopics) == 0 {
		fmt.Fprintf(&sb, "no internal topics to delete\n")
	}
	for _, t := range r.InternalTopics {
		fmt.Fprintf(&sb, "%s topic %s\n", verb("deleted", "would delete"), t)
	}
	for _, t := range slices.Sorted(maps.Keys(r.Offsets)) {
		ps := r.Offsets[t]
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(ps)) {
			parts = append(parts, fmt.Sprintf("%d:%d", p, ps[p]))
		}
		kind := "input"
		if slices.Contains(r.IntermediateTopics, t) {
			kind = "intermediate"
		}
		fmt.Fprintf(&sb, "%s group %s offsets on %s topic %s to %s\n", verb("set", "would set"), r.Group, kind, t, strings.Join(parts, " "))
	}
	if r.StateDir == "" {
		fmt.Fprintf(&sb, "local state directory kept\n")
	} else {
		fmt.Fprintf(&sb, "%s %d entries of local state directory %s\n", verb("deleted", "would delete"), len(r.StateEntries), r.StateDir)
	}
	n, err := io.WriteString(w, sb.String())
	return int64(n), err
}

// GroupMember describes a member of a consumer group.
type GroupMember struct {
	MemberID string
	// InstanceID is the static member's group instance ID, "" for a
	// dynamic member.
	InstanceID string
	ClientID   string
	ClientHost string
}

func (m GroupMember) String() string {
	s := m.MemberID
	if m.InstanceID != "" {
		s += " (instance " + m.InstanceID + ")"
	}
	return s + " from " + m.ClientHost
}

// ActiveMembersError is Reset's refusal to reset an application whose
// group still has members: instances are running, or were killed less than
// a session timeout ago.
type ActiveMembersError struct {
	Group   string
	State   string
	Members []GroupMember
}

func (e *ActiveMembersError) Error() string {
	var names []string
	static := false
	for _, m := range e.Members {
		names = append(names, m.String())
		static = static || m.InstanceID != ""
	}
	msg := fmt.Sprintf("runtime: cannot reset application %q: its group is %s with %d members: %s; stop every instance first (a killed instance's members stay until the session timeout)",
		e.Group, e.State, len(e.Members), strings.Join(names, ", "))
	if static {
		msg += "; static members of stopped instances can be removed with RemoveStaticMembers"
	}
	return msg
}

// Reset resets the application cfg.ApplicationID running topo, which must
// be stopped on every machine: it refuses with an *ActiveMembersError while
// the group has members, and with ErrStateDirLocked while an instance on
// this machine holds the state directory. It then waits for transactions
// holding offsets of the group to finish, commits the group's offsets on the
// input topics (to the start, or to opts.ToTime), deletes the internal
// topics and waits until the brokers no longer list them, and empties the
// local state directory. The next start recreates the internal topics and
// processes the input again.
//
// Internal topics are those the topology names and every other topic named
// "<ApplicationID>-...-changelog" or "-repartition", as an earlier version
// of the topology may have left (so an application whose ID is a prefix of
// another's followed by '-' would catch that one's: give applications IDs
// that are not). Output topics are left alone: the reprocessed input is
// written to them again, after what they hold.
//
// cfg is the application's configuration; Reset uses its ApplicationID,
// Brokers, StateDir, TLS, SASL, Dial, ClientOptions and Logger.
func Reset(ctx context.Context, topo *topology.Topology, cfg Config, opts ResetOptions) (*ResetReport, error) {
	if topo == nil {
		return nil, errors.New("runtime: nil topology")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	app := cfg.ApplicationID
	log := cfg.Logger.With("app", app, "reset", true)
	rep := &ResetReport{Group: app, DryRun: opts.DryRun}

	// The local lock first: an instance on this machine is the likeliest
	// to be running, and holding the lock keeps one from starting.
	var dir *stateDir
	if !opts.KeepLocalState {
		var err error
		if dir, err = lockStateDir(filepath.Join(cfg.StateDir, app)); err != nil {
			return nil, err
		}
		defer dir.close()
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, connOptions(cfg, newNetwork(cfg.TLS, cfg.Dial))...)...)
	if err != nil {
		return nil, fmt.Errorf("runtime: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	if rep.RemovedStaticMembers, err = checkGroupEmpty(ctx, adm, app, opts); err != nil {
		return nil, AuthFailure(err, cfg.Brokers, cfg.SASL)
	}

	if err := planReset(ctx, adm, topo, app, opts.ToTime, dir, rep); err != nil {
		return nil, err
	}
	if opts.DryRun {
		return rep, nil
	}
	if err := applyReset(ctx, adm, app, dir, rep, log); err != nil {
		return nil, err
	}
	return rep, nil
}

// planReset fills rep with what the reset does: the offsets it commits on
// the input topics, the internal topics it deletes and the entries of the
// state directory it empties (dir, if it is to be emptied).
func planReset(ctx context.Context, adm *kadm.Client, topo *topology.Topology, app string, toTime time.Time, dir *stateDir, rep *ResetReport) error {
	inputs, intermediate := userSources(topo, app)
	rep.IntermediateTopics = intermediate
	var err error
	if rep.InternalTopics, err = internalTopics(ctx, adm, topo, app); err != nil {
		return err
	}
	if rep.Offsets, err = resetOffsets(ctx, adm, inputs, intermediate, toTime); err != nil {
		return err
	}
	if dir != nil {
		rep.StateDir = dir.path
		if rep.StateEntries, err = stateEntries(dir.path); err != nil {
			return err
		}
	}
	return nil
}

// applyReset does what rep plans, once no transaction holds offsets of the
// group: it commits the offsets, deletes the internal topics and empties
// the state directory.
func applyReset(ctx context.Context, adm *kadm.Client, app string, dir *stateDir, rep *ResetReport, log *slog.Logger) error {
	if err := awaitStableOffsets(ctx, adm, app, log); err != nil {
		return err
	}
	if err := commitResetOffsets(ctx, adm, app, rep.Offsets, log); err != nil {
		return err
	}
	if err := deleteTopics(ctx, adm, rep.InternalTopics); err != nil {
		return err
	}
	if len(rep.InternalTopics) > 0 {
		log.Info("internal topics deleted", "topics", rep.InternalTopics)
	}
	if dir != nil {
		if err := wipeStateDir(dir.path, rep.StateEntries); err != nil {
			return err
		}
		log.Info("local state deleted", "dir", dir.path)
	}
	return nil
}

// commitResetOffsets commits the group's offsets on the input topics,
// refusing with an *ActiveMembersError if an instance joined meanwhile.
func commitResetOffsets(ctx context.Context, adm *kadm.Client, app string, offsets map[string]map[int32]int64, log *slog.Logger) error {
	commit := make(kadm.Offsets)
	for t, ps := range offsets {
		for p, o := range ps {
			commit.Add(kadm.Offset{Topic: t, Partition: p, At: o, LeaderEpoch: -1})
		}
	}
	if len(commit) == 0 {
		return nil
	}
	resp, err := adm.CommitOffsets(ctx, app, commit)
	if err == nil {
		err = resp.Error()
	}
	if err == nil {
		log.Info("input offsets reset", "topics", slices.Sorted(maps.Keys(offsets)))
		return nil
	}
	var busy *ActiveMembersError
	if gerr := groupMembersError(ctx, adm, app); errors.As(gerr, &busy) {
		return busy // an instance started meanwhile
	}
	return fmt.Errorf("runtime: commit the reset offsets of group %q: %w", app, err)
}

// lockStateDir takes the application's state directory lock without
// creating the directory or a process ID: a directory that does not exist
// holds nothing to wipe and cannot be held by an instance.
func lockStateDir(dir string) (*stateDir, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return &stateDir{path: dir}, nil
	}
	return openStateDir(dir)
}

// checkGroupEmpty refuses a group with members, after removing its static
// members when asked to; it returns the instance IDs removed.
func checkGroupEmpty(ctx context.Context, adm *kadm.Client, group string, opts ResetOptions) ([]string, error) {
	err := groupMembersError(ctx, adm, group)
	var busy *ActiveMembersError
	if !opts.RemoveStaticMembers || !errors.As(err, &busy) {
		return nil, err
	}
	var ids []string
	for _, m := range busy.Members {
		if m.InstanceID != "" {
			ids = append(ids, m.InstanceID)
		}
	}
	if len(ids) == 0 || opts.DryRun {
		if len(ids) < len(busy.Members) {
			return nil, busy
		}
		return ids, nil
	}
	resp, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(ids...).Reason("eddy application reset"))
	if err == nil {
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownMemberID) {
				err = fmt.Errorf("instance %s: %w", r.InstanceID, r.Err)
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: remove static members of group %q: %w", group, err)
	}
	if err := groupMembersError(ctx, adm, group); err != nil {
		return nil, err
	}
	return ids, nil
}

// groupMembersError describes group and returns an *ActiveMembersError if
// it has members.
func groupMembersError(ctx context.Context, adm *kadm.Client, group string) error {
	groups, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = groups.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // never ran, or deleted: nothing to refuse
	}
	if err != nil {
		return fmt.Errorf("runtime: describe group %q: %w", group, err)
	}
	g := groups[group]
	if len(g.Members) == 0 {
		return nil
	}
	busy := &ActiveMembersError{Group: group, State: g.State}
	for _, m := range g.Members {
		gm := GroupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		busy.Members = append(busy.Members, gm)
	}
	return busy
}

// userSources returns the user topics the topology reads, sorted, and
// those of them it also writes.
func userSources(topo *topology.Topology, app string) (inputs, intermediate []string) {
	sinks := make(map[string]bool)
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, r := range st.Sinks {
			if !r.Internal {
				sinks[r.Name] = true
			}
		}
	}
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, r := range st.Sources {
			if r.Internal {
				continue
			}
			inputs = append(inputs, r.Name)
			if sinks[r.Name] {
				intermediate = append(intermediate, r.Name)
			}
		}
	}
	slices.Sort(inputs)
	slices.Sort(intermediate)
	return slices.Compact(inputs), slices.Compact(intermediate)
}

// internalTopics lists the application's internal topics that exist: those
// the topology names and those its naming scheme matches.
func internalTopics(ctx context.Context, adm *kadm.Client, topo *topology.Topology, app string) ([]string, error) {
	named := make(map[string]bool)
	for _, rp := range graph.Of(topo).RepartitionTopics() {
		named[rp.Topic.FullName(app)] = true
	}
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, s := range st.Stores {
			if s.Logged {
				named[changelog.TopicName(app, s.Name)] = true
			}
		}
	}
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime: list topics: %w", err)
	}
	var out []string
	for name, d := range all {
		if d.Err != nil {
			continue
		}
		internal := strings.HasPrefix(name, app+"-") &&
			(strings.HasSuffix(name, "-changelog") || strings.HasSuffix(name, "-repartition"))
		if named[name] || internal {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// resetOffsets lists the offsets the input topics' partitions are reset to:
// the start, or the first offset at or after toTime; intermediate topics
// go to their end.
func resetOffsets(ctx context.Context, adm *kadm.Client, inputs, intermediate []string, toTime time.Time) (map[string]map[int32]int64, error) {
	out := make(map[string]map[int32]int64)
	add := func(listed kadm.ListedOffsets, err error) error {
		if err != nil {
			return err
		}
		if err := listed.Error(); err != nil {
			return err
		}
		listed.Each(func(o kadm.ListedOffset) {
			if out[o.Topic] == nil {
				out[o.Topic] = make(map[int32]int64)
			}
			out[o.Topic][o.Partition] = o.Offset
		})
		return nil
	}
	var plain []string
	for _, t := range inputs {
		if !slices.Contains(intermediate, t) {
			plain = append(plain, t)
		}
	}
	if len(plain) > 0 {
		var err error
		if toTime.IsZero() {
			err = add(adm.ListStartOffsets(ctx, plain...))
		} else {
			err = add(adm.ListOffsetsAfterMilli(ctx, toTime.UnixMilli(), plain...))
		}
		if err != nil {
			return nil, fmt.Errorf("runtime: list the offsets to reset input topics %v to: %w", plain, err)
		}
	}
	if len(intermediate) > 0 {
		if err := add(adm.ListEndOffsets(ctx, intermediate...)); err != nil {
			return nil, fmt.Errorf("runtime: list the end offsets of intermediate topics %v: %w", intermediate, err)
		}
	}
	return out, nil
}

// stableWait is how often Reset asks again whether transactions still
// hold offsets of the group.
const stableWait = 200 * time.Millisecond

// awaitStableOffsets waits until no open transaction holds offsets of the
// group (KIP-447's require-stable fetch). An exactly-once instance that
// died inside a transaction leaves one open until its transaction timeout
// (or until its transactional ID is used again); if it were committed
// after the reset, its offsets would overwrite the reset ones.
func awaitStableOffsets(ctx context.Context, adm *kadm.Client, group string, log *slog.Logger) error {
	logged := false
	for {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
		if err == nil {
			err = resp.Error()
		}
		if err == nil || errors.Is(err, kerr.GroupIDNotFound) {
			return nil
		}
		if !errors.Is(err, kerr.UnstableOffsetCommit) {
			return fmt.Errorf("runtime: fetch the committed offsets of group %q: %w", group, err)
		}
		if !logged {
			log.Info("waiting for an open transaction holding offsets of the group to finish (at most the transaction timeout)")
			logged = true
		}
		t := time.NewTimer(stableWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("runtime: waiting for open transactions on group %q to finish: %w", group, ctx.Err())
		case <-t.C:
		}
	}
}

// deleteTopics deletes topics and waits until the brokers no longer list
// any of them: Kafka deletes asynchronously, and an instance started while
// a topic is still being deleted could not create it again.
func deleteTopics(ctx context.Context, adm *kadm.Client, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("runtime: delete internal topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("runtime: delete internal topic %s: %w", r.Topic, r.Err)
		}
	}
	for {
		listed, err := adm.ListTopics(ctx, topics...)
		var left []string
		if err == nil {
			for _, t := range topics {
				if d, ok := listed[t]; ok && d.Err == nil {
					left = append(left, t)
				}
			}
			if len(left) == 0 {
				return nil
			}
		}
		t := time.NewTimer(stableWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("runtime: waiting for the brokers to finish deleting %v: %w", left, ctx.Err())
		case <-t.C:
		}
	}
}

// stateEntries lists what wiping the state directory deletes: everything
// but the lock and the process ID. The process ID stays so that the next
// start uses the same transactional IDs, and so fences any producer of the
// old run still alive.
func stateEntries(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: read state directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); n != lockFileName && n != processIDFileName {
			out = append(out, n)
		}
	}
	return out, nil
}

func wipeStateDir(dir string, entries []string) error {
	for _, n := range entries {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("runtime: delete local state: %w", err)
		}
	}
	return nil
}
