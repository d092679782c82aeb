package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/task"
)

// The scripted scenario of the no-argument demo, driven by one loop that
// polls every instance's replicas every pollInterval:
//
//  1. settling: wait until every partition of the "counts" store has a
//     running active and its standbys are caught up; then start querying a
//     sample of words through the routing client;
//  2. kill the instance running the most actives, hard (network cut, no
//     commit, no leave-group), and watch the queries keep being answered
//     (by standbys first), the standbys being promoted and restoring the
//     tail of their changelogs;
//  3. restart it with its old state directory and watch it catch up from
//     where its stores were rather than from scratch;
//  4. feed until the end, stop, and check every count against the words
//     the broker acknowledged.
//
// The steps' minimum lengths are fractions of --duration; each also waits
// for what it shows (up to settleDeadline), so a slow machine stretches
// the run rather than cutting a step short.

// Fractions of --duration.
const (
	settleShare  = 0.20 // start → kill, at least
	downShare    = 0.30 // kill → restart, at least
	recoverShare = 0.30 // restart → end of the round, at least
	gapShare     = 0.20 // with --forever: end of a round → the next kill
)

// minutesChecked is how far back from the end of the feed the check
// compares the counts per minute; well within minuteStoreGrace, so that
// counts-per-minute still keeps them.
const minutesChecked = 5 * time.Minute

type phase int

const (
	phaseSettling   phase = iota // waiting for the cluster to settle
	phaseRunning                 // settled; running normally until the kill
	phaseDown                    // an instance is killed; its tasks move
	phaseRestarting              // the killed instance is starting again
	phaseRecovering              // it is back and catching up
	phaseSteady                  // scenario done; feeding until the end
	phaseChecking                // feed stopped; comparing the counts
)

// round is one kill and restart.
type round struct {
	victim *slot
	killAt time.Time
	// parts are the partitions the victim ran as active; takeovers says
	// who took each over and when.
	parts     []int32
	takeovers map[int32]*takeover
	// killBase is every survivor's restoreBase at the kill.
	killBase map[*slot]map[int32]int64
	// preKill is the victim's replica positions at the last poll before
	// the kill.
	preKill    map[int32]int64
	answered   int64 // queries answered and refused before the kill
	refused    int64
	failoverAt time.Time

	restartAt  time.Time
	backAt     time.Time // when the restart returned
	endAt      time.Time // when the round ended, the hand-back included
	initialPos map[int32]int64
	caughtUpAt time.Time
	caughtRead int64 // changelog records it read to catch up
	caughtSize int64 // changelog records its partitions hold
	// keptRead and keptSize are the same for the partitions it held
	// when it was killed.
	keptRead, keptSize int64
	// warmups are the partitions it held as warmups when it caught up;
	// each is announced when a probing rebalance hands it the active.
	warmups map[int32]bool
}

// keptClause describes the catching up of the partitions the restarted
// instance held when it was killed, when it holds others too.
func (r *round) keptClause() string {
	switch r.keptSize {
	case 0:
		return ""
	case r.caughtSize:
		return ": what was written while it was down"
	}
	return fmt.Sprintf("; for the partitions it held when it was killed, %s of %s: what was written while it was down", thousands(r.keptRead), thousands(r.keptSize))
}

// takeover is one partition of a killed instance moving to a survivor.
type takeover struct {
	standby     *slot // who held its standby at the kill, if anyone
	slot        *slot
	restoringAt time.Time
	runningAt   time.Time
	tail        int64 // records the new active restored
	end         int64 // the changelog's end then
}

// scenario is the demo's script and its state.
type scenario struct {
	d          *demo
	phase      phase
	phaseStart time.Time
	partitions int32
	sample     []string
	rounds     []*round
	settledAt  time.Time

	restarted      chan restartResult
	restartPending bool
	// interrupted is set when the run was interrupted before it ended.
	interrupted bool
	checkDone   chan []string
	checkExact  atomic.Int64 // words whose count matched, set by the check
	checkTotal  int
	checkFrom   int64 // the first minute (window start, Unix ms) checked
	checkEnd    time.Time
	fedLines    int64
	fedWords    int64
	feedStopped time.Time

	// final is what the check found in word-counts-per-minute, set
	// before it reports on checkDone.
	final finalCheck

	// printedSeq is the sequence number of the last answer printed as a
	// plain line, and when.
	printedSeq int64
	printedAt  time.Time
	lastFed    int64
	lastFedAt  time.Time
	fedRate    float64
}

type restartResult struct {
	sl  *slot
	in  *instance
	err error
}

