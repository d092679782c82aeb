// Package chaos is a fault harness for Eddy in the manner of Jepsen: it
// runs the demo's word count as separate processes (a broker and N
// instances, each instance's broker traffic through a proxy of its own),
// feeds it text whose counts it knows exactly, queries it all along, and
// applies a schedule of faults drawn from a seed: kill -9, SIGTERM,
// SIGSTOP/SIGCONT, network cuts, resets and delays, broker kill and
// restart, damaged store files, a full disk. Then it heals everything and
// checks the outcome: see Result for what is checked.
//
// A seed gives the same schedule (fault kinds, targets and times from the
// start), the same text and the same queries; what the processes do in
// between is up to them.
package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options configure one run.
type Options struct {
	Seed       uint64
	Duration   time.Duration // of the fault schedule
	Guarantee  string        // "exactly-once" or "at-least-once"
	Instances  int
	Partitions int
	Kinds      []Kind
	// Bin is the demo binary (BuildDemo); Dir a fresh directory for the
	// broker's data and the instances' state.
	Bin, Dir string
	// SessionTimeout is the instances' group session timeout.
	SessionTimeout time.Duration
	// QueryRate is how many queries a second the query loop asks.
	QueryRate int
	// SettleTimeout bounds the wait, once everything is healed, for the
	// application to process and commit all its input.
	SettleTimeout time.Duration
	// Log, when set, gets the run's progress.
	Log io.Writer
}

func (o *Options) defaults() {
	if o.Instances == 0 {
		o.Instances = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 6
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 3 * time.Second
	}
	if o.QueryRate == 0 {
		o.QueryRate = 20
	}
	if o.SettleTimeout == 0 {
		o.SettleTimeout = 3 * time.Minute
	}
	if len(o.Kinds) == 0 {
		o.Kinds = slices.Clone(AllKinds)
	}
}

// window is what one fault may make the application redo under
// at-least-once: on every partition of the input and repartition topics,
// the records from the group's committed offset when the fault began to
// the end offset a while after it ended.
type window struct{ from, to map[string]map[int32]int64 }

// run is the state of one run.
type run struct {
	o       Options
	c       *cluster
	start   time.Time
	adm     *kadm.Client
	prod    *producer
	watch   *committedWatcher
	group   *groupWatcher
	queries *queryLoop

	mu       sync.Mutex
	injected map[Kind]int
	windows  []window
	damaged  map[string]int // store dir → times damaged
	refused  []string       // instances that refused damaged state
	notes    []string       // faults that could not be applied as drawn
	findings []string
	rereads  int // checkReread runs that compared
	// bound is the at-least-once redo bound per word, once known.
	bound   map[string]int64
	commits []commitObs
	redo    sync.WaitGroup // redoAfter's pending windows
	// counted is, under at-least-once, each repartition partition's
	// records per word: the count below any offset.
	counted map[int32]map[string]*offsetCounts
	// delays are the net-delay faults applied, for roleSlackAt.
	delays []*delayWindow
}

// delayWindow is a net-delay fault on the instance whose query server is
// host, from when it began to when it ended (zero while in force).
type delayWindow struct {
	host     string
	from, to time.Time
	delay    time.Duration
}

func (r *run) delayed(host string, d time.Duration) *delayWindow {
	w := &delayWindow{host: host, from: time.Now(), delay: d}
	r.mu.Lock()
	r.delays = append(r.delays, w)
	r.mu.Unlock()
	return w
}

func (r *run) undelayed(w *delayWindow) {
	r.mu.Lock()
	w.to = time.Now()
	r.mu.Unlock()
}

// roleSlackAt is how long the member serving from host may keep a role
// after the coordinator stored a balance that takes it away, for a query
// asked at sent: roleSlack, plus four times the largest delay its traffic
// had in the moments before. It hears of the balance through four
// crossings of its delayed proxy (the heartbeat that tells it to rejoin,
// its JoinGroup's answer, its SyncGroup and that one's answer), and can
// stop claiming the role no sooner.
func (r *run) roleSlackAt(host string, sent time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var most time.Duration
	for _, w := range r.delays {
		if w.host == host && w.from.Before(sent) && (w.to.IsZero() || w.to.After(sent.Add(-roleSlack-4*w.delay))) {
			most = max(most, w.delay)
		}
	}
	return roleSlack + 4*most
}

