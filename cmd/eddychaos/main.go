// Command eddychaos runs the fault harness of package integration/chaos:
// random fault schedules from a seed against the demo's word count, run as
// separate processes, each checked for lost or duplicated input, wrong
// final counts, dishonest query answers, wrongly deleted stores and
// instances that exit unasked. It prints each schedule's figures and,
// after the last, their sum; a failing schedule prints its seed, which
// replays it (--seed N --schedules 1).
//
//	go run ./cmd/eddychaos --seed 1 --schedules 50 --duration 2m --guarantee both
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/eddystreams/eddy/integration/chaos"
)

func main() {
	seed := flag.Uint64("seed", 0, "seed of the first schedule; the next ones use seed+1, seed+2, ... (default: random)")
	schedules := flag.Int("schedules", 1, "schedules to run (per guarantee)")
	duration := flag.Duration("duration", 2*time.Minute, "length of each fault schedule")
	guarantee := flag.String("guarantee", "both", "exactly-once, at-least-once or both")
	instances := flag.Int("instances", 3, "instances")
	partitions := flag.Int("partitions", 6, "partitions of the topics")
	faults := flag.String("faults", "all", "comma-separated fault kinds, or all: "+kindList())
	session := flag.Duration("session-timeout", 3*time.Second, "the instances' group session timeout")
	rate := flag.Int("query-rate", 20, "queries a second during the schedule")
	settle := flag.Duration("settle-timeout", 3*time.Minute, "bound on the wait for the counts once everything is healed")
	bin := flag.String("demo", "", "demo binary to run (default: built from this module)")
	keep := flag.Bool("keep", false, "keep each run's directory (broker data, state, logs)")
	verbose := flag.Bool("v", false, "print each fault as it is applied")
	flag.Parse()
	if err := run(*seed, *schedules, *duration, *guarantee, *instances, *partitions, *faults, *session, *rate, *settle, *bin, *keep, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "eddychaos:", err)
		os.Exit(2)
	}
}

func kindList() string {
	var ks []string
	for _, k := range chaos.AllKinds {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ",")
}

func run(seed uint64, schedules int, duration time.Duration, guarantee string, instances, partitions int, faults string,
	session time.Duration, rate int, settle time.Duration, bin string, keep, verbose bool) error {
	kinds, err := chaos.ParseKinds(faults)
	if err != nil {
		return err
	}
	var guarantees []string
	switch g := strings.ReplaceAll(guarantee, "_", "-"); g {
	case "both":
		guarantees = []string{"exactly-once", "at-least-once"}
	case "exactly-once", "at-least-once":
		guarantees = []string{g}
	default:
		return fmt.Errorf("--guarantee: want exactly-once, at-least-once or both, got %q", guarantee)
	}
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "eddychaos-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(tmp)
	}
	if bin == "" {
		wd, _ := os.Getwd()
		root, err := chaos.ModuleRoot(wd)
		if err != nil {
			return err
		}
		if bin, err = chaos.BuildDemo(root, tmp); err != nil {
			return err
		}
	}
	var results []*chaos.Result
	for i := range schedules {
		for _, g := range guarantees {
			dir := filepath.Join(tmp, fmt.Sprintf("run-%d-%s", seed+uint64(i), g))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			o := chaos.Options{Seed: seed + uint64(i), Duration: duration, Guarantee: g, Instances: instances,
				Partitions: partitions, Kinds: kinds, Bin: bin, Dir: dir, SessionTimeout: session, QueryRate: rate,
				SettleTimeout: settle}
			if verbose {
				o.Log = os.Stdout
			}
			fmt.Printf("=== schedule %d of %d: seed %d, %s\n", len(results)+1, schedules*len(guarantees), o.Seed, g)
			res, err := chaos.Run(ctx, o)
			if err != nil {
				fmt.Printf("harness error: %v\n", err)
				if res == nil || ctx.Err() != nil {
					return err
				}
				res.Findings = append(res.Findings, "harness: "+err.Error())
			}
			fmt.Print(res.Summary())
			results = append(results, res)
			if !keep {
				os.RemoveAll(dir)
			}
		}
	}
	fmt.Print(total(results))
	if slices.ContainsFunc(results, (*chaos.Result).Failed) {
		os.Exit(1)
	}
	return nil
}

// total sums the figures of every run.
func total(rs []*chaos.Result) string {
	faults := map[chaos.Kind]int{}
	answers, refusals, dishonest := map[string]int{}, map[string]int{}, map[string]int{}
	var lost, dup, exits, wrong, damaged, wiped, watchUpdates, watchMissed int
	var longest time.Duration
	var where string
	var failed []string
	for _, r := range rs {
		for k, n := range r.Faults {
			faults[k] += n
		}
		add(answers, r.Answers)
		add(refusals, r.Refusals)
		add(dishonest, r.Dishonest)
		lost += r.LostLines
		dup += r.DupLines
		exits += r.UnaskedExits
		wrong += r.WrongWords
		damaged += r.Damaged
		wiped += r.Wiped
		watchUpdates += r.WatchUpdates
		watchMissed += r.WatchMissed
		if r.LongestUnavailable > longest {
			longest, where = r.LongestUnavailable, fmt.Sprintf("seed %d %s, %s", r.Seed, r.Guarantee, r.UnavailableWhere)
		}
		if r.Failed() {
			failed = append(failed, fmt.Sprintf("%d (%s)", r.Seed, r.Guarantee))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "=== %d schedules run, %d failed", len(rs), len(failed))
	if len(failed) > 0 {
		fmt.Fprintf(&b, ": seeds %s", strings.Join(failed, ", "))
	}
	var fs []string
	sum := 0
	for _, k := range chaos.AllKinds {
		sum += faults[k]
		fs = append(fs, fmt.Sprintf("%s %d", k, faults[k]))
	}
	fmt.Fprintf(&b, "\nfaults injected: %d (%s)\n", sum, strings.Join(fs, ", "))
	fmt.Fprintf(&b, "answers checked: %s\nrefused: %s\ndishonest answers: %s\n", counts(answers), counts(refusals), counts(dishonest))
	fmt.Fprintf(&b, "acknowledged lines lost %d, duplicated %d; words with a wrong final count %d\n", lost, dup, wrong)
	fmt.Fprintf(&b, "longest a partition had no active answer: %s (%s)\n", longest.Round(time.Millisecond), where)
	fmt.Fprintf(&b, "live watches: %d updates, %d changelog records not delivered (compacted before a resume read them back; the update after each marked truncated)\n", watchUpdates, watchMissed)
	fmt.Fprintf(&b, "stores damaged %d, wiped %d; instances that exited unasked %d\n", damaged, wiped, exits)
	return b.String()
}

func add(dst, src map[string]int) {
	for k, n := range src {
		dst[k] += n
	}
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		total += m[k]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
