package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

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
