package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// runInfo describes the machine and the code a benchmark run measured, as
// the report states them beside the figures.
type runInfo struct {
	start    time.Time
	took     time.Duration
	goVer    string
	platform string
	cpus     int
	procs    int
	load     string // /proc/loadavg's three averages at the start, "unknown" elsewhere
	commit   string // the checkout's HEAD, "+dirty" when it has changes
	args     []string
}

// newRunInfo reads what it can of the machine and the checkout at the
// start of a run.
func newRunInfo(args []string) runInfo {
	ri := runInfo{start: time.Now(), goVer: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH,
		cpus: runtime.NumCPU(), procs: runtime.GOMAXPROCS(0), load: "unknown", commit: "unknown", args: args}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			ri.load = strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		ri.commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			ri.commit += "+dirty"
		}
	}
	return ri
}

// writeReport writes the run's figures as the Markdown page BENCHMARKS.md
// is: what ran where, then one table. Only this run's figures: earlier runs
// live in git's history of the file.
func writeReport(w io.Writer, ri runInfo, rows []row, failed []error) error {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `go run ./cmd/eddybench --report BENCHMARKS.md` from its latest run. What each\n")
	b.WriteString("benchmark times, and against which baseline, is in `cmd/eddybench`'s package documentation\n")
	b.WriteString("(`go doc ./cmd/eddybench`). Each side of a comparison ran once as a dropped warm-up, then\n")
	b.WriteString("alternately with the other side; its figure is the median of those runs and its spread their\n")
	b.WriteString("range. A ratio is Eddy's median over its baseline's median, both measured in this run.\n\n")
	fmt.Fprintf(&b, "| run | |\n|---|---|\n")
	fmt.Fprintf(&b, "| started | %s |\n", ri.start.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "| took | %s |\n", ri.took.Round(time.Second))
	fmt.Fprintf(&b, "| commit | `%s` |\n", ri.commit)
	fmt.Fprintf(&b, "| Go | %s %s |\n", ri.goVer, ri.platform)
	fmt.Fprintf(&b, "| CPUs | %d (GOMAXPROCS %d) |\n", ri.cpus, ri.procs)
	fmt.Fprintf(&b, "| load average at start | %s |\n", ri.load)
	fmt.Fprintf(&b, "| arguments | `%s` |\n\n", strings.Join(append([]string{"eddybench"}, ri.args...), " "))
	b.WriteString("| benchmark | unit | eddy (median) | eddy spread | baseline (median) | baseline spread | ratio of medians | target | verdict |\n")
	b.WriteString("|---|---|--:|---|--:|---|--:|---|---|\n")
	for _, r := range rows {
		base := "-"
		if r.base > 0 {
			base = fmtNum(r.base)
		}
		es, bs := r.spreads()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", mdCell(r.name), r.unit, fmtNum(r.eddy), es, base, bs, r.ratio(), mdCell(r.target), r.verdict())
	}
	if len(failed) > 0 {
		b.WriteString("\nBenchmarks that failed in this run:\n\n")
		for _, err := range failed {
			fmt.Fprintf(&b, "- %s\n", mdCell(err.Error()))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell keeps a table cell on one line and its pipes literal.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
