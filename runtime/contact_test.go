package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
)

// Only answers that say the member is in the group move its contact, never
// backwards, and answers during a rebalance no further than their limit
// past the last settled one.
func TestGroupContactConfirmations(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var c groupContact
	c.synced()
	require.True(t, c.last().IsZero(), "no SyncGroup was sent")
	c.confirmRebalancing(at(1), 20*time.Second)
	require.True(t, c.last().IsZero(), "a rebalance answer alone vouches for nothing")

	c.syncWritten(at(2))
	c.synced()
	require.Equal(t, at(2), c.last(), "a sync answered with an assignment dates from its sending")
	c.confirm(at(1))
	require.Equal(t, at(2), c.last(), "an older answer does not move it back")

	c.confirmRebalancing(at(10), 20*time.Second)
	require.Equal(t, at(10), c.last())
	c.confirmRebalancing(at(30), 20*time.Second)
	require.Equal(t, at(22), c.last(), "a long rebalance vouches for the member up to the limit past the last settled answer")
	c.confirm(at(31))
	require.Equal(t, at(31), c.last())
	c.confirmRebalancing(at(32), 0)
	require.Equal(t, at(31), c.last(), "with no limit, rebalance answers vouch for nothing new")
}

// blackhole holds the traffic of the connections it wraps while on, the
// way a network dropping packets does: nothing is refused or closed, reads
// and writes just wait (until their deadline, if they have one), and what
// TCP would have retransmitted flows again once it is off.
type blackhole struct {
	mu       sync.Mutex
	on       bool
	restored chan struct{} // closed when turned off
}

func newBlackhole() *blackhole { return &blackhole{restored: make(chan struct{})} }

func (b *blackhole) set(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case on && !b.on:
		b.restored = make(chan struct{})
	case !on && b.on:
		close(b.restored)
	}
	b.on = on
}

// wait returns once the hole is off, or fails when deadline (if set)
// passes or the connection closes first.
func (b *blackhole) wait(deadline time.Time, closed <-chan struct{}) error {
	b.mu.Lock()
	on, restored := b.on, b.restored
	b.mu.Unlock()
	if !on {
		return nil
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-restored:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-closed:
		return net.ErrClosed
	}
}

func (b *blackhole) wrap(c net.Conn) net.Conn {
	return &holeConn{Conn: c, hole: b, closed: make(chan struct{})}
}

type holeConn struct {
	net.Conn
	hole      *blackhole
	closeOnce sync.Once
	closed    chan struct{}

	mu     sync.Mutex
	rd, wd time.Time
}

func (c *holeConn) deadlines() (rd, wd time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rd, c.wd
}

func (c *holeConn) Read(p []byte) (int, error) {
	rd, _ := c.deadlines()
	if err := c.hole.wait(rd, c.closed); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	// Bytes that arrived as the hole opened are held too; on a timeout
	// they are lost with the connection, which the client then drops.
	if werr := c.hole.wait(rd, c.closed); werr != nil {
		return 0, werr
	}
	return n, err
}

