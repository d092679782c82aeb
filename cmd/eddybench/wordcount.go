package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

const (
	wcInput        = "text"
	wcBaselineOut  = "bench-words"
	wcEddyOut      = "word-counts"
	wcBaselineApp  = "bench-baseline"
	wcEddyApp      = "bench-wc"
	wcCountsStore  = "counts"
	wcCommitPeriod = runtime.DefaultCommitInterval
	// wcLinger is the producer linger Eddy's stream threads use; the
	// baseline uses it too, so neither batches more than the other.
	wcLinger = 5 * time.Millisecond
)

// phase is the timing of one side of a throughput comparison, with the
// CPU time the whole process (broker included) spent from start to done.
type phase struct {
	start, first, done time.Time
	cpuStart, cpuDone  time.Duration
}

// cpu is the process's CPU time (user and system) since it started.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (p phase) cpu() time.Duration { return p.cpuDone - p.cpuStart }

func (p phase) fromStart() time.Duration { return p.done.Sub(p.start) }
func (p phase) fromFirst() time.Duration { return p.done.Sub(p.first) }

// benchWordCount is benchmark (a). Both sides read the same preloaded
// lines from the same in-process broker; the baseline, Eddy and Eddy under
// exactly-once alternate (see alternate). The headline rate of each side
// is lines per second from its first input record to its finish line, so
// that group joins and start-up count against neither; rates from start
// are printed too.
func benchWordCount(ctx context.Context, cfg *config) ([]row, error) {
	source := "generated"
	if cfg.corpus != "" {
		source = cfg.corpus
	}
	combining := "combining before the repartition (topology.WithCombining)"
	if !cfg.combine {
		combining = "without combining, every word through the repartition topic as in Kafka Streams"
	}
	fmt.Fprintf(cfg.out, "\n(a) word count: %d lines (%s), %d partitions, in-process broker, Eddy %s\n", cfg.lines, source, cfg.partitions, combining)
	addrs, admCl, adm, closeAll, err := startBenchBroker(ctx, int32(cfg.partitions), wcInput, wcEddyOut)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	lines, err := inputLines(cfg)
	if err != nil {
		return nil, err
	}
	ref := make(map[string]int64)
	var totalWords int64
	var buf []string
	for i := range lines {
		buf = appendWords(buf[:0], lines[i])
		for _, w := range buf {
			ref[w]++
		}
		totalWords += int64(len(buf))
	}
	loadStart := time.Now()
	p := &producer{cl: admCl}
	for _, l := range lines {
		p.send(ctx, &kgo.Record{Topic: wcInput, Value: []byte(l)})
	}
	if n, err := p.flush(ctx); err != nil || n != int64(len(lines)) {
		return nil, fmt.Errorf("preloading input: %d of %d acknowledged: %v", n, len(lines), err)
	}
	lines = nil
	cfg.logf("preloaded %d lines (%d words, %d distinct) in %s", cfg.lines, totalWords, len(ref), time.Since(loadStart).Round(time.Millisecond))

	// The baseline, Eddy and Eddy under exactly-once alternate; each run
	// has a group, output or application ID of its own.
	n := int64(cfg.lines)
	var baseStart, eddyStart, baseCPU, eddyCPU, eosCPU spread
	sides, err := alternate(cfg,
		side{"baseline", func(i int) (float64, error) {
			stopProf, err := profile(cfg.profileDir, fmt.Sprintf("wordcount-baseline-%d", i))
			if err != nil {
				return 0, err
			}
			ph, err := baselineRun(ctx, cfg, adm, addrs, i, totalWords)
			stopProf()
			if i > 0 {
				baseStart, baseCPU = append(baseStart, rate(n, ph.fromStart())), append(baseCPU, cpuPerK(ph.cpu(), n))
			}
			return rate(n, ph.fromFirst()), err
		}},
		side{"eddy", func(i int) (float64, error) {
			ph, err := wcEddyRun(ctx, cfg, adm, addrs, ref, fmt.Sprintf("%s-%d", wcEddyApp, i), runtime.AtLeastOnce, i)
			if i > 0 {
				eddyStart, eddyCPU = append(eddyStart, rate(n, ph.fromStart())), append(eddyCPU, cpuPerK(ph.cpu(), n))
			}
			return rate(n, ph.fromFirst()), err
		}},
		side{"eddy exactly-once", func(i int) (float64, error) {
			ph, err := wcEddyRun(ctx, cfg, adm, addrs, ref, fmt.Sprintf("%s-eos-%d", wcEddyApp, i), runtime.ExactlyOnce, i)
			if i > 0 {
				eosCPU = append(eosCPU, cpuPerK(ph.cpu(), n))
			}
			return rate(n, ph.fromFirst()), err
		}})
	if err != nil {
		return nil, err
	}
	baseRates, eddyRates, eosRates := sides[0], sides[1], sides[2]

	var twoStage phase
	if !cfg.combine {
		if twoStage, err = twoStageRun(ctx, cfg, adm, addrs, totalWords, int64(len(ref))); err != nil {
			return nil, fmt.Errorf("two-stage loop: %w", err)
		}
	}

	fmt.Fprintf(cfg.out, "  lines/s from first record; from client or App start: baseline median %s, eddy median %s\n",
		fmtNum(baseStart.median()), fmtNum(eddyStart.median()))
	fmt.Fprintf(cfg.out, "  CPU µs per 1,000 lines (whole process, broker included, start to done), medians: baseline %s, eddy %s, eddy exactly-once %s\n",
		fmtNum(baseCPU.median()), fmtNum(eddyCPU.median()), fmtNum(eosCPU.median()))
	fmt.Fprintf(cfg.out, "  eddy exactly-once: commit interval %s, one transaction per commit\n", runtime.DefaultEOSCommitInterval)
	hop := "WithCombining, partial counts through the repartition topic"
	if !cfg.combine {
		hop = "repartition, one record per word"
	}
	fmt.Fprintf(cfg.out, "  baseline = one kgo group client: poll lines, split each into words, produce word→\"1\" per word\n"+
		"             to a fresh topic (linger %s); every %s and at the end flush the producer (all acked), then commit\n"+
		"             the polled offsets. Done = all %d lines consumed, all %d word records acked, final commit done.\n"+
		"  eddy     = runtime App, %d stream thread(s), defaults (commit %s, cache %d MiB); topology\n"+
		"             FlatMapValues(words) → GroupBy(word) [%s] → Count(%q) → %s.\n"+
		"             Done = the first check (every 5 ms) at which every line went through FlatMapValues and the\n"+
		"             group's committed offsets reach the end of %s and of the repartition topic; a scan of each\n"+
		"             partition's committed counts then checks every word's count against a reference count (if\n"+
		"             one falls short, done is the later check at which the scan finds them all exact). Store\n"+
		"             writes follow producer acks at commit, so outputs are acked by then. Exactly-once: done is\n"+
		"             the check at which the scan finds the counts exact.\n",
		wcLinger, wcCommitPeriod, n, totalWords,
		cfg.threads, wcCommitPeriod, runtime.DefaultCacheMaxBytes>>20, hop, wcCountsStore, wcEddyOut, wcInput)
	// Issue 17's targets: faster than the bare loop when combining, 0.6×
	// of it when every word crosses the repartition topic.
	target := 1.0
	if !cfg.combine {
		target = 0.6
	}
	rows := []row{
		ratioRow("(a) word count", "lines/s", eddyRates, baseRates, target),
		infoRow("(a) … from start", "lines/s", eddyStart, baseStart),
		ratioRow("(e) exactly-once vs at-least-once", "lines/s", eosRates, eddyRates, 0.7),
	}
	if !cfg.combine {
		fmt.Fprintf(cfg.out, "  two-stage loop: %s lines/s from first record; CPU per 1,000 lines %s (informational, run after the baseline)\n"+
			"             = the baseline loop producing to a repartition topic, and beside it a second kgo group client\n"+
			"             consuming that topic as it fills, counting words in a map and, every %s and at the end,\n"+
			"             producing each changed count, flushing and committing. No store, no changelog, no cache: the\n"+
			"             least any word count does when every word crosses a repartition topic.\n",
			fmtNum(rate(n, twoStage.fromFirst())), cpuPer(twoStage.cpu(), n), wcCommitPeriod)
		two := spread{rate(n, twoStage.fromFirst())}
		rows = append(rows,
			infoRow("(a) info: two-stage loop vs baseline", "lines/s", two, baseRates),
			infoRow("(a) info: eddy vs two-stage loop", "lines/s", eddyRates, two))
	}
	return rows, nil
}

