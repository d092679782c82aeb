package iq

// Range and prefix watches. A range of keys spans every partition of a
// store, since keys are placed by their hash, and each partition's
// changelog orders only its own changes. A range watch is therefore one
// watch per partition, each with the key watch's guarantees (positions
// strictly increase, resumable from any replica at the last position
// delivered), and a range watch's resume point is the position of every
// partition: a RangeResume.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// KeyRange selects the keys a range watch follows, by their serialized
// bytes: those in [From, To), a nil bound being open, or those that begin
// with Prefix. The zero KeyRange is every key.
type KeyRange struct {
	From, To []byte
	Prefix   []byte
}

// Contains reports whether the range holds key.
func (r *KeyRange) Contains(key []byte) bool {
	if len(r.Prefix) > 0 {
		return bytes.HasPrefix(key, r.Prefix)
	}
	return (r.From == nil || bytes.Compare(key, r.From) >= 0) && (r.To == nil || bytes.Compare(key, r.To) < 0)
}

// bounds returns the range as [from, to) for a store's Range.
func (r *KeyRange) bounds() (from, to []byte) {
	if len(r.Prefix) == 0 {
		return r.From, r.To
	}
	return r.Prefix, prefixEnd(r.Prefix)
}

// prefixEnd is the first key after every key beginning with p, nil when
// there is none (p is all 0xff bytes).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (r *KeyRange) validate() error {
	if len(r.Prefix) > 0 && (r.From != nil || r.To != nil) {
		return invalidf("a watch takes a prefix or a range [from, to), not both")
	}
	if r.From != nil && r.To != nil && bytes.Compare(r.From, r.To) >= 0 {
		return invalidf("empty key range: from must sort before to")
	}
	return nil
}

// RangeResume is where a range watch stands: for each partition, the
// position of the last update delivered from it, or the position it
// started after. A range watch started from a RangeResume delivers exactly
// the changes after those positions, on any replicas. FromStart stands for
// a partition nothing was delivered from since the changelog's start;
// FromNow for a partition whose watch has not started yet, which starts at
// its replica's position.
//
// Its text form, the resume token, is versioned: "v1:" and then, in
// partition order, partition=position pairs separated by commas, with
// "now" for FromNow ("v1:0=41,1=-1,2=now").
type RangeResume map[int32]int64

// rangeResumeVersion prefixes the resume tokens this package writes and
// reads.
const rangeResumeVersion = "v1:"

// String returns the resume token.
func (r RangeResume) String() string {
	var b strings.Builder
	b.WriteString(rangeResumeVersion)
	for i, p := range slices.Sorted(maps.Keys(r)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(p), 10))
		b.WriteByte('=')
		if r[p] == FromNow {
			b.WriteString("now")
		} else {
			b.WriteString(strconv.FormatInt(r[p], 10))
		}
	}
	return b.String()
}

// ParseRangeResume reads a resume token (RangeResume.String). Errors match
// ErrInvalidQuery.
func ParseRangeResume(s string) (RangeResume, error) {
	body, ok := strings.CutPrefix(s, rangeResumeVersion)
	if !ok {
		return nil, invalidf("resume token %q: want the form v1:PARTITION=POSITION,...", s)
	}
	r := RangeResume{}
	if body == "" {
		return r, nil
	}
	for pair := range strings.SplitSeq(body, ",") {
		ps, pos, ok := strings.Cut(pair, "=")
		p, err := strconv.ParseInt(ps, 10, 32)
		if !ok || err != nil || p < 0 {
			return nil, invalidf("resume token %q: %q is not PARTITION=POSITION", s, pair)
		}
		if _, dup := r[int32(p)]; dup {
			return nil, invalidf("resume token %q: partition %d twice", s, p)
		}
		if pos == "now" {
			r[int32(p)] = FromNow
			continue
		}
		n, err := strconv.ParseInt(pos, 10, 64)
		if err != nil || n < FromStart {
			return nil, invalidf("resume token %q: position %q of partition %d: want a position, -1 or now", s, pos, p)
		}
		r[int32(p)] = n
	}
	return r, nil
}

// startsOf returns where each of parts starts: its position in resume, or
// from (FromNow or FromStart) when resume is nil. A resume that leaves out
// one of parts is refused, since starting it anywhere could skip or repeat
// changes.
func startsOf(parts []int32, resume RangeResume, from int64) (map[int32]int64, error) {
	out := make(map[int32]int64, len(parts))
	if resume == nil {
		if from != FromNow && from != FromStart {
			return nil, invalidf("a range watch starts now, at the start, or from a resume token: positions are per partition")
		}
		for _, p := range parts {
			out[p] = from
		}
		return out, nil
	}
	for _, p := range parts {
		pos, ok := resume[p]
		if !ok {
			return nil, invalidf("resume token %s names no position for partition %d", resume, p)
		}
		out[p] = pos
	}
	return out, nil
}

// WatchRangeBytes watches the serialized keys rng selects in one partition
// of a key-value store, on its local replica. opts are as for WatchBytes:
// From is a position of this partition's changelog, and Current delivers
// every entry of the range the replica holds first, each an Update with
// Current set and the same position. Coalescing keeps the latest change of
// each key; a reader behind on more keys than its buffer holds ends with
// ErrWatcherTooSlow all the same.
func (q *Querier) WatchRangeBytes(ctx context.Context, store string, partition int32, rng KeyRange, opts WatchOptions) (*Watch, error) {
	if err := rng.validate(); err != nil {
		return nil, err
	}
	wb, _, err := q.watchable(store, KindKeyValue)
	if err != nil {
		return nil, err
	}
	m, err := q.b.Metadata()
	if err != nil {
		return nil, err
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return nil, err
	}
	if partition < 0 || partition >= n {
		return nil, fmt.Errorf("%w: store %q has %d partitions, asked for %d", ErrUnknownPartition, store, n, partition)
	}
	rng = KeyRange{From: bytes.Clone(rng.From), To: bytes.Clone(rng.To), Prefix: bytes.Clone(rng.Prefix)}
	return q.watch(ctx, wb, newWatch(partKey{store, partition}, nil, &rng, opts), opts)
}