// run drives the scenario until the counts are checked, an instance fails,
// or a wait times out.
func (d *demo) run(ctx context.Context) error {
	sc := &scenario{d: d, phaseStart: d.start, restarted: make(chan restartResult, 1), lastFedAt: d.start}
	if d.ansi {
		io.WriteString(d.s.out, ansiHide+ansiClear)
		defer io.WriteString(d.s.out, ansiShow)
	}
	if !d.cfg.chaos {
		d.event("chaos is off (--no-chaos): the cluster just counts and answers queries")
	} else if d.cfg.instances < 2 {
		d.event("chaos needs at least two instances: with one there is nobody to fail over to, so nothing is killed")
	}
	d.event("waiting for the cluster to settle: every partition of the store \"counts\" with a running active" + d.standbyClause())

	// A restart still under way when the run ends is waited for, so that
	// closing the demo closes its instance too.
	defer func() {
		if sc.restartPending {
			if r := <-sc.restarted; r.err == nil {
				d.up(r.sl, r.in)
			}
		}
	}()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	nextFrame := time.Now()
	shown := 0
	done := ctx.Done()
	checkCtx := ctx
	for {
		var err error
		select {
		case <-done:
			done = nil
			sc.interrupted = true
			d.event("interrupted: stopping the feed and checking the counts (Ctrl-C again quits at once)")
			var cancel context.CancelFunc
			checkCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), settleDeadline)
			defer cancel()
			if sc.phase != phaseChecking {
				sc.startCheck(checkCtx)
			}
		case r := <-sc.restarted:
			err = sc.back(r)
		case diffs := <-sc.checkDone:
			return sc.finish(diffs)
		case <-tick.C:
		}
		now := time.Now()
		if err == nil {
			err = d.poll(ctx, sc)
		}
		if err == nil && sc.phase != phaseChecking {
			err = sc.step(checkCtx, now)
		}
		if err != nil {
			d.stopFeed()
			d.render(sc, now)
			d.flushEvents()
			sc.summary(now, nil, err)
			return err
		}
		d.flushEvents()
		sc.printAnswers(now)
		// The full-screen view shows an announcement at once; the
		// plain output has printed it already.
		if n := d.eventCount(); !now.Before(nextFrame) || d.ansi && n != shown {
			shown = n
			if !now.Before(nextFrame) {
				nextFrame = nextFrame.Add(refreshInterval)
				if nextFrame.Before(now) {
					nextFrame = now.Add(refreshInterval)
				}
			}
			d.render(sc, now)
		}
	}
}

// records renders a count of records.
func records(n int64) string {
	if n == 1 {
		return "1 record"
	}
	return thousands(n) + " records"
}

// plural renders a count of things.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// shape describes the cluster: instances and standbys.
func (d *demo) shape() string {
	return plural(d.cfg.instances, "instance", "instances") + ", " + plural(d.cfg.standbys, "standby", "standbys") + " per task"
}

func (d *demo) standbyClause() string {
	switch n := d.wantStandbys(d.cfg.instances); n {
	case 0:
		return ""
	case 1:
		return " and a caught-up standby"
	default:
		return fmt.Sprintf(" and %d caught-up standbys", n)
	}
}

// wantStandbys is how many standbys each partition can have with up
// instances running.
func (d *demo) wantStandbys(up int) int { return max(0, min(d.cfg.standbys, up-1)) }

// poll reads every running instance's replicas, notices instances that
// stopped by themselves, and learns the store's partition count.
func (d *demo) poll(ctx context.Context, sc *scenario) error {
	for _, sl := range d.slots {
		if sl.in == nil {
			continue
		}
		select {
		case <-sl.in.app.Done():
			return fmt.Errorf("instance %s stopped unexpectedly: %v", sl.name, sl.in.app.Err())
		default:
		}
		sl.replicas = countsReplicas(sl.in.app)
		for _, ri := range sl.replicas {
			if ri.State == task.Running {
				sl.restoreBase[ri.Partition] = ri.Restored
			}
		}
	}
	if sc.partitions == 0 {
		mctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := d.client.Metadata(mctx)
		cancel()
		if err == nil && m.Partitions[countsStore] > 0 {
			sc.partitions = m.Partitions[countsStore]
		}
	}
	return nil
}

// upSlots returns the instances running now.
func (d *demo) upSlots() []*slot {
	var out []*slot
	for _, sl := range d.slots {
		if sl.in != nil {
			out = append(out, sl)
		}
	}
	return out
}

// settled reports whether every partition has one running active and its
// standbys caught up, and every running instance is ready; otherwise it
// says what is missing.
func (sc *scenario) settled() (bool, string) {
	if sc.partitions == 0 {
		return false, "no routing table yet"
	}
	ups := sc.d.upSlots()
	for _, sl := range ups {
		if !sl.in.app.Ready() {
			return false, sl.name + " is not ready (joining, or restoring)"
		}
	}
	actives := make(map[int32]int)
	standbys := make(map[int32]int)
	for _, sl := range ups {
		for _, ri := range sl.replicas {
			switch {
			case ri.State == task.Running:
				actives[ri.Partition]++
			case ri.State == task.Standby && ri.Lag >= 0 && ri.Lag <= caughtUpLag:
				standbys[ri.Partition]++
			}
		}
	}
	want := sc.d.wantStandbys(len(ups))
	for p := range sc.partitions {
		if actives[p] != 1 {
			return false, fmt.Sprintf("partition %d has %d running actives", p, actives[p])
		}
		if standbys[p] < want {
			return false, fmt.Sprintf("partition %d has %d caught-up standbys of %d", p, standbys[p], want)
		}
	}
	return true, ""
}