// wcEddyRun runs Eddy's word count once as appID, profiled, and deletes
// the run's internal topics again so that the broker's heap does not grow
// with every run.
func wcEddyRun(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, ref map[string]int64, appID string, guarantee runtime.ProcessingGuarantee, run int) (phase, error) {
	stopProf, err := profile(cfg.profileDir, fmt.Sprintf("%s-%d", appID, run))
	if err != nil {
		return phase{}, err
	}
	ph, err := runEddyWordCount(ctx, cfg, addrs, adm, int64(cfg.lines), ref, appID, guarantee)
	stopProf()
	if err != nil {
		return ph, err
	}
	cfg.logf("%s: first record after %s, counts exact after %s", appID,
		ph.first.Sub(ph.start).Round(time.Millisecond), ph.fromStart().Round(time.Millisecond))
	_, err = adm.DeleteTopics(ctx, appID+"-words-repartition", changelogTopic(appID, wcCountsStore))
	return ph, err
}

// cpuPerK is CPU time per 1,000 of n units, in µs.
func cpuPerK(d time.Duration, n int64) float64 {
	return float64(d.Microseconds()) * 1000 / float64(n)
}

// baselineRun runs the baseline once with group and output topic of its
// own, checks its output, and deletes the topic again so that the broker's
// heap does not grow with every run.
func baselineRun(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, run int, words int64) (phase, error) {
	group := fmt.Sprintf("%s-%d", wcBaselineApp, run)
	out := fmt.Sprintf("%s-%d", wcBaselineOut, run)
	if err := createTopics(ctx, adm, int32(cfg.partitions), out); err != nil {
		return phase{}, err
	}
	ph, err := runBaselineWordCount(ctx, addrs, group, wcInput, out, int64(cfg.lines), words)
	if err != nil {
		return ph, err
	}
	written, err := endOffsetSum(ctx, adm, out)
	if err != nil {
		return ph, err
	}
	if written != words {
		return ph, fmt.Errorf("baseline wrote %d word records, want %d", written, words)
	}
	cfg.logf("baseline run %d: first record after %s, done after %s; %d word records written",
		run, ph.first.Sub(ph.start).Round(time.Millisecond), ph.fromStart().Round(time.Millisecond), written)
	if _, err := adm.DeleteTopics(ctx, out); err != nil {
		return ph, err
	}
	return ph, nil
}