func (r *run) logf(format string, args ...any) { r.c.logf(format, args...) }

func (r *run) finding(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.findings = append(r.findings, msg)
	r.mu.Unlock()
	r.logf("FINDING: %s", msg)
}

// Run runs one schedule and checks it. The error is for a harness that
// could not run (a process that would not start, a broker that never
// answered); what the checks find is in the Result.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	res := &Result{Seed: o.Seed, Guarantee: o.Guarantee, Duration: o.Duration}
	// Everything the run starts ends with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	diskFull := slices.Contains(o.Kinds, DiskFull)
	if diskFull && os.Geteuid() != 0 {
		diskFull = false
		res.Notes = append(res.Notes, "disk-full faults skipped: mounting a tmpfs needs root")
	}
	c, err := newCluster(ctx, o, diskFull)
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return res, err
	}
	target := -1
	if diskFull {
		if c.insts[0].tmpfs {
			target = 0
		} else {
			res.Notes = append(res.Notes, "disk-full faults skipped: mounting a tmpfs failed")
		}
	}
	res.Schedule = Generate(o.Seed, o.Duration, o.Instances, o.Kinds, target)
	r := &run{o: o, c: c, injected: make(map[Kind]int), damaged: make(map[string]int)}
	defer r.redo.Wait()
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	r.adm = kadm.NewClient(cl)
	if r.prod, err = newProducer(o.Seed, c.addr); err != nil {
		return res, err
	}
	defer r.prod.cl.Close()
	if r.watch, err = newCommittedWatcher(c.addr); err != nil {
		return res, err
	}
	defer r.watch.cl.Close()
	if r.group, err = newGroupWatcher(c.addr); err != nil {
		return res, err
	}
	defer r.group.cl.Close()

	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var bgWG sync.WaitGroup
	bgWG.Go(func() { r.watch.run(bg) })
	bgWG.Go(func() { r.group.run(bg, 250*time.Millisecond) })
	bgWG.Go(func() { r.watchCommits(bg, 250*time.Millisecond) })
	defer bgWG.Wait()

	if err := r.waitGroup(ctx, 90*time.Second); err != nil {
		return res, err
	}
	r.logf("seed %d, %s, %d instances; schedule:\n%s", o.Seed, o.Guarantee, o.Instances, res.Schedule)

	r.start = time.Now()
	prodCtx, stopProd := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	prodWG.Go(func() { r.prod.run(prodCtx, 100*time.Millisecond, 5) })
	defer func() { stopProd(); prodWG.Wait() }()
	r.queries = newQueryLoop(o.Seed, c, r.prod.vocab, o.QueryRate)
	qCtx, stopQueries := context.WithCancel(ctx)
	var qWG sync.WaitGroup
	qWG.Go(func() { r.queries.run(qCtx) })
	defer func() { stopQueries(); qWG.Wait() }()

	watches, err := r.startWatches(ctx)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, lw := range watches {
			lw.close()
		}
	}()

	rereadCtx, stopReread := context.WithCancel(ctx)
	var rereadWG sync.WaitGroup
	rereadWG.Go(func() { r.rereadEvery(rereadCtx, 10*time.Second) })
	r.runSchedule(ctx, res.Schedule)
	stopReread()
	rereadWG.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	faultsEnd := time.Now()
	r.heal(ctx)
	stopProd()
	prodWG.Wait()
	r.logf("schedule over after %s; healed; text stopped", time.Since(r.start).Round(time.Millisecond))
	r.settleAndCheck(ctx, res)
	r.checkWatches(ctx, res, watches)
	stopQueries()
	qWG.Wait()
	stopBG()
	bgWG.Wait()
	r.checkAnswers(res, faultsEnd)
	r.checkWipes(res)

	c.mu.Lock()
	res.UnaskedExits = c.exits
	res.StartFailures = c.startFailures
	r.findings = append(r.findings, c.findings...)
	c.mu.Unlock()
	r.mu.Lock()
	res.Faults = r.injected
	res.Notes = append(res.Notes, r.notes...)
	res.Refused = r.refused
	res.Findings = append(res.Findings, r.findings...)
	r.mu.Unlock()
	return res, nil
}