func (c *holeConn) Write(p []byte) (int, error) {
	_, wd := c.deadlines()
	if err := c.hole.wait(wd, c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *holeConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *holeConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd, c.wd = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *holeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *holeConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wd = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// tcpHole holds connections the way a network partition holds TCP: reads
// wait as across a blackhole, while writes succeed into the sender's queue
// of unacknowledged bytes. When the network comes back (heal) each queue is
// delivered, also for a connection closed meanwhile (its kernel goes on
// sending after an orderly close), unless the connection was reset: closed
// with linger 0, which drops its queue.
//
// With produceOnly it holds only Produce and JoinGroup requests (and
// whatever a connection writes behind one), while every other request
// and every read goes through: the member hears from its coordinator
// meanwhile (that it was removed, say), but its records wait, as on a
// path to a partition leader that drops packets, and it cannot join again
// before the hole heals.
type tcpHole struct {
	*blackhole
	produceOnly bool
	mu          sync.Mutex
	conns       []*tcpHoleConn
}

func newTCPHole() *tcpHole { return &tcpHole{blackhole: newBlackhole()} }

func newProduceHole() *tcpHole { return &tcpHole{blackhole: newBlackhole(), produceOnly: true} }

// isProduceOrJoin reports whether p starts a Produce or JoinGroup request:
// a 4-byte size, then API key 0 or 11. The client writes each request
// whole.
func isProduceOrJoin(p []byte) bool {
	if len(p) < 6 {
		return false
	}
	key := binary.BigEndian.Uint16(p[4:6])
	return key == 0 || key == 11
}

func (h *tcpHole) wrap(c net.Conn) net.Conn {
	hc := &tcpHoleConn{holeConn: holeConn{Conn: c, hole: h.blackhole, closed: make(chan struct{})}, produceOnly: h.produceOnly}
	h.mu.Lock()
	h.conns = append(h.conns, hc)
	h.mu.Unlock()
	return hc
}

// heal lets traffic through again and delivers every queue.
func (h *tcpHole) heal() {
	h.set(false)
	h.mu.Lock()
	conns := slices.Clone(h.conns)
	h.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.deliverLocked()
		c.mu.Unlock()
	}
}

type tcpHoleConn struct {
	holeConn
	produceOnly bool
	mu          sync.Mutex
	queued      []byte
	linger0     bool
	closing     bool
}

func (c *tcpHoleConn) Read(p []byte) (int, error) {
	if c.produceOnly {
		return c.Conn.Read(p)
	}
	return c.holeConn.Read(p)
}

func (c *tcpHoleConn) on() bool {
	c.hole.mu.Lock()
	defer c.hole.mu.Unlock()
	return c.hole.on
}

func (c *tcpHoleConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return 0, net.ErrClosed
	}
	hold := c.on() && (!c.produceOnly || len(c.queued) > 0 || isProduceOrJoin(p))
	if !hold && len(c.queued) == 0 {
		return c.Conn.Write(p)
	}
	c.queued = append(c.queued, p...)
	if !c.on() {
		c.deliverLocked()
	}
	return len(p), nil
}

// deliverLocked sends the queue once the hole is off, then completes a
// close that waited for it.
func (c *tcpHoleConn) deliverLocked() {
	if c.on() {
		return
	}
	if len(c.queued) > 0 {
		c.Conn.Write(c.queued)
		c.queued = nil
	}
	if c.closing {
		c.Conn.Close()
	}
}

func (c *tcpHoleConn) SetLinger(sec int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.linger0 = sec == 0
	return nil
}

func (c *tcpHoleConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	if c.linger0 {
		c.queued = nil
	}
	if len(c.queued) > 0 && c.on() {
		return nil // sent, then closed, once the network is back
	}
	c.queued = nil
	return c.Conn.Close()
}

