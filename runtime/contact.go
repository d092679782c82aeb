package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupContact is when the group coordinator last confirmed a stream
// thread's membership: the time a request was sent whose answer said the
// member is in the group. Only such an answer counts — a successful
// SyncGroup, or a heartbeat answered without error. An answer refusing the
// member, a request lost to the network, a connection that merely stays
// open: none of these moves it.
//
// A heartbeat answered REBALANCE_IN_PROGRESS counts, within a limit: the
// coordinator still holds the member and renews its session, but drops it
// when the rebalance's join phase ends (a rebalance timeout after it
// began) if its client has not rejoined by then. Such answers move the
// contact no further than the rebalance timeout minus the session timeout
// past the last confirmation of a settled group, so that the contact is a
// session timeout old by the time the member can have been dropped.
//
// A running active is the partition's writer only while its thread is the
// group's member: cut off from the broker, or paused (SIGSTOP), it
// processes nothing, and past the session timeout the group gives its
// tasks to another instance. Queries therefore vouch for an active as
// such only while this contact is recent (see toIQAt). The send time, not
// the answer's arrival, is what counts, so an answer read after a pause
// dates from before it; and nothing but a round trip moves it, so a
// resumed process reads its contact as old as the pause made it, before
// anything else runs.
//
// The thread's group client heartbeats on its own, but franz-go reports no
// heartbeat's outcome; the thread asks the coordinator itself, with a
// heartbeat of the same member and generation (probeContact).
type groupContact struct {
	mu sync.Mutex
	// at is the latest confirmed send time (monotonic: it survives wall
	// clock steps, and Linux's monotonic clock runs while a process is
	// stopped); zero if never.
	at time.Time
	// settled is the latest send time confirmed by an answer other than
	// REBALANCE_IN_PROGRESS: the group's rebalance began after it.
	settled time.Time
	// syncSent is when the thread's client last wrote a SyncGroup.
	syncSent time.Time
	// awaiting is set from a JoinGroup or SyncGroup written until a
	// SyncGroup is answered with an assignment, and awaitingFrom is when
	// the first of those requests was written. Meanwhile the coordinator
	// may settle a new balance whose answer does not reach the thread (a
	// network cut), moving the standbys it follows elsewhere: unlike an
	// active, which the cooperative protocol leaves with its thread until
	// the thread revokes it, a standby is the assignor's to move in any
	// rebalance.
	awaiting     bool
	awaitingFrom time.Time
	// rebalancing is the latest send time of a heartbeat answered
	// REBALANCE_IN_PROGRESS: the group had not settled a new balance then.
	rebalancing time.Time
	// refuted is set when the coordinator answered that it knows the
	// member no longer, or not in its generation (the group rebalanced
	// without it), and cleared by the next confirmation: until then the
	// member's roles are the group's to give away, whatever the age of
	// its last contact.
	refuted bool
}

// confirm records that a request sent at sent was answered with the member
// in the group.
func (c *groupContact) confirm(sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuted = false
	if sent.After(c.at) {
		c.at = sent
	}
	if sent.After(c.settled) {
		c.settled = sent
	}
}

// confirmRebalancing records that a heartbeat sent at sent was answered
// REBALANCE_IN_PROGRESS, which vouches for the member for at most limit
// past the last settled confirmation (see groupContact).
func (c *groupContact) confirmRebalancing(sent time.Time, limit time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.rebalancing) {
		c.rebalancing = sent
	}
	if c.settled.IsZero() {
		return
	}
	if last := c.settled.Add(limit); sent.After(last) {
		sent = last
	}
	if sent.After(c.at) {
		c.at = sent
	}
}

// heard takes the coordinator's answer to a heartbeat sent at sent: the
// member in the group confirms it, REBALANCE_IN_PROGRESS confirms it for
// at most rebalanceLimit past the last settled confirmation, and an
// unknown member, an old generation or a fenced instance refutes it, as
// long as the client still has the member and generation the heartbeat
// named (current): dropped, or the group rebalanced without it, so
// whatever it holds may be another's now. Its client finds out on its own
// heartbeat and rejoins, and the sync that follows confirms it again.
// It reports whether the answer refuted a member not refuted before.
func (c *groupContact) heard(sent time.Time, code int16, current bool, rebalanceLimit time.Duration) (refuted bool) {
	switch code {
	case 0:
		c.confirm(sent)
	case kerr.RebalanceInProgress.Code:
		c.confirmRebalancing(sent, rebalanceLimit)
	case kerr.UnknownMemberID.Code, kerr.IllegalGeneration.Code, kerr.FencedInstanceID.Code:
		if current {
			c.mu.Lock()
			refuted = !c.refuted
			c.refuted = true
			c.mu.Unlock()
		}
	}
	return refuted
}