// waitGroup waits until the group is settled with every instance and
// every partition of the counts store has an active.
func (r *run) waitGroup(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		o := r.group.describe(ctx)
		hosts := make(map[string]bool)
		for _, h := range o.active {
			hosts[h] = true
		}
		if o.settled && len(o.active) == r.o.Partitions && len(hosts) == len(r.c.insts) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not settle within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runSchedule applies each fault at its time from the start. A fault on
// a target still busy (a restart taking long) waits for it.
func (r *run) runSchedule(ctx context.Context, s Schedule) {
	var wg sync.WaitGroup
	for _, f := range s {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(r.start.Add(f.At))):
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() { r.apply(ctx, f) })
	}
	wg.Wait()
	// The schedule's length is its duration, whatever the last fault.
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(r.start.Add(r.o.Duration))):
	}
}

// offsets returns the group's committed offsets (or the end offsets) of
// the input and repartition topics, retrying for a while when the broker
// is down; nil if it never answered.
func (r *run) offsets(ctx context.Context, committed bool) map[string]map[int32]int64 {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out := r.offsetsOnce(ctx, committed); out != nil || ctx.Err() != nil || time.Now().After(deadline) {
			return out
		}
		r.sleep(ctx, 250*time.Millisecond)
	}
}

func (r *run) offsetsOnce(ctx context.Context, committed bool) map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if committed {
		resp, err := r.adm.FetchOffsetsForTopics(actx, app, inputTopic, repartition)
		if err != nil || resp.Error() != nil {
			return nil
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if out[o.Topic] == nil {
				out[o.Topic] = make(map[int32]int64)
			}
			out[o.Topic][o.Partition] = max(0, o.At)
		})
		return out
	}
	resp, err := r.adm.ListEndOffsets(actx, inputTopic, repartition)
	if err != nil || resp.Error() != nil {
		return nil
	}
	resp.Each(func(l kadm.ListedOffset) {
		if out[l.Topic] == nil {
			out[l.Topic] = make(map[int32]int64)
		}
		out[l.Topic][l.Partition] = l.Offset
	})
	return out
}

// commitObs is the group's committed offsets on the repartition topic as
// seen at one time.
type commitObs struct {
	at      time.Time
	offsets map[int32]int64
}

