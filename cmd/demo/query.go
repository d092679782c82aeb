package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/eddystreams/eddy/iq"
)

// querySynopsis is the flags of `demo query`.
const querySynopsis = "--http HOST:PORT WORD [--windows [--last N]] [--staleness active|any|lag:N|age:D] [--json] [--query-tls-ca FILE] [--query-token-file FILE]"

// servedBy is the provenance of an answer.
type servedBy struct {
	Host     string `json:"host"`
	Role     string `json:"role"`
	Position *int64 `json:"position"` // null while rebuilding
	Lag      *int64 `json:"lag"`      // null when unknown
}

// describe says which replica of which store partition answered.
func (sb *servedBy) describe(store string, partition int32) string {
	at, lag := "rebuilding", "lag unknown"
	if sb.Position != nil {
		at = fmt.Sprintf("at position %d", *sb.Position)
	}
	if sb.Lag != nil {
		lag = fmt.Sprintf("lag %d", *sb.Lag)
	}
	return fmt.Sprintf("served by %s: %s replica of %s partition %d %s, %s", sb.Host, sb.Role, store, partition, at, lag)
}

// keyAnswer is the 200 and 404 answer of a key lookup.
type keyAnswer struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Partition int32           `json:"partition"`
	ServedBy  *servedBy       `json:"served_by"`
}

// windowsAnswer is the 200 and 404 answer of a key's windows.
type windowsAnswer struct {
	Key       string    `json:"key"`
	Partition int32     `json:"partition"`
	ServedBy  *servedBy `json:"served_by"`
	Windows   []struct {
		Start string          `json:"start"`
		End   string          `json:"end"`
		Value json.RawMessage `json:"value"`
	} `json:"windows"`
}

// runQuery is `demo query`: one word's count, asked of one instance, which
// routes the lookup to a replica that may answer within the staleness
// bound. It prints the count and the replica that served it. A word never
// counted is an answer (exit 0); a refusal is an error. With --windows it
// prints the word's counts of its last minutes instead, from the window
// store counts-per-minute.
func runQuery(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("query", querySynopsis, s)
	addr := fs.String("http", "", "`HOST:PORT` of any instance's query server (required)")
	staleness := fs.String("staleness", "active", "how stale an answer to accept: active, any, lag:N (records) or age:D (since caught up)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up when no answer came within this long")
	asJSON := fs.Bool("json", false, "print the instance's JSON answer unchanged")
	perMinute := fs.Bool("windows", false, "print the word's counts per minute (the last --last minutes kept) instead of its total")
	last := fs.Int("last", 10, "with --windows, how many of the latest minutes to print")
	qsec := addQueryClientFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	tlsCfg, token, err := qsec.client(strings.HasPrefix(strings.TrimSpace(*addr), "https://"))
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	a, err := normalizeHTTP(*addr)
	if err != nil {
		return usageErrorf(fs, "--http: %v", err)
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
	if *timeout <= 0 {
		return usageErrorf(fs, "--timeout must be positive")
	}
	if *last <= 0 {
		return usageErrorf(fs, "--last must be positive")
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// The word goes as a parameter: as a path segment, words such as ".."
	// would not survive.
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	q := url.Values{"key": {word}, "route": {"true"}, "staleness": {bound.String()}}.Encode()
	u := scheme + "://" + a + "/v1/stores/" + countsStore + "/keys?" + q
	if *perMinute {
		u = scheme + "://" + a + "/v1/stores/" + minuteStore + "/windows?" + q
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("query %q: no answer from %s within %s", word, a, *timeout)
		}
		return fmt.Errorf("query %q: cannot reach the instance at %s: %w", word, a, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("query %q: reading the answer of %s: %w", word, a, err)
	}
	if *asJSON {
		s.out.Write(body)
	}

	found := resp.StatusCode == http.StatusOK
	if *perMinute {
		var wa windowsAnswer
		if (found || resp.StatusCode == http.StatusNotFound) && json.Unmarshal(body, &wa) == nil && wa.ServedBy != nil {
			if *asJSON {
				return nil
			}
			ws := wa.Windows
			if !found || len(ws) == 0 {
				fmt.Fprintf(s.out, "%s: no counts in the minutes %s keeps (partition %d)\n", word, minuteStore, wa.Partition)
			} else {
				fmt.Fprintf(s.out, "%s per minute:\n", word)
				for _, w := range ws[max(len(ws)-*last, 0):] {
					fmt.Fprintf(s.out, "  %s - %s  %s\n", w.Start, w.End, w.Value)
				}
			}
			fmt.Fprintln(s.out, wa.ServedBy.describe(minuteStore, wa.Partition))
			return nil
		}
		return refusal(a, word, bound, resp.StatusCode, body)
	}
	var ka keyAnswer
	if (found || resp.StatusCode == http.StatusNotFound) && json.Unmarshal(body, &ka) == nil && ka.ServedBy != nil {
		if *asJSON {
			return nil
		}
		if found {
			fmt.Fprintf(s.out, "%s: %s\n", word, ka.Value)
		} else {
			fmt.Fprintf(s.out, "%s: not counted (no such word in %s partition %d)\n", word, countsStore, ka.Partition)
		}
		fmt.Fprintln(s.out, ka.ServedBy.describe(countsStore, ka.Partition))
		return nil
	}
	return refusal(a, word, bound, resp.StatusCode, body)
}

// refusal explains an answer other than a count: what the instance said,
// and what to try next.
func refusal(addr, word string, bound iq.Staleness, status int, body []byte) error {
	var ea errorAnswer
	if json.Unmarshal(body, &ea) != nil || (ea.Error == "" && ea.Reason == "") {
		return fmt.Errorf("query %q: %s answered HTTP %d %s, which is not an answer of the query API (is %s an instance's --http address?)",
			word, addr, status, http.StatusText(status), addr)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "query %q: ", word)
	switch ea.Reason {
	case "not_available":
		fmt.Fprintf(&b, "no replica could answer within staleness=%s (HTTP %d)", bound, status)
		for _, t := range ea.Tried {
			fmt.Fprintf(&b, "\n  tried %s: %s: %s", t.Host, t.Reason, t.Error)
		}
		if len(ea.Tried) == 0 {
			fmt.Fprintf(&b, "\n  %s", ea.Error)
		}
		if bound.AllowsNonActive() {
			b.WriteString("\n  retry shortly: the cluster is probably rebalancing")
		} else {
			b.WriteString("\n  retry shortly, or accept answers from standbys with --staleness lag:10000 (or any)")
		}
	case "not_started":
		fmt.Fprintf(&b, "the instance at %s has not received its first assignment yet; retry in a few seconds", addr)
	case "shutting_down", "not_running":
		fmt.Fprintf(&b, "the instance at %s is shutting down; ask another instance", addr)
	default:
		fmt.Fprintf(&b, "%s refused it with HTTP %d %s (%s): %s", addr, status, http.StatusText(status), ea.Reason, ea.Error)
	}
	return errors.New(b.String())
}

// normalizeHTTP checks an --http address, accepting host:port or
// http://host:port.
func normalizeHTTP(a string) (string, error) {
	a = strings.TrimSpace(a)
	a = strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://")
	a = strings.TrimSuffix(a, "/")
	if a == "" {
		return "", errors.New("an instance's HOST:PORT is required")
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("want HOST:PORT, got %q", a)
	}
	return a, nil
}

// parseInterspersed is parseFlags for commands that take positional
// arguments: flags may come before, between or after them, and "--" ends
// the flags (for a WORD that starts with a dash). It returns the
// positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, resolveFlags(fs)
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), resolveFlags(fs)
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