// isRefuted reports whether the coordinator refuted the member since its
// last confirmation.
func (c *groupContact) isRefuted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refuted
}

// last returns the latest confirmed contact, zero if none.
func (c *groupContact) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// syncWritten records that the client sent a SyncGroup at at.
func (c *groupContact) syncWritten(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncSent = at
	c.awaitLocked(at)
}

// joinWritten records that the client sent a JoinGroup at at.
func (c *groupContact) joinWritten(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awaitLocked(at)
}

func (c *groupContact) awaitLocked(at time.Time) {
	if !c.awaiting {
		c.awaiting, c.awaitingFrom = true, at
	}
}

// assignmentVouched reports whether the thread awaits its assignment (see
// groupContact.awaiting) and, if so, the latest time the group is known
// not to have settled a balance the thread has not heard: when it began
// waiting, or a later heartbeat answered REBALANCE_IN_PROGRESS.
func (c *groupContact) assignmentVouched() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.awaiting {
		return time.Time{}, false
	}
	return later(c.awaitingFrom, c.rebalancing), true
}

// synced confirms the last SyncGroup sent: its answer carried an
// assignment, which the coordinator gives only to a member of the group.
func (c *groupContact) synced() {
	c.mu.Lock()
	sent := c.syncSent
	c.awaiting = false
	c.mu.Unlock()
	if !sent.IsZero() {
		c.confirm(sent)
	}
}

// contactWindow is how recent a running active's group contact must be for
// queries to vouch for it as the partition's active (iq.RoleActive);
// beyond it the active is unconfirmed. A third of the session timeout
// leaves room for two missed probes before the group could have moved on.
func contactWindow(cfg Config) time.Duration { return cfg.SessionTimeout / 3 }

// contactProbeInterval is how often a thread asks the coordinator: the
// heartbeat interval, and at least three times per contact window.
func contactProbeInterval(cfg Config) time.Duration {
	return min(cfg.HeartbeatInterval, contactWindow(cfg)/3)
}

// probeContact asks the coordinator every contactProbeInterval, until ctx
// ends, whether the thread's member is still in the group, and records the
// answer in th.contact. One probe at a time: one lost to a cut network is
// given up after a contact window, past which it could not confirm a
// contact recent enough anyway.
func (th *thread) probeContact(ctx context.Context) {
	cfg := th.app.cfg
	tick := time.NewTicker(contactProbeInterval(cfg))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cl := th.group.Load()
		if cl == nil {
			continue
		}
		member, generation := cl.GroupMetadata()
		if member == "" {
			continue
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = cfg.ApplicationID, member, generation
		if cfg.StaticMembership {
			id := th.instanceID()
			req.InstanceID = &id
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, contactWindow(cfg))
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		if err == nil {
			m, g := cl.GroupMetadata()
			refuted := th.contact.heard(sent, resp.ErrorCode, m == member && g == generation, max(cfg.RebalanceTimeout-cfg.SessionTimeout, 0))
			if refuted && cfg.ProcessingGuarantee != ExactlyOnce {
				// The member's partitions may be another's already; its
				// client hears of it only at its own heartbeat.
				th.dropUnsent(cl)
			}
		}
	}
}