// watchCommits records the group's committed offsets on the repartition
// topic every period: the work the application had committed by then.
func (r *run) watchCommits(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if o := r.offsetsOnce(ctx, true); o != nil {
			r.mu.Lock()
			r.commits = append(r.commits, commitObs{at: time.Now(), offsets: o[repartition]})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// committedAt returns the group's committed offset of the repartition
// topic's partition as last seen at or before t.
func (r *run) committedAt(partition int32, t time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.commits, t, func(o commitObs, t time.Time) int {
		if o.at.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0
	}
	return r.commits[i-1].offsets[partition]
}

// redoAfter records a fault's redo window: from the committed offsets
// read when it began to the end offsets a while after it ended, once
// whoever took over (or the zombie coming back) has had time to write
// what it will write.
func (r *run) redoAfter(ctx context.Context, from map[string]map[int32]int64) {
	r.redo.Go(func() {
		select {
		case <-ctx.Done():
		case <-time.After(2*r.o.SessionTimeout + 3*time.Second):
		}
		to := r.offsets(ctx, false)
		r.mu.Lock()
		r.windows = append(r.windows, window{from: from, to: to})
		r.mu.Unlock()
	})
}

func (r *run) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// apply injects one fault and undoes it after its hold.
func (r *run) apply(ctx context.Context, f Fault) {
	if f.Kind == BrokerKill {
		r.c.brMu.Lock()
		defer r.c.brMu.Unlock()
		from := r.offsets(ctx, true)
		r.c.broker.kill()
		r.count(f, "broker killed")
		r.sleep(ctx, f.Hold)
		r.c.startBroker()
		r.redoAfter(ctx, from)
		return
	}
	in := r.c.insts[f.Target]
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.running() && f.Kind != DiskFull {
		r.note(f, "target not running")
		return
	}
	from := r.offsets(ctx, true)
	switch f.Kind {
	case Kill9:
		in.kill()
		r.count(f, "killed")
		r.sleep(ctx, f.Hold)
		r.c.startInstance(ctx, in)
	case Term:
		if !in.terminate(30 * time.Second) {
			r.finding("%s: SIGTERM at %s did not stop it within 30s", in.name, f.At)
		}
		r.count(f, "terminated")
		r.sleep(ctx, f.Hold)
		r.c.startInstance(ctx, in)
	case Pause:
		in.signal(syscall.SIGSTOP, false)
		r.count(f, "stopped")
		r.sleep(ctx, f.Hold)
		in.signal(syscall.SIGCONT, false)
	case Cut:
		in.proxy.setCut(true)
		r.count(f, "cut off")
		r.sleep(ctx, f.Hold)
		in.proxy.setCut(false)
	case Reset:
		in.proxy.reset()
		r.count(f, "connections reset")
	case Delay:
		in.proxy.setDelay(f.Delay)
		w := r.delayed(in.http, f.Delay)
		r.count(f, "delayed")
		r.sleep(ctx, f.Hold)
		in.proxy.setDelay(0)
		r.undelayed(w)
	case Corrupt:
		in.kill()
		dir, what, err := in.damage(f.Damage, f.Pick)
		switch {
		case err != nil:
			r.finding("%s: damaging a store (%s): %v", in.name, f.Damage, err)
		case dir == "":
			r.note(f, "no store has the files to damage; killed and restarted only")
		default:
			r.mu.Lock()
			r.damaged[dir]++
			r.mu.Unlock()
			r.count(f, what)
		}
		r.sleep(ctx, f.Hold)
		r.restartDamaged(ctx, in, dir)
	case DiskFull:
		name, err := fill(in.stateDir)
		if err != nil {
			r.note(f, "filling the disk: "+err.Error())
		} else {
			r.count(f, "disk filled")
		}
		r.sleep(ctx, f.Hold)
		if name != "" {
			os.Remove(name)
		}
	}
	r.redoAfter(ctx, from)
}

// restartDamaged starts an instance whose store at dir was damaged. An
// instance may refuse damaged state with an error naming it rather than
// rebuild it: that is counted, the store deleted as an operator would,
// and the instance started again.
func (r *run) restartDamaged(ctx context.Context, in *instance, dir string) {
	if _, err := in.start(ctx, instanceReady); err == nil {
		return
	}
	in.kill()
	r.mu.Lock()
	r.refused = append(r.refused, fmt.Sprintf("%s refused to start on damaged %s", in.name, dir))
	r.mu.Unlock()
	r.logf("%s refused to start on damaged %s; deleting it", in.name, dir)
	if dir != "" {
		os.RemoveAll(dir)
	}
	if err := r.c.startInstance(ctx, in); err != nil {
		r.finding("%s does not start after its damaged store %s was deleted: %v", in.name, dir, err)
	}
}

func (r *run) count(f Fault, what string) {
	r.mu.Lock()
	r.injected[f.Kind]++
	r.mu.Unlock()
	r.logf("%6.2fs %s: %s", time.Since(r.start).Seconds(), f, what)
}

func (r *run) note(f Fault, why string) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf("%s: %s", f, why))
	r.mu.Unlock()
	r.logf("%6.2fs %s: not applied: %s", time.Since(r.start).Seconds(), f, why)
}

// heal undoes whatever is still in force and makes sure every process
// runs.
func (r *run) heal(ctx context.Context) {
	r.c.brMu.Lock()
	if !r.c.broker.running() {
		r.c.startBroker()
	}
	r.c.brMu.Unlock()
	for _, in := range r.c.insts {
		in.mu.Lock()
		in.proxy.setCut(false)
		in.proxy.setDelay(0)
		in.signal(syscall.SIGCONT, false)
		os.Remove(in.stateDir + "/chaos-filler")
		if !in.running() {
			r.c.startInstance(ctx, in)
		}
		in.mu.Unlock()
	}
}

// pick returns a random element of xs.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }
