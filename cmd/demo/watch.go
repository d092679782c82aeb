package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// watchSynopsis is the flags of `demo watch`.
const watchSynopsis = "--http HOST:PORT WORD [--staleness active|any|lag:N|age:D] [--spread] [--query-tls-ca FILE] [--query-token-file FILE]"

// runWatch is `demo watch`: a word's count as it changes, one line per
// committed change, each naming the replica that served it. The watch
// starts with the current count and goes on through failures, resuming on
// another replica from the last count shown, until interrupted.
func runWatch(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("watch", watchSynopsis, s)
	addr := fs.String("http", "", "`HOST:PORT` of any instance's query server (required); the others are found from it")
	staleness := fs.String("staleness", "active", "which replicas may serve: active, any, lag:N (records) or age:D (since caught up)")
	spread := fs.Bool("spread", false, "start on any replica within the bound, at random, rather than the active first")
	qsec := addQueryClientFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf(fs, "want exactly one WORD, got %d arguments", len(pos))
	}
	ws := words(pos[0])
	if len(ws) != 1 {
		return usageErrorf(fs, "%q is not one word as the demo counts them (runs of letters and digits, lowercased)", pos[0])
	}
	word := ws[0]
	bound, err := iq.ParseStaleness(*staleness)
	if err != nil {
		return usageErrorf(fs, "--staleness: %v", err)
	}
	a, err := normalizeHTTP(*addr)
	if err != nil {
		return usageErrorf(fs, "--http: %v", err)
	}
	tlsCfg, token, err := qsec.client(false)
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	if tlsCfg != nil {
		a = "https://" + a
	}
	cl, err := iq.NewClient([]string{a}, iq.ClientOptions{TLS: tlsCfg, Token: token})
	if err != nil {
		return err
	}
	defer cl.Close()
	kb, err := serde.String.Encode(word)
	if err != nil {
		return err
	}
	opts := iq.WatchOptions{From: iq.FromNow, Current: true, Staleness: bound}
	if *spread {
		opts.Prefer = iq.PreferSpread
	}
	w, err := cl.Watch(ctx, countsStore, word, kb, opts)
	if err != nil {
		return fmt.Errorf("watch %q: %w", word, err)
	}
	defer w.Close()
	fmt.Fprintf(s.out, "watching %q (ctrl-c to stop)\n", word)
	for {
		u, err := w.Next(ctx)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch %q: %w", word, err)
		}
		fmt.Fprintln(s.out, describeUpdate(word, u))
	}
}

// describeUpdate is one line of `demo watch`.
func describeUpdate(word string, u iq.Update) string {
	count := string(u.Value)
	if u.Deleted {
		count = "(deleted)"
	}
	what := "count"
	switch {
	case u.Current:
		what = "current count"
	case u.Coalesced:
		what = "count (earlier changes skipped)"
	}
	lag := "lag unknown"
	if u.Provenance.Lag >= 0 {
		lag = fmt.Sprintf("lag %d", u.Provenance.Lag)
	}
	return fmt.Sprintf("%s  %s %s %s  (position %d, served by %s: %s replica, %s)",
		time.Now().Format("15:04:05.000"), word, what, count, u.Position, u.Provenance.Host, u.Provenance.Role, lag)
}