func (sc *scenario) enter(p phase, now time.Time) {
	sc.phase, sc.phaseStart = p, now
}

// step advances the scenario.
func (sc *scenario) step(ctx context.Context, now time.Time) error {
	d := sc.d
	D := d.cfg.duration
	chaos := d.cfg.chaos && d.cfg.instances >= 2
	switch sc.phase {
	case phaseSettling:
		ok, why := sc.settled()
		if !ok {
			if now.Sub(sc.phaseStart) > settleDeadline {
				return fmt.Errorf("the cluster did not settle within %s: %s", settleDeadline, why)
			}
			return nil
		}
		sc.settledAt = now
		sc.sample = querySample(newCorpus(d.cfg.seed).vocab, sc.partitions)
		d.event(fmt.Sprintf("cluster settled after %.1fs: %d partitions, each with a running active%s. Querying %d sample words (every partition) through the routing client with staleness lag:%d",
			now.Sub(d.start).Seconds(), sc.partitions, d.standbyClause(), len(sc.sample), demoLagBound))
		d.startQueries(ctx, sc.sample)
		if chaos {
			sc.enter(phaseRunning, now)
		} else {
			sc.enter(phaseSteady, now)
		}
	case phaseRunning:
		sc.watchHandBack()
		first := len(sc.rounds) == 0
		if first && now.Sub(d.start) < scale(D, settleShare) || !first && now.Sub(sc.phaseStart) < scale(D, gapShare) {
			return nil
		}
		if ok, _ := sc.settled(); !ok {
			if now.Sub(sc.phaseStart) > settleDeadline {
				_, why := sc.settled()
				return fmt.Errorf("the cluster did not settle again within %s: %s", settleDeadline, why)
			}
			return nil
		}
		sc.kill(now)
	case phaseDown:
		return sc.watchFailover(now)
	case phaseRestarting:
		if now.Sub(sc.phaseStart) > settleDeadline {
			return fmt.Errorf("restarting %s took more than %s", sc.current().victim.name, settleDeadline)
		}
	case phaseRecovering:
		return sc.watchRecovery(now)
	case phaseSteady:
		sc.watchHandBack()
		if !d.cfg.forever && now.Sub(d.start) >= D {
			sc.startCheck(ctx)
		}
	}
	return nil
}

func scale(d time.Duration, share float64) time.Duration {
	return time.Duration(float64(d) * share)
}

func (sc *scenario) current() *round { return sc.rounds[len(sc.rounds)-1] }