// twoStageRun runs runTwoStageWordCount once with groups and topics of
// its own, checks that it wrote every word's final count, and deletes its
// topics again.
func twoStageRun(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, words, distinct int64) (phase, error) {
	repart, out := wcBaselineOut+"-repartition", wcBaselineOut+"-counts"
	if err := createTopics(ctx, adm, int32(cfg.partitions), repart, out); err != nil {
		return phase{}, err
	}
	ph, err := runTwoStageWordCount(ctx, addrs, wcBaselineApp+"-two-stage", repart, out, int64(cfg.lines), words)
	if err != nil {
		return ph, err
	}
	written, err := endOffsetSum(ctx, adm, out)
	if err != nil {
		return ph, err
	}
	if written < distinct {
		return ph, fmt.Errorf("two-stage loop wrote %d counts for %d distinct words", written, distinct)
	}
	cfg.logf("two-stage loop: first record after %s, done after %s; %d count updates written",
		ph.first.Sub(ph.start).Round(time.Millisecond), ph.fromStart().Round(time.Millisecond), written)
	_, err = adm.DeleteTopics(ctx, repart, out)
	return ph, err
}

// runBaselineWordCount is the least work any Kafka word count must do
// without state: consume each line, split it, produce one record per word,
// and commit input offsets only once what they produced is acknowledged.
func runBaselineWordCount(ctx context.Context, addrs []string, group, in, out string, lines, words int64) (phase, error) {
	var ph phase
	ph.start, ph.cpuStart = time.Now(), cpu()
	cl, err := loopClient(addrs, group, in, kgo.DefaultProduceTopic(out))
	if err != nil {
		return ph, err
	}
	defer cl.Close()
	p := &producer{cl: cl}
	one := []byte("1")
	var consumed int64
	var buf []string
	lastCommit := time.Now()
	commit := func() error {
		if _, err := p.flush(ctx); err != nil {
			return err
		}
		lastCommit = time.Now()
		return cl.CommitUncommittedOffsets(ctx)
	}
	for consumed < lines {
		fs, err := poll(ctx, cl)
		if err != nil {
			return ph, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if consumed == 0 {
				ph.first = time.Now()
			}
			consumed++
			buf = appendWords(buf[:0], string(r.Value))
			for _, w := range buf {
				p.send(ctx, &kgo.Record{Key: []byte(w), Value: one})
			}
		})
		if time.Since(lastCommit) >= wcCommitPeriod {
			if err := commit(); err != nil {
				return ph, err
			}
		}
	}
	if err := commit(); err != nil {
		return ph, err
	}
	ph.done, ph.cpuDone = time.Now(), cpu()
	if acked, _ := p.flush(ctx); acked != words || consumed != lines {
		return ph, fmt.Errorf("consumed %d lines (want %d), %d word records acked (want %d)", consumed, lines, acked, words)
	}
	return ph, nil
}

// runEddyWordCount runs the word-count topology and times it until the
// store holds exactly the reference counts.
func runEddyWordCount(ctx context.Context, cfg *config, addrs []string, adm *kadm.Client, lines int64, ref map[string]int64, appID string, guarantee runtime.ProcessingGuarantee) (phase, error) {
	var ph phase
	var seen atomic.Int64
	var first, last, lastEmit atomic.Int64
	bld := topology.NewBuilder()
	text := topology.Stream(bld, wcInput, serde.String, serde.String)
	words := topology.FlatMapValues(text, func(_, line string) []string {
		switch seen.Add(1) {
		case 1:
			first.Store(time.Now().UnixNano())
		case lines:
			last.Store(time.Now().UnixNano())
		}
		return appendWords(nil, line)
	})
	var countOpts []topology.Option
	if cfg.combine {
		countOpts = append(countOpts, topology.WithCombining())
	}
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count(wcCountsStore, countOpts...).ToStream().Peek(func(string, int64) { lastEmit.Store(time.Now().UnixNano()) }).To(wcEddyOut, serde.String, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		return ph, err
	}
	dir, err := os.MkdirTemp("", "eddybench-wc-")
	if err != nil {
		return ph, err
	}
	defer os.RemoveAll(dir)
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:       appID,
		Brokers:             addrs,
		StateDir:            dir,
		NumStreamThreads:    cfg.threads,
		MaxPollRecords:      cfg.maxPoll,
		ProcessingGuarantee: guarantee,
		StoreLayout:         cfg.layout,
		Logger:              cfg.log,
	})
	if err != nil {
		return ph, err
	}
	ph.start, ph.cpuStart = time.Now(), cpu()
	if err := app.Start(ctx); err != nil {
		return ph, err
	}
	defer app.Close(context.Background())

	pending := make(map[string]int64, len(ref))
	for w, n := range ref {
		pending[w] = n
	}
	// Under at-least-once the runtime commits offsets only after the
	// stores hold what those offsets produced, so the counts are exact
	// once the group's commits cover the input and the repartition topic:
	// that check is the finish line, and the scan of the stores that
	// follows it verifies the counts without being timed. Should that
	// first scan find a count short, the finish line is the check at
	// which a scan finds them exact. (Under exactly-once the repartition
	// topic ends with a transaction marker no offset commit ever covers,
	// so only the counts tell, and the scan is timed.)
	var caught time.Time
	var caughtCPU time.Duration
	scans := 0
	err = waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		if seen.Load() < lines {
			return false, nil
		}
		topics := []string{wcInput, appID + "-words-repartition"}
		if guarantee == runtime.ExactlyOnce {
			topics = topics[:1]
		}
		for _, topic := range topics {
			if ok, err := groupCaughtUp(ctx, adm, appID, topic); !ok || err != nil {
				return false, err
			}
		}
		if guarantee == runtime.AtLeastOnce && caught.IsZero() {
			caught, caughtCPU = time.Now(), cpu()
		}
		// Counts only grow and the input is finite, so a word whose
		// count reached its reference is final. Each partition's
		// committed counts are read in one scan of its replica's store:
		// point reads (Querier.GetBytes) of tens of thousands of words, most
		// of them not in the record cache's read cache, cost a badger
		// transaction each, 5% of the process's CPU on a real text.
		for p := range int32(cfg.partitions) {
			rep, err := app.Queries().Replica(wcCountsStore, p)
			if err != nil {
				// Not hosted here yet: check again at the next tick.
				scans++
				return false, nil
			}
			if read, err := checkCounts(rep.Store(), pending); !read || err != nil {
				scans++
				return false, err
			}
		}
		scans++
		return len(pending) == 0, nil
	})
	ph.done, ph.cpuDone = time.Now(), cpu()
	if !caught.IsZero() && scans == 1 {
		ph.done, ph.cpuDone = caught, caughtCPU
	}
	ph.first = time.Unix(0, first.Load())
	if err != nil {
		return ph, err
	}
	cfg.logf("%s: last line split %s after the first, last count emitted %s after it, done %s after that",
		appID, time.Unix(0, last.Load()).Sub(ph.first).Round(time.Millisecond), time.Unix(0, lastEmit.Load()).Sub(time.Unix(0, last.Load())).Round(time.Millisecond), ph.done.Sub(time.Unix(0, lastEmit.Load())).Round(time.Millisecond))
	// Under exactly-once an aborted transaction's lines go through again.
	if n := seen.Load(); n < lines || (guarantee == runtime.AtLeastOnce && n != lines) {
		return ph, fmt.Errorf("%d lines went through the topology, want %d", n, lines)
	}
	return ph, app.Close(ctx)
}

// checkCounts compares the counts in one partition's committed store with
// the reference counts of the words not yet final, pending, and deletes
// the words whose count reached its reference. It reports whether it could
// read the store (a replica moving away closes it); a count above its
// reference is an error.
func checkCounts(st statestore.Store, pending map[string]int64) (bool, error) {
	it, err := st.All()
	if err != nil {
		return false, nil
	}
	defer it.Close()
	for it.Next() {
		want, ok := pending[string(it.Key())]
		if !ok {
			continue // final already
		}
		// The store keeps each count with its timestamp.
		v, _ := statestore.SplitTimestamped(it.Value())
		got, err := serde.Int64.Decode(v)
		if err != nil {
			return true, err
		}
		if got > want {
			return true, fmt.Errorf("word %q counted %d times, want %d", it.Key(), got, want)
		}
		if got == want {
			delete(pending, string(it.Key()))
		}
	}
	return it.Err() == nil, nil
}

// cpuPer formats CPU time per 1,000 of n units.
func cpuPer(d time.Duration, n int64) string {
	return (d * 1000 / time.Duration(n)).Round(time.Microsecond).String()
}

// runTwoStageWordCount is the informational floor of an uncombined word
// count: the least two bare kgo loops do to count words through a
// repartition topic, with no store and no changelog. The first stage is
// the baseline loop producing to the repartition topic repart; the second
// consumes repart as it fills, counts words in a map, and every
// wcCommitPeriod, and at the end, produces each word whose count changed
// to out, flushes and commits. Done is the second stage's final commit
// after it consumed every word.
func runTwoStageWordCount(ctx context.Context, addrs []string, group, repart, out string, lines, words int64) (phase, error) {
	var ph phase
	ph.start, ph.cpuStart = time.Now(), cpu()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type stage struct {
		ph  phase
		err error
	}
	first := make(chan stage, 1)
	go func() {
		p1, err := runBaselineWordCount(ctx, addrs, group+"-split", wcInput, repart, lines, words)
		if err != nil {
			cancel()
		}
		first <- stage{p1, err}
	}()

	cl, err := loopClient(addrs, group+"-count", repart, kgo.DefaultProduceTopic(out))
	if err != nil {
		return ph, err
	}
	defer cl.Close()
	p := &producer{cl: cl}
	counts := make(map[string]int64)
	changed := make(map[string]struct{})
	var consumed int64
	lastCommit := time.Now()
	commit := func() error {
		for w := range changed {
			p.send(ctx, &kgo.Record{Key: []byte(w), Value: binary.BigEndian.AppendUint64(nil, uint64(counts[w]))})
		}
		clear(changed)
		if _, err := p.flush(ctx); err != nil {
			return err
		}
		lastCommit = time.Now()
		return cl.CommitUncommittedOffsets(ctx)
	}
	for consumed < words {
		fs, err := poll(ctx, cl)
		if err != nil {
			cancel()
			if s1 := <-first; s1.err != nil {
				return ph, fmt.Errorf("first stage: %w", s1.err)
			}
			return ph, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			consumed++
			w := string(r.Key)
			counts[w]++
			changed[w] = struct{}{}
		})
		if time.Since(lastCommit) >= wcCommitPeriod {
			if err := commit(); err != nil {
				return ph, err
			}
		}
	}
	if err := commit(); err != nil {
		return ph, err
	}
	ph.done, ph.cpuDone = time.Now(), cpu()
	s1 := <-first
	if s1.err != nil {
		return ph, fmt.Errorf("first stage: %w", s1.err)
	}
	ph.first = s1.ph.first
	if consumed != words {
		return ph, fmt.Errorf("counted %d words, want %d", consumed, words)
	}
	return ph, nil
}
