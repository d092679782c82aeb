package main

// What the scenario shows: the frames of the view, sample answers in plain
// mode, and the summary that ends the run.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddystreams/eddy/task"
)

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
	row := summaryRow(func(key, format string, args ...any) {
		for i, l := range wrap(fmt.Sprintf(format, args...), summaryWidth-16) {
			if i > 0 {
				key = ""
			}
			fmt.Fprintf(w, "  %-13s %s\n", key, l)
		}
	})
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
	sc.summaryRounds(row)
	sc.summaryCounts(row, diffs, runErr)
}

// summaryRow prints one row of the summary, its text wrapped, the key
// on its first line only.
type summaryRow func(key, format string, args ...any)

// summaryRounds prints a row for each kill: the failover, and the restart
// with its catch-up.
func (sc *scenario) summaryRounds(row summaryRow) {
	d := sc.d
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
}

// summaryCounts prints the verdict of the count check: exact, or the
// counts that differ, or why they were not checked.
func (sc *scenario) summaryCounts(row summaryRow, diffs []string, runErr error) {
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