// watchSession runs abortIfSessionGone for an at-least-once thread: at
// the moment its session bound passes, and every probe interval while the
// contact stays that old, since the thread may go on buffering records
// until its commit. It runs apart from probeContact, whose probe can wait
// on a cut network for a contact window.
func (th *thread) watchSession(ctx context.Context) {
	cfg := th.app.cfg
	for {
		wait := contactProbeInterval(cfg)
		if last := th.contact.last(); !last.IsZero() {
			if until := time.Until(last.Add(cfg.SessionTimeout)); until > 0 {
				// Wake just past the bound, not up to an interval after.
				wait = min(wait, until+time.Millisecond)
			} else if cl := th.group.Load(); cl != nil {
				th.abortIfSessionGone(cl, last)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// abortIfSessionGone fails every record an at-least-once thread's client
// still holds unsent, and resets its connections, once the thread's group
// contact (last) is older than the session timeout. By then the
// coordinator may have dropped the member and its tasks may have new
// owners, and nothing fences an at-least-once producer: changelog and
// output records that reached the broker once the network came back would
// land after the new owners' and set their values back. A produce request
// already written is in the connection's unacknowledged bytes; the reset
// drops them (see network.dialIn), so it never arrives. The coordinator
// drops the member a session timeout after the last heartbeat it received,
// which is no earlier than this bound. The commit that follows fails with
// the records (cause), and the thread drops its uncommitted work and
// rejoins, which at-least-once allows: the input since its last commit is
// processed again by whoever owns it now.
func (th *thread) abortIfSessionGone(cl *kgo.Client, last time.Time) {
	// Once for each contact the session outlived: a client kept through
	// one cut (nothing it held failed) must be reset again at the next.
	if a := (abandonment{cl, last}); th.abandoned != a {
		th.abandoned = a
		n := th.app.net.reset(th.conns)
		th.log.Warn("no group contact for longer than the session timeout: connections reset, records not yet sent failed, uncommitted work dropped",
			"last_contact", time.Since(last).Round(time.Millisecond), "connections", n)
	}
	cl.UnsafeAbortBufferedRecords()
}

// dropUnsent fails every record an at-least-once thread's client still
// holds, and resets its connections, when the thread's partitions are
// lost, or the coordinator answers its probe that the member is not in
// the group (or not in its generation): their new owners may already be
// writing. The session bound
// (abortIfSessionGone) does the same once a coordinator could have dropped
// the member, but a coordinator can drop it sooner, as one restarted
// after a crash does when it has not kept its members, and records held
// while the broker was away would then be sent once it is back, after the
// new owners' records, setting their values back. The tasks are closed
// without committing, so nothing of value is lost: their input since the
// last commit is processed again by whoever owns it now. A record failed
// here fails the thread's next commit, and the thread joins again with a
// new client.
func (th *thread) dropUnsent(cl *kgo.Client) {
	if cl == nil {
		return
	}
	n := th.app.net.reset(th.conns)
	cl.UnsafeAbortBufferedRecords()
	th.log.Warn("partitions lost or member refuted: connections reset and records not yet sent failed", "connections", n)
}

// abandonment is a client whose session was given up on, and the last
// contact it was given up after.
type abandonment struct {
	cl   *kgo.Client
	last time.Time
}

// sessionBound is the context an at-least-once thread produces its records
// under: done once the member may have been dropped from the group, its
// last confirmed contact plus the session timeout past. The producer
// checks a record's context when it puts the record into a request, and
// fails the record rather than send it once the context is done, so a
// process resumed from a pause, or a client reconnecting after a network
// cut, does not send records its tasks' new owners have overtaken (see
// abortIfSessionGone). Done is computed from the clock each time it is
// called instead of being closed by a timer: after a pause, the producer's
// goroutine may run before any timer does.
type sessionBound struct{ until time.Time }

// expired is the channel Done returns once the bound has passed.
var expired = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (b *sessionBound) Deadline() (time.Time, bool) { return b.until, true }

// Done is nil while the bound lies ahead, so a select on it waits for
// something else; callers re-check it each time, as the producer does.
func (b *sessionBound) Done() <-chan struct{} {
	if time.Now().Before(b.until) {
		return nil
	}
	return expired
}

func (b *sessionBound) Err() error {
	if time.Now().Before(b.until) {
		return nil
	}
	return context.DeadlineExceeded
}

func (b *sessionBound) Value(any) any { return nil }

// sendContext returns the context the thread's records are produced under:
// a sessionBound from its latest group contact under at-least-once, or
// the background (exactly-once fences through transactions, and a thread
// that never had contact has nothing to send).
func (th *thread) sendContext() context.Context {
	if th.app.cfg.ProcessingGuarantee == ExactlyOnce {
		return context.Background()
	}
	last := th.contact.last()
	if last.IsZero() {
		return context.Background()
	}
	until := last.Add(th.app.cfg.SessionTimeout)
	if b := th.sendBound; b != nil && b.until.Equal(until) {
		return b
	}
	th.sendBound = &sessionBound{until: until}
	return th.sendBound
}

// sessionLost reports whether err is a record failed because the member's
// session may have expired (sessionBound, abortIfSessionGone), or because
// its connection was lost or reset (lostBroker): either way the
// uncommitted work is doomed, and the failed commit has the thread rejoin.
func sessionLost(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrAborting) || lostBroker(err)
}

// doomedByProduce reports whether a produce failure dooms the thread's
// uncommitted work, so that it commits (and fails) at once rather than at
// its interval: any failure under exactly-once, which aborts the
// transaction; under at-least-once, records failed for a lost session,
// after which the failed commit makes the thread rejoin.
func (th *thread) doomedByProduce() bool {
	err := th.produceFailed()
	return err != nil && (th.sess != nil || sessionLost(err))
}
