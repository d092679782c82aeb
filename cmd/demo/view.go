package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eddystreams/eddy/task"
)

// The live view of the no-argument demo. The scenario fills in a frame
// once a second; the functions here only format it, either as one plain
// line (output piped or redirected) or as a full-screen redraw (a
// terminal), so that they can be tested with fixed inputs.

// frame is what one refresh of the view shows.
type frame struct {
	elapsed time.Duration
	// settings describes the run: instances, standbys, guarantee, rate.
	settings string
	// step says what the scenario is doing now.
	step      string
	fed       int64   // lines the broker acknowledged
	fedRate   float64 // lines per second over the last refresh
	instances []instanceRow
	answered  int64
	refused   int64
	maxLag    int64  // largest lag an answer reported; -1 before any
	bound     string // staleness bound of the queries, e.g. "lag:10000"
	top       []topWord
	recent    []answer // newest last
	events    []event  // newest last
}

// instanceRow is one instance: its state and the store partitions it
// holds, ordered by partition.
type instanceRow struct {
	name, addr string
	state      instanceState
	recPerSec  float64
	replicas   []replicaCell
}

type instanceState int

const (
	stateUp instanceState = iota
	stateKilled
	stateStarting
)

// replicaCell is one store partition an instance holds.
type replicaCell struct {
	partition int32
	role      task.State
	// lag is -1 while unknown.
	lag int64
	// done and total are restoration progress while the role is
	// task.Restoring: records applied by this restoration, and those plus
	// the records still to apply.
	done, total int64
}

type topWord struct {
	word  string
	count int64
}

// answer is one query the demo's routing client made.
type answer struct {
	seq   int64         // order of the queries, from 1
	at    time.Duration // since the start of the run
	word  string
	count int64
	// refusal is why no replica answered, and reasons the kinds of
	// refusal the replicas tried gave; both empty for an answer.
	refusal string
	reasons string
	// The replica that answered: its instance's name and address, the
	// partition, its role and its lag.
	instance, host string
	partition      int32
	role           string
	lag            int64
}

// event is a scenario announcement.
type event struct {
	at  time.Duration
	msg string
}

// isTerminal reports whether w is a terminal, where the view redraws in
// place; anything else gets plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// terminalWidth is the width the full-screen view fits its lines to: the
// COLUMNS variable when the shell exports it, else a common default.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		return n
	}
	return 120
}

// clock renders a time since the start of the run as the plain lines'
// prefix.
func clock(d time.Duration) string {
	return fmt.Sprintf("[%5.1fs]", d.Seconds())
}

// thousands renders n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// percent is done as a whole percentage of total, 100 when there is
// nothing to do.
func percent(done, total int64) int {
	if total <= 0 {
		return 100
	}
	return int(min(max(done*100/total, 0), 100))
}

// progressBar draws done of total as a bar of width cells.
func progressBar(done, total int64, width int) string {
	filled := width
	if total > 0 {
		filled = int(min(max(done*int64(width)/total, 0), int64(width)))
	}
	return strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
}

// plainAnnouncement is a scenario announcement as a plain line.
func plainAnnouncement(e event) string {
	return fmt.Sprintf("%s *** %s", clock(e.at), e.msg)
}

// describe renders an answer: the word, its count and the replica that
// served it, or the refusal.
func (a answer) describe() string {
	if a.refusal != "" {
		return fmt.Sprintf("%q refused: %s", a.word, a.refusal)
	}
	return fmt.Sprintf("%q = %s  from %s (%s) partition %d, %s, lag %d",
		a.word, thousands(a.count), a.instance, a.host, a.partition, a.role, a.lag)
}

// plainAnswer is a sample query answer as a plain line.
func plainAnswer(a answer) string {
	return fmt.Sprintf("%s     query %s", clock(a.at), a.describe())
}

// replicaGroups renders an instance's replicas grouped by role, in the
// order active, restoring, standby, warmup, idle. restoring renders one
// restoring replica.
func replicaGroups(cells []replicaCell, restoring func(replicaCell) string) []string {
	var out []string
	for _, role := range []task.State{task.Running, task.Restoring, task.Standby, task.Warmup, task.Parked} {
		var items []string
		for _, c := range cells {
			if c.role != role {
				continue
			}
			switch role {
			case task.Running, task.Parked:
				items = append(items, strconv.Itoa(int(c.partition)))
			case task.Restoring:
				items = append(items, restoring(c))
			default:
				items = append(items, fmt.Sprintf("%d (lag %s)", c.partition, lagText(c.lag)))
			}
		}
		if len(items) > 0 {
			out = append(out, roleName(role)+" "+strings.Join(items, " "))
		}
	}
	return out
}

func lagText(lag int64) string {
	if lag < 0 {
		return "?"
	}
	return thousands(lag)
}

func (s instanceState) String() string {
	switch s {
	case stateKilled:
		return "killed"
	case stateStarting:
		return "starting"
	}
	return "up"
}

// renderPlain writes the frame as one line: what was fed, the queries, each
// instance's partitions by role and rate, and the top words.
func renderPlain(w io.Writer, f *frame) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s fed %s lines · queries %s answered, %s refused", clock(f.elapsed), thousands(f.fed), thousands(f.answered), thousands(f.refused))
	for _, in := range f.instances {
		fmt.Fprintf(&b, " · %s ", in.name)
		if in.state != stateUp {
			b.WriteString(in.state.String())
			continue
		}
		fmt.Fprintf(&b, "%.0f rec/s", in.recPerSec)
		groups := replicaGroups(in.replicas, func(c replicaCell) string {
			return fmt.Sprintf("%d (%d%%)", c.partition, percent(c.done, c.total))
		})
		if len(groups) > 0 {
			b.WriteString(": " + strings.Join(groups, ", "))
		}
	}
	if len(f.top) > 0 {
		b.WriteString(" · top:")
		for _, t := range f.top {
			fmt.Fprintf(&b, " %s %s", t.word, thousands(t.count))
		}
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// ANSI escape sequences of the full-screen view.
const (
	ansiHome      = "\x1b[H"
	ansiClear     = "\x1b[2J"
	ansiClearLine = "\x1b[K"
	ansiClearDown = "\x1b[J"
	ansiHide      = "\x1b[?25l"
	ansiShow      = "\x1b[?25h"
	ansiReset     = "\x1b[0m"
	ansiBold      = "\x1b[1m"
	ansiDim       = "\x1b[2m"
	ansiRed       = "\x1b[1;31m"
	ansiGreen     = "\x1b[32m"
	ansiYellow    = "\x1b[33m"
	ansiMagenta   = "\x1b[35m"
	ansiCyan      = "\x1b[36m"
)

func paint(color, s string) string { return color + s + ansiReset }

func roleColor(r task.State) string {
	switch r {
	case task.Running:
		return ansiGreen
	case task.Restoring:
		return ansiMagenta
	case task.Standby:
		return ansiCyan
	case task.Warmup:
		return ansiYellow
	}
	return ansiDim
}

// roleName is how the demo labels a replica's state: by the role queries
// report (a running replica is the active), a parked one as idle.
func roleName(s task.State) string {
	switch s {
	case task.Running:
		return "active"
	case task.Parked:
		return "idle"
	}
	return s.String()
}

func roleNameColor(role string) string {
	for _, r := range []task.State{task.Running, task.Restoring, task.Standby, task.Warmup} {
		if roleName(r) == role {
			return roleColor(r)
		}
	}
	return ansiDim
}

// visibleLen counts the runes of s that show on screen, skipping escape
// sequences.
func visibleLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			i = skipEscape(s, i)
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return n
}

// skipEscape returns the index after the CSI sequence starting at s[i].
func skipEscape(s string, i int) int {
	i++
	if i < len(s) && s[i] == '[' {
		i++
	}
	for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
		i++
	}
	return min(i+1, len(s))
}

// fit cuts s to width visible runes, keeping its escape sequences, and
// resets the colours when it cut something.
func fit(s string, width int) string {
	if visibleLen(s) <= width {
		return s
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			j := skipEscape(s, i)
			b.WriteString(s[i:j])
			i = j
			continue
		}
		if n == width-1 {
			b.WriteString("…")
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+size])
		i += size
		n++
	}
	b.WriteString(ansiReset)
	return b.String()
}

// pad right-pads s with spaces to width visible runes.
func pad(s string, width int) string {
	if n := visibleLen(s); n < width {
		return s + strings.Repeat(" ", width-n)
	}
	return s
}

// minutes renders a time since the start as m:ss.
func minutes(d time.Duration) string {
	s := int(d.Seconds())
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// maxEvents, maxEventLines and maxRecent bound the announcements, the
// lines they take, and the answers the full-screen view keeps on screen.
const (
	maxEvents     = 12
	maxEventLines = 14
	maxRecent     = 6
)

// wrap breaks text (without escape sequences) into lines of at most width
// runes at spaces; a word longer than width gets a line of its own.
func wrap(text string, width int) []string {
	width = max(width, 10)
	var lines []string
	var cur strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		wl := utf8.RuneCountInString(w)
		if n > 0 && n+1+wl > width {
			lines = append(lines, cur.String())
			cur.Reset()
			n = 0
		}
		if n > 0 {
			cur.WriteByte(' ')
			n++
		}
		cur.WriteString(w)
		n += wl
	}
	if n > 0 || len(lines) == 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// renderANSI writes the frame as a full screen: it moves the cursor home,
// rewrites every line (clearing its rest) and clears below, so that the
// screen does not flicker. Lines are cut to width.
func renderANSI(w io.Writer, f *frame, width int) {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	title := paint(ansiBold, "Eddy word count") + "  " + f.settings
	clk := minutes(f.elapsed)
	add("%s%s%s", title, strings.Repeat(" ", max(1, width-visibleLen(title)-len(clk))), clk)
	for i, l := range wrap(f.step, width-2) {
		if i == 0 {
			add("%s %s", paint(ansiBold, "▶"), l)
		} else {
			add("  %s", l)
		}
	}
	add("")

	const nameCol, rateCol = 24, 8
	add("%s", paint(ansiDim, pad("INSTANCE", nameCol)+pad("REC/S", rateCol)+`STORE "counts": PARTITIONS BY ROLE`))
	for _, in := range f.instances {
		name := pad(in.name+"  "+in.addr, nameCol)
		switch in.state {
		case stateKilled:
			add("%s%s%s", name, pad("–", rateCol), paint(ansiRed, "KILLED"))
			continue
		case stateStarting:
			add("%s%s%s", name, pad("–", rateCol), paint(ansiYellow, "starting"))
			continue
		}
		var restoring []replicaCell
		var groups []string
		for _, g := range replicaGroups(in.replicas, func(c replicaCell) string {
			restoring = append(restoring, c)
			return strconv.Itoa(int(c.partition))
		}) {
			role, rest, _ := strings.Cut(g, " ")
			color := roleNameColor(role)
			if role == task.Parked.String() {
				color = ansiDim
			}
			groups = append(groups, paint(color, role)+" "+rest)
		}
		if len(groups) == 0 {
			groups = []string{paint(ansiDim, "no partitions yet")}
		}
		add("%s%s%s", name, pad(fmt.Sprintf("%.0f", in.recPerSec), rateCol), strings.Join(groups, "   "))
		for _, c := range restoring {
			add("%s%s %d %s %3d%%  %s of %s records", strings.Repeat(" ", nameCol+rateCol), paint(ansiMagenta, "restoring"),
				c.partition, paint(ansiMagenta, progressBar(c.done, c.total, 24)), percent(c.done, c.total), thousands(c.done), thousands(c.total))
		}
	}
	add("")
	maxLag := "–"
	if f.maxLag >= 0 {
		maxLag = thousands(f.maxLag)
	}
	add("%s %s lines, %.0f/s (acknowledged by the broker)", paint(ansiDim, pad("text fed", 12)), thousands(f.fed), f.fedRate)
	add("%s %s answered · %s refused · largest lag in an answer %s  %s", paint(ansiDim, pad("queries", 12)),
		paint(ansiGreen, thousands(f.answered)), thousands(f.refused), maxLag, paint(ansiDim, "(routing client, staleness "+f.bound+")"))
	var top []string
	for _, t := range f.top {
		top = append(top, paint(ansiBold, t.word)+" "+thousands(t.count))
	}
	if len(top) == 0 {
		top = []string{paint(ansiDim, "–")}
	}
	add("%s %s", paint(ansiDim, pad("top words", 12)), strings.Join(top, " · "))
	add("")

	add("%s", paint(ansiDim, "RECENT ANSWERS"))
	recent := f.recent[max(0, len(f.recent)-maxRecent):]
	for _, a := range recent {
		if a.refusal != "" {
			add("  %s %s %s", pad(a.word, 14), paint(ansiRed, "refused"), a.refusal)
			continue
		}
		add("  %s %s  %s %s  partition %d  %s  lag %d", pad(a.word, 14), pad(thousands(a.count), 9),
			a.instance, pad(a.host, 16), a.partition, paint(roleNameColor(a.role), pad(a.role, 9)), a.lag)
	}
	for range maxRecent - len(recent) {
		add("")
	}
	add("")
	add("%s", paint(ansiDim, "EVENTS"))
	// The newest events that fit maxEventLines, each wrapped under its
	// time.
	var evLines []string
	for i := len(f.events) - 1; i >= 0; i-- {
		e := f.events[i]
		ls := wrap(e.msg, width-8)
		if len(evLines)+len(ls) > maxEventLines && len(evLines) > 0 {
			break
		}
		for j := range ls {
			if j == 0 {
				ls[j] = "  " + paint(ansiDim, pad(minutes(e.at), 4)) + "  " + ls[j]
			} else {
				ls[j] = strings.Repeat(" ", 8) + ls[j]
			}
		}
		evLines = append(ls, evLines...)
	}
	lines = append(lines, evLines...)

	var b strings.Builder
	b.WriteString(ansiHome)
	for _, l := range lines {
		b.WriteString(fit(l, width))
		b.WriteString(ansiClearLine + "\n")
	}
	b.WriteString(ansiClearDown)
	io.WriteString(w, b.String())
}