// partitionList renders partitions as "0, 3 and 5".
func partitionList(ps []int32) string {
	var s []string
	for _, p := range ps {
		s = append(s, strconv.Itoa(int(p)))
	}
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// kill kills the instance running the most actives (rotating among equals
// from round to round).
func (sc *scenario) kill(now time.Time) {
	d := sc.d
	ups := d.upSlots()
	actives := func(sl *slot) []int32 {
		var ps []int32
		for _, ri := range sl.replicas {
			if ri.State == task.Running || ri.State == task.Restoring {
				ps = append(ps, ri.Partition)
			}
		}
		return ps
	}
	n := len(sc.rounds)
	k := n % len(ups)
	rotated := append(slices.Clone(ups[k:]), ups[:k]...)
	victim := slices.MaxFunc(rotated, func(a, b *slot) int {
		return len(actives(a)) - len(actives(b))
	})
	r := &round{victim: victim, parts: actives(victim), takeovers: make(map[int32]*takeover),
		killBase: make(map[*slot]map[int32]int64), preKill: make(map[int32]int64), initialPos: make(map[int32]int64)}
	var holders []string
	for _, p := range r.parts {
		tk := &takeover{}
		for _, sl := range ups {
			for _, ri := range sl.replicas {
				if sl != victim && ri.Partition == p && ri.State == task.Standby {
					tk.standby = sl
					holders = append(holders, fmt.Sprintf("%d on %s", p, sl.name))
				}
			}
		}
		r.takeovers[p] = tk
	}
	for _, sl := range ups {
		r.killBase[sl] = maps.Clone(sl.restoreBase)
	}
	for _, ri := range victim.replicas {
		r.preKill[ri.Partition] = ri.Position
	}
	t := d.queries.totals()
	r.answered, r.refused = t.answered, t.refused
	sb := "it has no standbys, so the new actives restore from their changelogs"
	if len(holders) > 0 {
		sb = "their standbys: " + strings.Join(holders, ", ")
	}
	d.event(fmt.Sprintf("killing %s hard (network cut: no commit, no leave-group). It runs partitions %s as active; %s. The group notices after its %s session timeout, and counting pauses until the broker aborts its open transaction (%s timeout); meanwhile the routing client keeps answering from other replicas",
		victim.name, partitionList(r.parts), sb, demoSessionTimeout, demoTransactionTimeout))
	r.killAt = time.Now()
	d.kill(victim)
	d.queries.watchFailover(victim.addr, r.parts, r.killAt)
	sc.rounds = append(sc.rounds, r)
	sc.enter(phaseDown, now)
}

// holderOf finds the running instance, other than the victim, holding
// partition p as an active (running or restoring).
func (sc *scenario) holderOf(p int32) (*slot, runtime.ReplicaInfo, bool) {
	for _, sl := range sc.d.upSlots() {
		for _, ri := range sl.replicas {
			if ri.Partition == p && (ri.State == task.Running || ri.State == task.Restoring) {
				return sl, ri, true
			}
		}
	}
	return nil, runtime.ReplicaInfo{}, false
}

// watchFailover announces each partition of the killed instance being
// taken over, and restarts the instance once all are running elsewhere and
// the step has lasted long enough.
func (sc *scenario) watchFailover(now time.Time) error {
	d, r := sc.d, sc.current()
	since := func(t time.Time) string { return fmt.Sprintf("%.1fs after the kill", t.Sub(r.killAt).Seconds()) }
	for _, p := range r.parts {
		tk := r.takeovers[p]
		sl, ri, ok := sc.holderOf(p)
		if !ok || !tk.runningAt.IsZero() {
			continue
		}
		from := "without a standby there: restoring from its changelog"
		if tk.standby == sl {
			from = "promoting its standby: restoring only the changelog's tail"
		}
		if ri.State == task.Restoring && tk.restoringAt.IsZero() {
			tk.slot, tk.restoringAt = sl, now
			togo := "how far is not known yet"
			if ri.Lag >= 0 {
				togo = records(ri.Lag) + " to go"
			}
			d.event(fmt.Sprintf("partition %d: %s took it over %s, %s (%s)", p, sl.name, since(now), from, togo))
		}
		if ri.State == task.Running {
			tk.slot, tk.runningAt = sl, now
			tk.tail = ri.Restored - r.killBase[sl][p]
			tk.end = ri.Position
			how := "it had no standby there"
			if tk.standby == sl {
				how = "its standby was promoted"
			}
			d.event(fmt.Sprintf("partition %d: active again on %s %s; %s and restored %s, of %s in its changelog",
				p, sl.name, since(now), how, records(tk.tail), thousands(tk.end)))
		}
	}
	if r.failoverAt.IsZero() {
		done := true
		for _, p := range r.parts {
			done = done && !r.takeovers[p].runningAt.IsZero()
		}
		if done {
			r.failoverAt = now
			t := d.queries.totals()
			d.event(fmt.Sprintf("failover complete %s: every partition %s ran is active on a survivor. Since the kill, %s queries answered and %s refused",
				since(now), r.victim.name, thousands(t.answered-r.answered), thousands(t.refused-r.refused)))
		} else if now.Sub(r.killAt) > settleDeadline {
			var missing []int32
			for _, p := range r.parts {
				if r.takeovers[p].runningAt.IsZero() {
					missing = append(missing, p)
				}
			}
			return fmt.Errorf("failover did not complete within %s: partitions %s have no running active", settleDeadline, partitionList(missing))
		}
	}
	if !r.failoverAt.IsZero() && now.Sub(r.killAt) >= scale(d.cfg.duration, downShare) {
		sc.restart(now)
	}
	return nil
}

// watchHandBack announces the restarted instance's warmups becoming
// actives.
func (sc *scenario) watchHandBack() {
	if len(sc.rounds) == 0 {
		return
	}
	r := sc.current()
	if len(r.warmups) == 0 || r.victim.in == nil {
		return
	}
	var got []int32
	for _, ri := range r.victim.replicas {
		if r.warmups[ri.Partition] && ri.State == task.Running {
			got = append(got, ri.Partition)
			delete(r.warmups, ri.Partition)
		}
	}
	if len(got) > 0 {
		sc.d.event(fmt.Sprintf("%s's warmups of partitions %s caught up, and the group's probing rebalance gave it their actives back", r.victim.name, partitionList(got)))
	}
}

// restart starts the killed instance again with its state directory, in
// the background.
func (sc *scenario) restart(now time.Time) {
	d, r := sc.d, sc.current()
	sl := r.victim
	d.event(fmt.Sprintf("restarting %s with its old state directory %s", sl.name, sl.dir))
	sl.state = stateStarting
	r.restartAt = now
	sc.enter(phaseRestarting, now)
	sc.restartPending = true
	go func() {
		in, err := d.startSlot(context.Background(), sl)
		sc.restarted <- restartResult{sl: sl, in: in, err: err}
	}()
}

// back records the restarted instance.
func (sc *scenario) back(res restartResult) error {
	sc.restartPending = false
	if res.err != nil {
		return fmt.Errorf("restart %s: %w", res.sl.name, res.err)
	}
	d, r := sc.d, sc.current()
	d.up(res.sl, res.in)
	r.backAt = time.Now()
	d.event(fmt.Sprintf("%s is back on %s with its old process ID %s, rejoining the group", res.sl.name, res.in.addr, res.in.app.ProcessID()))
	if sc.phase == phaseRestarting {
		sc.enter(phaseRecovering, r.backAt)
	}
	return nil
}

// watchRecovery waits for the restarted instance to catch up, then ends
// the round.
func (sc *scenario) watchRecovery(now time.Time) error {
	d, r := sc.d, sc.current()
	sl := r.victim
	for _, ri := range sl.replicas {
		if _, ok := r.initialPos[ri.Partition]; !ok {
			pos := ri.Position
			if pre, ok := r.preKill[ri.Partition]; ok {
				pos = min(pos, pre)
			}
			r.initialPos[ri.Partition] = pos
		}
	}
	if r.caughtUpAt.IsZero() {
		ok := len(sl.replicas) > 0 && sl.in.app.Ready()
		for _, ri := range sl.replicas {
			ok = ok && ri.Lag >= 0 && ri.Lag <= caughtUpLag &&
				(ri.State == task.Running || ri.State == task.Standby || ri.State == task.Warmup)
		}
		if settled, _ := sc.settled(); !ok || !settled {
			if now.Sub(r.backAt) > settleDeadline {
				return fmt.Errorf("%s did not catch up within %s of restarting", sl.name, settleDeadline)
			}
			return nil
		}
		r.caughtUpAt = now
		var holds []string
		var keptRead, keptSize int64
		for _, ri := range sl.replicas {
			read := max(ri.Position-r.initialPos[ri.Partition], 0)
			if ri.State == task.Running {
				// A restoration faster than a poll shows in Restored
				// rather than in positions.
				read = max(read, ri.Restored)
			}
			size := max(ri.End, ri.Position)
			r.caughtRead += read
			r.caughtSize += size
			if _, kept := r.preKill[ri.Partition]; kept {
				keptRead += read
				keptSize += size
			}
			holds = append(holds, fmt.Sprintf("%d %s", ri.Partition, roleName(ri.State)))
			if ri.State == task.Warmup {
				if r.warmups == nil {
					r.warmups = make(map[int32]bool)
				}
				r.warmups[ri.Partition] = true
			}
		}
		r.keptRead, r.keptSize = keptRead, keptSize
		d.event(fmt.Sprintf("%s caught up %.1fs after restarting, holding partitions %s. It reopened its stores at their old positions and read %s changelog records, not all %s its partitions' changelogs hold%s",
			sl.name, now.Sub(r.restartAt).Seconds(), strings.Join(holds, ", "), thousands(r.caughtRead), thousands(r.caughtSize), r.keptClause()))
	}
	sc.watchHandBack()
	if now.Sub(r.restartAt) < scale(d.cfg.duration, recoverShare) {
		return nil
	}
	r.endAt = now
	if d.cfg.forever {
		d.event(fmt.Sprintf("round %d complete; the next kill comes in %s", len(sc.rounds), scale(d.cfg.duration, gapShare).Round(time.Second)))
		sc.enter(phaseRunning, now)
		return nil
	}
	d.event("scenario complete; feeding text until the end of the run")
	sc.enter(phaseSteady, now)
	return nil
}

// startCheck stops the feed and checks the counts in the background.
func (sc *scenario) startCheck(ctx context.Context) {
	d := sc.d
	d.stopFeed()
	<-d.feedDone
	// The summary's query figures are the run's: the sample queries stop
	// with the feed.
	if d.stopQueries != nil {
		d.stopQueries()
		<-d.queriesDone
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := d.feed.cl.Flush(fctx)
	cancel()
	sc.feedStopped = time.Now()
	sc.fedLines, sc.fedWords = d.feed.fed()
	want := d.feed.reference()
	sc.checkTotal = len(want)
	// The minutes checked are the last few, well within the ones
	// counts-per-minute keeps (minuteStoreGrace), however long the run.
	sc.checkFrom = minuteOf(sc.feedStopped.Add(-minutesChecked).UnixMilli())
	wantMin := d.feed.minuteReference(sc.checkFrom)
	d.feed.mu.Lock()
	failed, firstErr := d.feed.failed, d.feed.firstErr
	d.feed.mu.Unlock()
	msg := fmt.Sprintf("stopped the feed: %s lines (%s words) acknowledged by the broker", thousands(sc.fedLines), thousands(sc.fedWords))
	if failed > 0 || err != nil {
		msg += fmt.Sprintf("; %d not acknowledged (%v), left out of the reference", failed, cmpErr(firstErr, err))
	}
	d.event(msg + fmt.Sprintf(". Checking all %s words' counts, and their counts per minute since %s, through the routing client (staleness active) until they equal the reference counts",
		thousands(int64(len(want))), time.UnixMilli(sc.checkFrom).UTC().Format("15:04")))
	sc.enter(phaseChecking, sc.feedStopped)
	sc.checkDone = make(chan []string, 1)
	stalls := sc.stalls(sc.feedStopped)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, settleDeadline)
		defer cancel()
		diffs := d.checkCounts(cctx, want, wantMin, sc.checkFrom, func(n int) { sc.checkExact.Store(int64(n)) })
		if len(diffs) == 0 {
			// The counts are exact, so every record is processed and
			// committed: the emit-final topic is complete.
			sc.final = d.checkFinalMinutes(cctx, sc.partitions, stalls)
		}
		sc.checkDone <- diffs
	}()
}

func cmpErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// finish ends the run: the last frame, the summary, and the verdict.
func (sc *scenario) finish(diffs []string) error {
	d := sc.d
	now := time.Now()
	sc.checkEnd = now
	switch {
	case len(diffs) > 0:
		d.event(fmt.Sprintf("%d of %d word counts differ from the reference count", len(diffs), sc.checkTotal))
	case len(sc.final.diffs) > 0:
		d.event(fmt.Sprintf("all %s word counts are exact, but %s differs from the closed minutes in %d ways", thousands(int64(sc.checkTotal)), minuteTopic, len(sc.final.diffs)))
	default:
		d.event(fmt.Sprintf("all %s word counts are exact, in total and per minute (%.1fs after the feed stopped); %s holds one final count for each of the %s word-minutes closed, %s of them exact",
			thousands(int64(sc.checkTotal)), now.Sub(sc.feedStopped).Seconds(), minuteTopic, thousands(int64(sc.final.closed)), thousands(int64(sc.final.exact))))
	}
	d.render(sc, now)
	d.flushEvents()
	var err error
	switch {
	case len(diffs) > 0:
		err = fmt.Errorf("%d of %d word counts differ from the words produced: %s", len(diffs), sc.checkTotal, strings.Join(diffs[:min(10, len(diffs))], "; "))
	case len(sc.final.diffs) > 0:
		err = fmt.Errorf("%s differs from the %d word-minutes closed in %d ways: %s", minuteTopic, sc.final.closed, len(sc.final.diffs), strings.Join(sc.final.diffs[:min(10, len(sc.final.diffs))], "; "))
	case sc.interrupted && !d.cfg.forever:
		err = errors.New("interrupted before the scenario completed (the counts so far are exact)")
	}
	sc.summary(now, diffs, err)
	return err
}

func (d *demo) eventCount() int {
	d.eventsMu.Lock()
	defer d.eventsMu.Unlock()
	return len(d.events)
}

// render draws the view once.
func (d *demo) render(sc *scenario, now time.Time) {
	f := sc.frame(now)
	if d.ansi {
		renderANSI(d.s.out, f, d.width)
		return
	}
	renderPlain(d.s.out, f)
}

// frame gathers what the view shows now, and the rates since the last
// frame.
func (sc *scenario) frame(now time.Time) *frame {
	d := sc.d
	lines, _ := d.feed.fed()
	if dt := now.Sub(sc.lastFedAt).Seconds(); dt > 0.2 {
		sc.fedRate = float64(lines-sc.lastFed) / dt
		sc.lastFed, sc.lastFedAt = lines, now
	}
	t := d.queries.totals()
	f := &frame{
		elapsed:  now.Sub(d.start),
		settings: fmt.Sprintf("%s · exactly-once · %d lines/s", strings.ReplaceAll(d.shape(), ", ", " · "), d.cfg.rate),
		step:     sc.describeStep(now),
		fed:      lines,
		fedRate:  sc.fedRate,
		answered: t.answered,
		refused:  t.refused,
		maxLag:   t.maxLag,
		bound:    fmt.Sprintf("lag:%d", demoLagBound),
		top:      d.queries.top(8),
	}
	f.recent = d.queries.lastAnswers(maxRecent)
	f.events = d.lastEvents(maxEvents)
	for _, sl := range d.slots {
		row := instanceRow{name: sl.name, addr: sl.addr, state: sl.state}
		if sl.in != nil {
			p := sl.processed()
			if dt := now.Sub(sl.lastAt).Seconds(); dt > 0.2 {
				sl.rate = float64(p-sl.lastProcessed) / dt
				sl.lastProcessed, sl.lastAt = p, now
			}
			row.recPerSec = sl.rate
			for _, ri := range sl.replicas {
				c := replicaCell{partition: ri.Partition, role: ri.State, lag: ri.Lag}
				if ri.State == task.Restoring {
					c.done = max(ri.Restored-sl.restoreBase[ri.Partition], 0)
					c.total = c.done + max(ri.Lag, 0)
				}
				row.replicas = append(row.replicas, c)
			}
		}
		f.instances = append(f.instances, row)
	}
	return f
}

