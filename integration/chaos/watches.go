package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// liveWatch follows one word's count from outside the cluster, from the
// start of its changelog, for the whole run, and keeps every update: through
// iq.Client.Watch (startWatch), which resumes on another replica whenever
// the one serving it dies, pauses, is cut off or gives the partition up, or
// as a routed event stream (startRoutedWatch).
type liveWatch struct {
	name string
	word string

	mu  sync.Mutex
	got []watchUpdate
	err error

	stop   context.CancelFunc
	exited chan struct{}
}

// watchUpdate is one update a liveWatch received.
type watchUpdate struct {
	position, value int64
	host, role      string
	at              time.Time // when the watch received it
	// truncated: the update says changes before it may be missing, the
	// log no longer holding every record it read back.
	truncated bool
}

// startWatches starts watches of a hot and a cold word: through
// iq.Client, each once on the active only and once spread over every
// replica within a lag bound, and each as a routed event stream.
func (r *run) startWatches(ctx context.Context) ([]*liveWatch, error) {
	var addrs []string
	for _, in := range r.c.insts {
		addrs = append(addrs, in.http)
	}
	cl, err := iq.NewClient(addrs, iq.ClientOptions{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	spread := iq.WatchOptions{From: iq.FromStart, Staleness: iq.MaxLag(1000), Prefer: iq.PreferSpread}
	hot, cold := r.prod.vocab[0], r.prod.vocab[20]
	var out []*liveWatch
	for _, w := range []struct {
		name, word string
		opts       iq.WatchOptions
	}{
		{"hot, active", hot, iq.WatchOptions{From: iq.FromStart}},
		{"hot, spread", hot, spread},
		{"cold, active", cold, iq.WatchOptions{From: iq.FromStart}},
		{"cold, spread", cold, spread},
	} {
		lw, err := startWatch(ctx, cl, w.name, w.word, w.opts)
		if err != nil {
			for _, lw := range out {
				lw.close()
			}
			cl.Close()
			return nil, err
		}
		out = append(out, lw)
	}
	for _, w := range []struct{ name, word string }{{"hot, routed", hot}, {"cold, routed", cold}} {
		out = append(out, startRoutedWatch(ctx, w.name, w.word, addrs))
	}
	go func() {
		for _, lw := range out {
			<-lw.exited
		}
		cl.Close()
	}()
	return out, nil
}

// startRoutedWatch follows word as a browser's page does: an event stream
// asked of one instance, which routes it (route=true, the default) to the
// partition's active and relays it, resuming it elsewhere itself; when the
// stream ends or breaks, or sends nothing for 5 s (servers send a comment
// every second), it is asked again of the next instance from the last
// position received. Nothing is dropped on this side: a position sent
// twice is a finding.
func startRoutedWatch(ctx context.Context, name, word string, addrs []string) *liveWatch {
	ctx, cancel := context.WithCancel(ctx)
	lw := &liveWatch{name: name, word: word, stop: cancel, exited: make(chan struct{})}
	hc := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(lw.exited)
		defer hc.CloseIdleConnections()
		from := "start"
		for i := 0; ctx.Err() == nil; i++ {
			u := "http://" + addrs[i%len(addrs)] + "/v1/stores/" + countsStore + "/watch?key=" + url.QueryEscape(word) + "&from=" + from
			lw.stream(ctx, hc, u, &from)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return lw
}

// stream reads one routed watch stream until it ends, breaks or stalls,
// recording its updates and moving from past each.
func (lw *liveWatch) stream(ctx context.Context, hc *http.Client, u string, from *string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	// A stream that sends nothing for 5 s is given up.
	stall := time.AfterFunc(5*time.Second, cancel)
	defer stall.Stop()
	br := bufio.NewReader(resp.Body)
	var event, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		stall.Reset(5 * time.Second)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		case line == "" && event != "":
			if event == "end" {
				return
			}
			if event == "update" {
				var wu struct {
					Value     int64
					Position  int64
					Truncated bool
					ServedBy  struct{ Host, Role string } `json:"served_by"`
				}
				if err := json.Unmarshal([]byte(data), &wu); err != nil {
					lw.mu.Lock()
					lw.err = fmt.Errorf("update %q from %s: %w", data, u, err)
					lw.mu.Unlock()
					return
				}
				lw.mu.Lock()
				lw.got = append(lw.got, watchUpdate{wu.Position, wu.Value, wu.ServedBy.Host, wu.ServedBy.Role, time.Now(), wu.Truncated})
				lw.mu.Unlock()
				*from = strconv.FormatInt(wu.Position, 10)
			}
			event, data = "", ""
		}
	}
}

func startWatch(ctx context.Context, cl *iq.Client, name, word string, opts iq.WatchOptions) (*liveWatch, error) {
	kb, err := serde.String.Encode(word)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	rw, err := cl.Watch(ctx, countsStore, word, kb, opts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s (%q): %w", name, word, err)
	}
	lw := &liveWatch{name: name, word: word, stop: cancel, exited: make(chan struct{})}
	go func() {
		defer close(lw.exited)
		defer rw.Close()
		for {
			u, err := rw.Next(ctx)
			if err == nil {
				var v int64
				if v, err = strconv.ParseInt(string(u.Value), 10, 64); err != nil {
					err = fmt.Errorf("update %q at %d: %w", u.Value, u.Position, err)
				} else {
					lw.mu.Lock()
					lw.got = append(lw.got, watchUpdate{u.Position, v, u.Provenance.Host, u.Provenance.Role.String(), time.Now(), u.Truncated})
					lw.mu.Unlock()
					continue
				}
			}
			if !errors.Is(err, context.Canceled) {
				lw.mu.Lock()
				lw.err = err
				lw.mu.Unlock()
			}
			return
		}
	}()
	return lw, nil
}

func (lw *liveWatch) close() {
	lw.stop()
	<-lw.exited
}

// last returns the last update received, and whether there was one.
func (lw *liveWatch) last() (watchUpdate, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.got) == 0 {
		return watchUpdate{}, false
	}
	return lw.got[len(lw.got)-1], true
}

// checkWatches waits, once the counts are checked, for every watch to
// reach its word's last committed changelog record, then stops them and
// checks what each received against the changelog read committed as the
// run went (committedWatcher): positions strictly increasing (nothing
// twice, nothing back), every update a committed record with its value,
// and the last one the word's final count. Records the watch did not get
// are counted, not found: a watch resumed by reading the changelog back
// misses the records compaction removed meanwhile, as documented.
func (r *run) checkWatches(ctx context.Context, res *Result, watches []*liveWatch) {
	final := func(word string) (changelogRecord, bool) {
		r.watch.mu.Lock()
		defer r.watch.mu.Unlock()
		h := r.watch.hist[word]
		if len(h) == 0 {
			return changelogRecord{}, false
		}
		return h[len(h)-1], true
	}
	// The harness's own reading of the changelog gets to its end first:
	// a watch may not be ahead of the reference it is checked against.
	if ends, err := r.adm.ListEndOffsets(ctx, changelog); err == nil {
		last := make(map[int32]int64)
		ends.Each(func(o kadm.ListedOffset) { last[o.Partition] = o.Offset - 1 })
		for deadline := time.Now().Add(30 * time.Second); !r.watch.readTo(last) && time.Now().Before(deadline) && ctx.Err() == nil; {
			r.sleep(ctx, 100*time.Millisecond)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, lw := range watches {
		for {
			want, ok := final(lw.word)
			got, some := lw.last()
			if (ok && some && got.position >= want.offset) || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			r.sleep(ctx, 100*time.Millisecond)
		}
	}
	for _, lw := range watches {
		lw.close()
	}
	for _, lw := range watches {
		lw.mu.Lock()
		got, werr := lw.got, lw.err
		lw.mu.Unlock()
		r.watch.mu.Lock()
		hist := append([]changelogRecord(nil), r.watch.hist[lw.word]...)
		r.watch.mu.Unlock()
		res.WatchUpdates += len(got)
		roles := map[string]int{}
		for _, u := range got {
			roles[u.role]++
		}
		r.logf("watch %s of %q: %d updates, by role %v", lw.name, lw.word, len(got), roles)
		if werr != nil {
			r.finding("watch %s of %q ended: %v", lw.name, lw.word, werr)
		}
		byOffset := make(map[int64]int64, len(hist))
		for _, h := range hist {
			byOffset[h.offset] = h.value
		}
		for i, u := range got {
			if i > 0 && u.position <= got[i-1].position {
				r.finding("watch %s of %q: update at position %d after one at %d (served by %s, %s)", lw.name, lw.word, u.position, got[i-1].position, r.c.nameOf(u.host), u.role)
				break
			}
			if v, ok := byOffset[u.position]; !ok || v != u.value {
				r.finding("watch %s of %q: update %d at position %d is no committed record of the word (the changelog has %d there: %t) (served by %s, %s)",
					lw.name, lw.word, u.value, u.position, v, ok, r.c.nameOf(u.host), u.role)
				break
			}
		}
		want, ok := final(lw.word)
		last, some := lw.last()
		if !ok || !some || last.position != want.offset {
			r.finding("watch %s of %q stopped short: last update %+v, last committed record at %d (%d) (%t)", lw.name, lw.word, last, want.offset, want.value, ok)
			continue
		}
		delivered := make(map[int64]bool, len(got))
		for _, u := range got {
			delivered[u.position] = true
		}
		// What compaction left of the word's records: one of those the
		// watch did not get was there to read all along.
		present, err := r.changelogOffsets(ctx, want.partition, lw.word)
		if err != nil {
			r.logf("watch %s of %q: changelog not read back (%v): records not delivered counted, not checked", lw.name, lw.word, err)
		}
		var missed []changelogRecord
		for _, h := range hist {
			if h.offset > last.position || delivered[h.offset] {
				continue
			}
			next := -1
			for i, u := range got {
				if u.position > h.offset {
					next = i
					break
				}
			}
			switch {
			case present[h.offset]:
				r.finding("watch %s of %q skipped the committed record at position %d (%d), which compaction left in the changelog", lw.name, lw.word, h.offset, h.value)
			case next < 0 || !got[next].truncated:
				r.finding("watch %s of %q skipped the committed record at position %d (%d), which compaction removed, and the update after it does not say changes may be missing", lw.name, lw.word, h.offset, h.value)
			default:
				missed = append(missed, h)
			}
		}
		if len(missed) > 0 {
			res.WatchMissed += len(missed)
			// When they were read committed, and when and from whom
			// the watch got the update after the first: a resume that
			// read the changelog back after a compaction.
			first := missed[0]
			var after watchUpdate
			for _, u := range got {
				if u.position > first.offset {
					after = u
					break
				}
			}
			r.logf("watch %s of %q did not get %d records, compacted away by the end, the first at %d (committed by %s), the last at %d (by %s); the next update it got, at %d, came at %s from %s (%s)",
				lw.name, lw.word, len(missed), first.offset, first.at.Format("15:04:05.000"), missed[len(missed)-1].offset, missed[len(missed)-1].at.Format("15:04:05.000"),
				after.position, after.at.Format("15:04:05.000"), r.c.nameOf(after.host), after.role)
		}
	}
}

// changelogOffsets reads a partition of the counts changelog, read
// committed, from its start to its end, and returns the offsets of word's
// records.
func (r *run) changelogOffsets(ctx context.Context, partition int32, word string) (map[int64]bool, error) {
	ends, err := r.adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		return nil, err
	}
	end, ok := ends.Lookup(changelog, partition)
	if !ok || end.Err != nil {
		return nil, fmt.Errorf("end offset of %s[%d]: %v", changelog, partition, end.Err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelog: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := make(map[int64]bool)
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s[%d] to %d: %w", changelog, partition, end.Offset, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			next = max(next, rec.Offset+1)
			if !rec.Attrs.IsControl() && string(rec.Key) == word {
				out[rec.Offset] = true
			}
		})
	}
	return out, nil
}