// issue 29 item 2: an instance whose traffic to the broker is blackholed
// stops answering for its active partition as a fresh active within the
// contact window — it answers as unconfirmed, failing active, lag and
// tight age bounds — and stops answering for it at all before the group
// gives it to another instance, which then answers as the active. Once
// the network is back it rejoins and answers as an active again.
func TestBlackholedActiveTurnsUnconfirmedAndStepsAside(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	hole := newBlackhole()
	logs := &logSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs:\n%s", logs.String())
		}
	})
	const session = 3 * time.Second
	start := func(name string, cut bool) *App {
		app, err := New(countTopology(t), Config{
			ApplicationID: "contact", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: 1, SessionTimeout: session, CommitInterval: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name),
		})
		require.NoError(t, err)
		if cut {
			app.net.wrap = hole.wrap
		}
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() {
			hole.set(false)
			app.Close(context.Background())
		})
		return app
	}
	a := start("A", true)
	waitFor(t, 20*time.Second, "A ready", a.Ready)
	bb := start("B", false)
	waitFor(t, 30*time.Second, "A and B ready with one task each", func() bool {
		return a.Ready() && bb.Ready() && len(a.Tasks()) == 1 && len(bb.Tasks()) == 1 &&
			a.Tasks()[0].State == task.Running && bb.Tasks()[0].State == task.Running
	})
	held := a.Tasks()[0].ID

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		p, err := a.Queries().KeyPartition("counts", []byte(k))
		require.NoError(t, err)
		if p == held.Partition {
			key = k
		}
	}
	for range 5 {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(key), Value: []byte("v")}).FirstErr())
	}

	ctx := context.Background()
	qa, qb := iq.NewQuerier(a.Queries()), iq.NewQuerier(bb.Queries())
	get := func(q *iq.Querier, bound iq.Staleness) (iq.Result[int64], error) {
		return iq.Get(ctx, q, "counts", key, serde.String, serde.Int64, iq.WithStaleness(bound))
	}
	window := contactWindow(a.cfg)
	waitFor(t, 20*time.Second, "A counts the key as its active", func() bool {
		res, err := get(qa, iq.ActiveOnly())
		return err == nil && res.Found && res.Value == 5
	})
	res, err := get(qa, iq.ActiveOnly())
	require.NoError(t, err)
	require.Equal(t, iq.RoleActive, res.Provenance.Role)
	require.GreaterOrEqual(t, res.Provenance.ContactAgo, time.Duration(0))
	require.LessOrEqual(t, res.Provenance.ContactAgo, window)

	// Watch, from the cut on, that A never answers as the active while
	// B does.
	var both atomic.Int64
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			rb, errB := get(qb, iq.ActiveOnly())
			ra, errA := get(qa, iq.ActiveOnly())
			if errB == nil && errA == nil && rb.Provenance.Role == iq.RoleActive && ra.Provenance.Role == iq.RoleActive {
				both.Add(1)
			}
		}
	}()
	stopWatching := sync.OnceFunc(func() { close(stopWatch); <-watched })
	defer stopWatching()

	hole.set(true)
	cut := time.Now()
	var unconfirmed iq.Result[int64]
	waitFor(t, window+3*time.Second, "A's answer for its partition unconfirmed", func() bool {
		unconfirmed, err = get(qa, iq.AnyStaleness())
		return err == nil && unconfirmed.Provenance.Role == iq.RoleUnconfirmed
	})
	t.Logf("A unconfirmed %s after the cut (contact window %s)", time.Since(cut).Round(time.Millisecond), window)
	require.Equal(t, int64(5), unconfirmed.Value, "what it held")
	require.Equal(t, int64(-1), unconfirmed.Provenance.Lag)
	require.Greater(t, unconfirmed.Provenance.ContactAgo, window)
	require.Equal(t, unconfirmed.Provenance.ContactAgo, unconfirmed.Provenance.Age, "its age counts from its last contact")
	for _, bound := range []iq.Staleness{iq.ActiveOnly(), iq.MaxLag(1 << 40), iq.MaxAge(window)} {
		_, err := get(qa, bound)
		require.ErrorIs(t, err, iq.ErrTooStale, "cut off A answered under %s", bound)
	}
	_, _, _, err = activeGet(a, "counts", []byte(key))
	require.Error(t, err, "the default bound answers only from a confirmed active")

	// Its metrics and its health say so too: the replica series carry
	// the role unconfirmed and no lag, and /healthz, with no active
	// confirmed, is not ready.
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(a.Metrics()))
	scraped := gather(t, reg)
	part := fmt.Sprintf("partition=%q", strconv.Itoa(int(held.Partition)))
	require.Positive(t, scraped.sum("eddy_replica_position", part, `role="unconfirmed"`), "series: %v", scraped["eddy_replica_position"].series)
	require.Zero(t, scraped.sum("eddy_replica_position", part, `role="active"`), "series: %v", scraped["eddy_replica_position"].series)
	for labels := range scraped["eddy_replica_lag_records"].series {
		require.NotContains(t, labels, part, "an unconfirmed active's lag is unknown")
	}
	health := httptest.NewRecorder()
	iq.NewServer(a.Queries(), iq.ServerConfig{}).ServeHTTP(health, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, health.Code, "healthz: %s", health.Body)
	require.Contains(t, health.Body.String(), "unconfirmed")

	// The group gives the partition to B once A's session expires; by
	// then A no longer answers for it at all.
	waitFor(t, 30*time.Second, "B answers as the partition's active", func() bool {
		res, err := get(qb, iq.ActiveOnly())
		return err == nil && res.Provenance.Role == iq.RoleActive
	})
	t.Logf("B active for %s %s after the cut", held, time.Since(cut).Round(time.Millisecond))
	_, err = a.Queries().Replica("counts", held.Partition)
	require.ErrorIs(t, err, iq.ErrRebalancing, "A, past its session, must not answer for the partition")
	_, err = get(qa, iq.AnyStaleness())
	require.Error(t, err)
	require.False(t, errors.Is(err, iq.ErrTooStale), "refused as moving, not as stale: %v", err)

	// Back on the network, A finds it was fenced, rejoins, and answers as
	// an active again for what it is given.
	hole.set(false)
	waitFor(t, 40*time.Second, "A and B ready again, each running a task", func() bool {
		return a.Ready() && bb.Ready() && len(a.Tasks()) == 1 && len(bb.Tasks()) == 1 &&
			a.Tasks()[0].State == task.Running && bb.Tasks()[0].State == task.Running
	})
	waitFor(t, 10*time.Second, "A's active confirmed again", func() bool {
		for _, info := range a.Queries().LocalReplicas() {
			if info.Role == iq.RoleActive {
				return true
			}
		}
		return false
	})
	stopWatching()
	require.Zero(t, both.Load(), "A answered as the active while B did")
}