// describeStep says what the scenario is doing.
func (sc *scenario) describeStep(now time.Time) string {
	d := sc.d
	end := minutes(d.cfg.duration)
	switch sc.phase {
	case phaseSettling:
		_, why := sc.settled()
		return "waiting for the cluster to settle: " + why
	case phaseRunning:
		return "running normally: every partition has a running active" + d.standbyClause() + "; an instance will be killed soon"
	case phaseDown:
		r := sc.current()
		if r.failoverAt.IsZero() {
			return fmt.Sprintf("%s killed %.1fs ago; queries go to the other replicas while the group waits out its %s session timeout and moves the tasks",
				r.victim.name, max(now.Sub(r.killAt), 0).Seconds(), demoSessionTimeout)
		}
		return fmt.Sprintf("failover complete %.1fs after the kill; %s stays down a little longer", r.failoverAt.Sub(r.killAt).Seconds(), r.victim.name)
	case phaseRestarting:
		return fmt.Sprintf("restarting %s with its old state directory", sc.current().victim.name)
	case phaseRecovering:
		r := sc.current()
		if r.caughtUpAt.IsZero() {
			return fmt.Sprintf("%s is back, catching up from where its stores were", r.victim.name)
		}
		return fmt.Sprintf("%s caught up %.1fs after restarting", r.victim.name, r.caughtUpAt.Sub(r.restartAt).Seconds())
	case phaseSteady:
		if d.cfg.chaos && d.cfg.instances >= 2 {
			return "scenario complete; feeding text until " + end
		}
		return "counting and answering; feeding text until " + end
	case phaseChecking:
		return fmt.Sprintf("feed stopped; checking every count through the routing client: %s of %s exact",
			thousands(sc.checkExact.Load()), thousands(int64(sc.checkTotal)))
	}
	return ""
}

// printAnswers prints, in plain mode, a few sample answers a second while
// an instance is down or catching up, to show who serves them. It prefers
// refusals, then answers for the partitions the killed instance ran while
// it is down, then answers from the instance itself once it is back.
func (sc *scenario) printAnswers(now time.Time) {
	d := sc.d
	if d.ansi || now.Sub(sc.printedAt) < time.Second/answersPerSecond {
		return
	}
	var prefer func(answer) bool
	switch sc.phase {
	case phaseDown, phaseRestarting:
		parts := sc.current().parts
		prefer = func(a answer) bool { return slices.Contains(parts, a.partition) }
	case phaseRecovering:
		r := sc.current()
		if !r.caughtUpAt.IsZero() {
			return
		}
		prefer = func(a answer) bool { return a.host == r.victim.addr }
	default:
		return
	}
	var pick *answer
	as := d.queries.lastAnswers(4 * maxRecent)
	// Answers older than the last announcement would print out of order.
	var after time.Duration
	if es := d.lastEvents(1); len(es) > 0 {
		after = es[0].at
	}
	for i := len(as) - 1; i >= 0; i-- {
		a := &as[i]
		if a.seq <= sc.printedSeq || a.at < after {
			break
		}
		switch {
		case a.refusal != "":
			pick = a
		case pick == nil:
			pick = a
		case pick.refusal == "" && prefer(*a) && !prefer(*pick):
			pick = a
		}
		if pick.refusal != "" {
			break
		}
	}
	if pick == nil {
		return
	}
	sc.printedSeq, sc.printedAt = as[len(as)-1].seq, now
	fmt.Fprintln(d.s.out, plainAnswer(*pick))
}

// summaryWidth is the width the summary wraps its lines to.
const summaryWidth = 110

