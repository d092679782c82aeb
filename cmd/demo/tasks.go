package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
)

// tasksSynopsis is the flags of `demo tasks`.
const tasksSynopsis = "--http HOST:PORT [--all] [--json] [--timeout D] [--query-tls-ca FILE] [--query-token-file FILE]"

// tasksAnswer is an instance's GET /v1/tasks (see iq's TaskBackend).
type tasksAnswer struct {
	Instance string     `json:"instance"`
	Tasks    []taskView `json:"tasks"`
}

type taskView struct {
	Task   string      `json:"task"`
	State  string      `json:"state"`
	Thread *int        `json:"thread"`
	Stores []storeView `json:"stores"`
}

// storeView is a store partition of a task: its /v1/lags figures and size.
type storeView struct {
	replicaLag
	Bytes *int64 `json:"bytes"`
	Keys  *int64 `json:"keys"`
}

// UnmarshalJSON reads the sizes beside the lag figures, which replicaLag's
// own UnmarshalJSON would otherwise take the whole object for.
func (s *storeView) UnmarshalJSON(b []byte) error {
	var size struct {
		Bytes *int64 `json:"bytes"`
		Keys  *int64 `json:"keys"`
	}
	if err := json.Unmarshal(b, &size); err != nil {
		return err
	}
	s.Bytes, s.Keys = size.Bytes, size.Keys
	return json.Unmarshal(b, &s.replicaLag)
}

// instanceTasks is one instance's answer, or why there is none.
type instanceTasks struct {
	host   string
	answer json.RawMessage
	tasks  tasksAnswer
	err    error
}

// runTasks is `demo tasks`: the tasks one instance holds, or with --all
// every instance in its routing table, with each task's stores: role,
// state, position, lag, size and thread.
func runTasks(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("tasks", tasksSynopsis, s)
	addr := fs.String("http", "", "`HOST:PORT` of an instance's query server (required)")
	all := fs.Bool("all", false, "list every instance in that instance's routing table, not just that one")
	asJSON := fs.Bool("json", false, "print the instances' /v1/tasks answers unchanged, one a line")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for each instance")
	qsec := addQueryClientFlags(fs)
	a, hc, err := instanceClient(fs, args, addr, qsec, timeout)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()

	hosts := []string{a}
	if *all {
		var md metadataAnswer
		mctx, cancel := context.WithTimeout(ctx, *timeout)
		err := getJSON(mctx, hc, a, "/v1/metadata", &md)
		cancel()
		if err != nil {
			return fmt.Errorf("asking %s for the routing table: %w", a, explainFetch(err))
		}
		hosts = hosts[:0]
		for _, in := range md.Instances {
			hosts = append(hosts, in.Host)
		}
		slices.Sort(hosts)
	}
	answers := make([]instanceTasks, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		answers[i].host = h
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			if err := getJSON(hctx, hc, h, "/v1/tasks", &answers[i].answer); err != nil {
				answers[i].err = explainFetch(err)
				return
			}
			answers[i].err = json.Unmarshal(answers[i].answer, &answers[i].tasks)
		})
	}
	wg.Wait()
	if *asJSON {
		for _, in := range answers {
			var line bytes.Buffer
			if in.err == nil && json.Compact(&line, in.answer) == nil {
				fmt.Fprintf(s.out, "%s\n", line.Bytes())
			}
		}
	} else {
		printTasks(s.out, answers)
	}
	// One instance asked, and it did not answer: the command failed.
	if !*all && answers[0].err != nil {
		return answers[0].err
	}
	return nil
}

// printTasks writes one line per store partition of every task, grouped
// by instance; an instance that did not answer gets a line saying why.
func printTasks(w io.Writer, answers []instanceTasks) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tTASK\tTHREAD\tSTATE\tSTORE\tROLE\tPOSITION\tLAG\tSIZE\tKEYS")
	for _, in := range answers {
		if in.err != nil {
			fmt.Fprintf(tw, "%s\t%s\n", in.host, in.err)
			continue
		}
		if len(in.tasks.Tasks) == 0 {
			fmt.Fprintf(tw, "%s\t(no tasks)\n", in.host)
		}
		for _, t := range in.tasks.Tasks {
			thread := "-"
			if t.Thread != nil {
				thread = strconv.Itoa(*t.Thread)
			}
			slices.SortFunc(t.Stores, func(a, b storeView) int { return cmp.Compare(a.Store, b.Store) })
			for _, st := range t.Stores {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%d\t%s\t%s\t%s\t%s\t%s\n", in.host, t.Task, thread, t.State,
					st.Store, st.Partition, st.Role, known(st.Position), storeLag(st.replicaLag), bytesText(st.Bytes), knownPtr(st.Keys))
			}
		}
	}
	tw.Flush()
}

// known renders a figure that is -1 when unknown.
func known(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n, 10)
}

func knownPtr(n *int64) string {
	if n == nil {
		return "?"
	}
	return known(*n)
}

// storeLag is a replica's lag, or why it has none to give.
func storeLag(l replicaLag) string {
	if l.Rebuilding {
		return "rebuilding"
	}
	return known(l.Lag)
}

// bytesText renders a size in bytes in binary units.
func bytesText(n *int64) string {
	switch {
	case n == nil || *n < 0:
		return "?"
	case *n < 1<<10:
		return fmt.Sprintf("%d B", *n)
	case *n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(*n)/(1<<10))
	case *n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(*n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(*n)/(1<<30))
}