// A standby on an instance cut off from the broker vouches for nothing
// later than the cut: no catch-up, no confirmation of its changelog's end
// and no group contact dated after it, whatever it noticed since, so its
// age grows with the cut and its lag turns unknown. Once its group session
// must have expired — the group then gives every task to the other
// instance, and the partition has no standby left — it no longer answers
// for the partition at all, refusing as a partition on the move. Back on
// the network it answers as a standby again for what it is given.
func TestBlackholedStandbyAgesHonestlyAndStepsAside(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	hole := newBlackhole()
	logs := &logSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs:\n%s", logs.String())
		}
	})
	const session = 3 * time.Second
	start := func(name string, cut bool) *App {
		cfg := Config{
			ApplicationID: "standby-contact", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: 1, NumStandbys: 1, SessionTimeout: session, CommitInterval: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name),
		}
		if cut {
			cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, address)
				if err != nil {
					return nil, err
				}
				return hole.wrap(c), nil
			}
		}
		app, err := New(countTopology(t), cfg)
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() {
			hole.set(false)
			app.Close(context.Background())
		})
		return app
	}
	a := start("A", true)
	waitFor(t, 20*time.Second, "A ready", a.Ready)
	bb := start("B", false)
	// standbyOf finds the task A follows as B's standby, when each runs
	// one task.
	standbyOf := func() (task.ID, bool) {
		if !a.Ready() || !bb.Ready() {
			return task.ID{}, false
		}
		ta, tb := a.Tasks(), bb.Tasks()
		if len(ta) != 1 || len(tb) != 1 || ta[0].State != task.Running || tb[0].State != task.Running {
			return task.ID{}, false
		}
		for _, ri := range a.Replicas() {
			if ri.State == task.Standby && ri.Task == tb[0].ID {
				return ri.Task, true
			}
		}
		return task.ID{}, false
	}
	var followed task.ID
	waitFor(t, 40*time.Second, "A and B running a task each, A following B's as its standby", func() bool {
		id, ok := standbyOf()
		followed = id
		return ok
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		p, err := a.Queries().KeyPartition("counts", []byte(k))
		require.NoError(t, err)
		if p == followed.Partition {
			key = k
		}
	}
	for range 5 {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(key), Value: []byte("v")}).FirstErr())
	}
	qa := iq.NewQuerier(a.Queries())
	waitFor(t, 20*time.Second, "A's standby caught up with the key's count", func() bool {
		res, err := iq.Get(context.Background(), qa, "counts", key, serde.String, serde.Int64, iq.WithStaleness(iq.MaxLag(0)))
		return err == nil && res.Found && res.Value == 5 && res.Provenance.Role == iq.RoleStandby
	})

	hole.set(true)
	cut := time.Now()
	// Until its session must have expired, A answers for the partition as
	// its standby, vouching for nothing dated after the cut.
	checked := 0
	for {
		require.Less(t, time.Since(cut), session+10*time.Second, "A still answers as the partition's standby past its session")
		before := time.Now()
		r, err := a.Queries().Replica("counts", followed.Partition)
		if err != nil {
			require.ErrorIs(t, err, iq.ErrRebalancing)
			break
		}
		info := r.Info()
		since := before.Sub(cut)
		require.Equal(t, iq.RoleStandby, info.Role)
		require.GreaterOrEqual(t, info.LagConfirmedAgo, since, "changelog end confirmed after the cut: %+v", info)
		require.GreaterOrEqual(t, info.CaughtUpAgo, since, "caught up after the cut: %+v", info)
		require.GreaterOrEqual(t, info.ContactAgo, since, "group contact after the cut: %+v", info)
		age, ok := info.Age()
		require.True(t, ok)
		require.GreaterOrEqual(t, age, since, "an age younger than the cut: %+v", info)
		if since > LagConfirmWindow {
			require.Equal(t, int64(-1), info.Lag, "a lag confirmed before the cut is unknown past the window: %+v", info)
		}
		checked++
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("A refused its standby %s after the cut (session %s), after %d answers checked", time.Since(cut).Round(time.Millisecond), session, checked)
	require.Positive(t, checked)

	// The group gives both tasks to B; A goes on refusing, as moving
	// rather than too stale, so that routers ask the others.
	waitFor(t, 30*time.Second, "B running both tasks", func() bool {
		n := 0
		for _, ti := range bb.Tasks() {
			if ti.State == task.Running {
				n++
			}
		}
		return n == 2
	})
	_, err = a.Queries().Replica("counts", followed.Partition)
	require.ErrorIs(t, err, iq.ErrRebalancing)
	_, err = iq.Get(context.Background(), qa, "counts", key, serde.String, serde.Int64, iq.WithStaleness(iq.AnyStaleness()))
	require.Error(t, err)
	require.False(t, errors.Is(err, iq.ErrTooStale), "refused as moving, not as stale: %v", err)

	// Back on the network, A rejoins and answers as a standby again, its
	// contact recent.
	hole.set(false)
	waitFor(t, 60*time.Second, "A and B running a task each again, A following B's", func() bool {
		id, ok := standbyOf()
		followed = id
		return ok
	})
	waitFor(t, 20*time.Second, "A's standby answering, its contact recent", func() bool {
		r, err := a.Queries().Replica("counts", followed.Partition)
		if err != nil {
			return false
		}
		info := r.Info()
		return info.Role == iq.RoleStandby && info.ContactAgo >= 0 && info.ContactAgo <= contactWindow(a.cfg)
	})
}

// A record produced under a sessionBound is sent only while the bound lies
// ahead: one still buffered when it passes (its client cut off from the
// broker meanwhile) is failed with context.DeadlineExceeded, not sent once
// the client reaches the broker again, while a record whose bound is still
// ahead goes through.
func TestSessionBoundRecordsAreNotSentPastTheBound(t *testing.T) {
	t.Parallel()
	b, err := broker.Start(broker.Config{Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	n := newNetwork(nil, nil)
	// As an at-least-once thread's client is configured (see connect).
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.Dialer(n.dial), kgo.DefaultProduceTopic("out"),
		kgo.AllowAutoTopicCreation(), kgo.AllowIdempotentProduceCancellation(), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm")}).FirstErr())

	n.partition(true)
	failed := make(chan error, 1)
	bound := &sessionBound{until: time.Now().Add(300 * time.Millisecond)}
	cl.Produce(ctx, &kgo.Record{Value: []byte("stale"), Context: bound}, func(_ *kgo.Record, err error) { failed <- err })
	waitFor(t, 10*time.Second, "the bound passes while the client is cut off", func() bool { return bound.Err() != nil })
	require.ErrorIs(t, bound.Err(), context.DeadlineExceeded)
	n.partition(false)
	select {
	case err := <-failed:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("the record was neither sent nor failed")
	}
	ahead := &sessionBound{until: time.Now().Add(time.Hour)}
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("fresh"), Context: ahead}).FirstErr())

	// The topic holds the records sent before the cut and after, not the
	// one whose bound passed.
	reader, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	var got []string
	for len(got) < 2 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := reader.PollFetches(pctx)
		timedOut := pctx.Err()
		cancel()
		require.NoError(t, timedOut, "reading the topic; got %v", got)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Equal(t, []string{"warm", "fresh"}, got)
}

// When an at-least-once thread's session bound passes, its connections
// are reset, so that the broker never receives what they had not yet
// delivered: the peer reads a reset, not an orderly end. It happens for
// every contact the session outlives, also with the same client kept
// through an earlier cut, and never to the App's other connections.
func TestConnectionsResetAtEveryContactTheSessionOutlives(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	n := newNetwork(nil, nil)
	th := &thread{app: &App{net: n}, log: slog.New(slog.DiscardHandler), conns: &connGroup{name: "thread 0"}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()))
	require.NoError(t, err)
	defer cl.Close()
	dial := func(f func(context.Context, string, string) (net.Conn, error)) (net.Conn, net.Conn) {
		c, err := f(context.Background(), "tcp", ln.Addr().String())
		require.NoError(t, err)
		select {
		case peer := <-accepted:
			return c, peer
		case <-time.After(5 * time.Second):
			t.Fatal("no connection accepted")
			return nil, nil
		}
	}
	// peerSeesReset reports whether the peer's read ends in a reset.
	peerSeesReset := func(peer net.Conn) bool {
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := peer.Read(make([]byte, 1))
		return errors.Is(err, syscall.ECONNRESET)
	}
	tracked := func(c net.Conn) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, ok := n.conns[c]
		return ok
	}

	other, otherPeer := dial(n.dial)
	defer otherPeer.Close()
	first, firstPeer := dial(n.dialerFor(th.conns))
	contact := time.Now().Add(-time.Minute)
	th.abortIfSessionGone(cl, contact)
	require.False(t, tracked(first))
	require.True(t, peerSeesReset(firstPeer), "a reset drops what the connection had not delivered")
	require.True(t, tracked(other), "the App's other connections are left alone")

	second, secondPeer := dial(n.dialerFor(th.conns))
	th.abortIfSessionGone(cl, contact)
	require.True(t, tracked(second), "the same lost contact resets once")

	th.abortIfSessionGone(cl, contact.Add(time.Second))
	require.False(t, tracked(second), "a later contact the session outlived resets again, with the same client")
	require.True(t, peerSeesReset(secondPeer))
}

// A thread awaiting its share of a rebalance vouches for the standbys it
// follows only up to when the group is known not to have settled without
// telling it: the first JoinGroup or SyncGroup it wrote since its last
// assignment, or a later heartbeat answered as rebalancing. Past the
// contact window from there, a standby is refused as on the move: the
// assignor may have placed it elsewhere in a balance whose answer the
// network lost.
func TestStandbyAwaitingItsAssignmentStepsAside(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c groupContact
	_, awaiting := c.assignmentVouched()
	require.False(t, awaiting)
	c.joinWritten(at(0))
	v, awaiting := c.assignmentVouched()
	require.True(t, awaiting)
	require.Equal(t, at(0), v)
	c.confirmRebalancing(at(300), 0)
	c.syncWritten(at(400))
	v, _ = c.assignmentVouched()
	require.Equal(t, at(300), v, "a rebalancing answer, not a later request, moves it")
	c.synced()
	_, awaiting = c.assignmentVouched()
	require.False(t, awaiting, "an assignment ends the wait")
	c.joinWritten(at(1000))
	v, _ = c.assignmentVouched()
	require.Equal(t, at(1000), v, "a new wait starts from its own first request")

	a := &App{cfg: Config{SessionTimeout: 3 * time.Second}}
	now := at(5000)
	standby := ReplicaInfo{Store: "counts", Partition: 2, State: task.Standby, Contact: now.Add(-500 * time.Millisecond)}
	require.NoError(t, a.expiredReplica(standby, now), "not awaiting an assignment")
	standby.AssignmentVouched = now.Add(-contactWindow(a.cfg) / 2)
	require.NoError(t, a.expiredReplica(standby, now), "awaiting, within the contact window")
	standby.AssignmentVouched = now.Add(-contactWindow(a.cfg) - time.Millisecond)
	require.ErrorIs(t, a.expiredReplica(standby, now), iq.ErrRebalancing, "awaiting past the contact window")
}