// summary prints the run's figures.
func (sc *scenario) summary(now time.Time, diffs []string, runErr error) {
	d := sc.d
	w := d.s.out
	feedEnd := sc.feedStopped
	lines, words := sc.fedLines, sc.fedWords
	if feedEnd.IsZero() {
		feedEnd = now
		lines, words = d.feed.fed()
	}
	fed := feedEnd.Sub(d.start).Seconds()
	var processed int64
	for _, sl := range d.slots {
		processed += sl.totalProcessed()
	}
	t := d.queries.totals()
	row := func(key, format string, args ...any) {
		for i, l := range wrap(fmt.Sprintf(format, args...), summaryWidth-16) {
			if i > 0 {
				key = ""
			}
			fmt.Fprintf(w, "  %-13s %s\n", key, l)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "summary")
	row("run", "%.1fs: %s, exactly-once, %d lines/s", now.Sub(d.start).Seconds(), d.shape(), d.cfg.rate)
	row("text fed", "%s lines, %s words acknowledged by the broker in %.1fs (%.0f lines/s)", thousands(lines), thousands(words), fed, float64(lines)/fed)
	redone := ""
	if len(sc.rounds) > 0 {
		redone = "; work redone after a kill included"
	}
	row("processed", "%s records, %.0f/s (each line, then each word again from the repartition topic%s)",
		thousands(processed), float64(processed)/now.Sub(d.start).Seconds(), redone)
	var roles []string
	for _, r := range []string{"active", "restoring", "standby", "warmup"} {
		if n := t.byRole[r]; n > 0 {
			roles = append(roles, fmt.Sprintf("%s %s", r, thousands(n)))
		}
	}
	if len(roles) == 0 {
		roles = []string{"none"}
	}
	row("queries", "%s answered, %s refused, through the routing client with staleness lag:%d; answered by %s",
		thousands(t.answered), thousands(t.refused), demoLagBound, strings.Join(roles, ", "))
	if len(t.reasons) > 0 {
		var rs []string
		for _, r := range slices.Sorted(maps.Keys(t.reasons)) {
			rs = append(rs, fmt.Sprintf("%d× [%s]", t.reasons[r], r))
		}
		row("", "refused because the replicas tried were: %s", strings.Join(rs, ", "))
	}
	if t.maxLag >= 0 {
		a := t.maxLagSeen
		row("staleness", "largest lag an answer reported: %s (%q from %s, %s of partition %d)", records(t.maxLag), a.word, a.instance, a.role, a.partition)
	}
	if t.regressions == 0 {
		row("monotonic", "no answer was lower than an earlier answer for the same word")
	} else {
		row("monotonic", "%d answers were lower than an earlier answer for the same word", t.regressions)
	}
	for i, r := range sc.rounds {
		key := "failover"
		if len(sc.rounds) > 1 {
			key = fmt.Sprintf("failover %d", i+1)
		}
		at := r.killAt.Sub(d.start).Seconds()
		if r.failoverAt.IsZero() {
			row(key, "%s killed at %.1fs; its partitions %s were not all running elsewhere by the end", r.victim.name, at, partitionList(r.parts))
			continue
		}
		var per []string
		var tail, end int64
		for _, p := range r.parts {
			tk := r.takeovers[p]
			per = append(per, fmt.Sprintf("%d on %s after %.1fs", p, tk.slot.name, tk.runningAt.Sub(r.killAt).Seconds()))
			tail += tk.tail
			end += tk.end
		}
		row(key, "%.1fs: %s killed at %.1fs; its partitions active again: %s", r.failoverAt.Sub(r.killAt).Seconds(), r.victim.name, at, strings.Join(per, ", "))
		if first, last, all := d.queries.failoverAnswers(); i == len(sc.rounds)-1 && all {
			row("", "first answer from a new active %.1fs after the kill, from new actives of all its partitions %.1fs after", first.Seconds(), last.Seconds())
		}
		row("", "the new actives restored %s; their changelogs held %s", records(tail), thousands(end))
		if !r.caughtUpAt.IsZero() {
			row("restart", "%s caught up %.1fs after restarting with its old state: it read %s changelog records, not all %s its partitions' changelogs hold%s",
				r.victim.name, r.caughtUpAt.Sub(r.restartAt).Seconds(), thousands(r.caughtRead), thousands(r.caughtSize), r.keptClause())
		}
	}
	if len(sc.rounds) > 0 {
		row("", "(failover time: from the kill until every partition the killed instance ran is running as active on a survivor, seen by polling the replicas every %s; the group's session timeout is %s)", pollInterval, demoSessionTimeout)
	}
	switch {
	case sc.checkEnd.IsZero():
		row("counts", "not checked: %v", runErr)
	case len(diffs) == 0:
		row("counts", "all %s word counts are exact: each equals the words the broker acknowledged (checked through the routing client, staleness active)", thousands(int64(sc.checkTotal)))
		row("", "and so are their counts per minute since %s UTC in %s", time.UnixMilli(sc.checkFrom).UTC().Format("15:04"), minuteStore)
		fc := sc.final
		if len(fc.diffs) == 0 {
			row("final", "%s word-minutes closed (%s); %s, read committed, has one record for each and no other, %s of them with exactly the words produced",
				thousands(int64(fc.closed)), plural(fc.minutes, "minute", "minutes"), minuteTopic, thousands(int64(fc.exact)))
			if fc.atRisk > 0 {
				row("", "(%s closed while a kill or restart held back part of the input, so words arriving later than the %s grace may be left out of them, by design: they must count no more than was produced)",
					thousands(int64(fc.atRisk)), minuteGrace)
			}
		} else {
			row("final", "%s differs from the %s word-minutes closed:", minuteTopic, thousands(int64(fc.closed)))
			for _, df := range fc.diffs[:min(20, len(fc.diffs))] {
				row("", "%s", df)
			}
		}
	default:
		row("counts", "%d of %d word counts differ:", len(diffs), sc.checkTotal)
		for _, df := range diffs[:min(20, len(diffs))] {
			row("", "%s", df)
		}
	}
}
