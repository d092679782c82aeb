package runtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// heldPart is a partInput of topic holding records at offsets from first,
// stamped in ms from idleT0, with the given end (-1 unknown).
func heldPart(topic string, first, end int64, stamps ...int) *partInput {
	p := &partInput{topic: topic, next: -1, end: -1}
	if len(stamps) == 0 {
		if end >= 0 {
			p.next, p.end = first, end
		}
		return p
	}
	var recs []*kgo.Record
	for i, s := range stamps {
		recs = append(recs, &kgo.Record{Topic: topic, Offset: first + int64(i), Timestamp: idleT0.Add(time.Duration(s) * time.Millisecond)})
	}
	p.add(recs, end)
	return p
}

// TestTaskInputReadyFollowsKafkaStreams checks readyToProcess' rules: an
// empty partition of unknown or positive lag holds the task whatever the
// idle time; one at its end is waited for the idle time, then enforced; a
// task holding nothing is never ready.
func TestTaskInputReadyFollowsKafkaStreams(t *testing.T) {
	now := idleT0
	for _, c := range []struct {
		name              string
		b                 *partInput
		idle              time.Duration
		at                time.Duration
		ready, enforced   bool
		deadlineRemaining bool
	}{
		{name: "both hold records", b: heldPart("b", 0, 5, 1), ready: true},
		{name: "empty, lag unknown", b: heldPart("b", 0, -1), idle: time.Hour},
		{name: "empty, lag unknown, no idle", b: heldPart("b", 0, -1)},
		{name: "empty, lag positive", b: heldPart("b", 3, 7)},
		{name: "empty, caught up, no idle", b: heldPart("b", 7, 7), ready: true, enforced: true},
		{name: "empty, caught up, idle not over", b: heldPart("b", 7, 7), idle: time.Second, at: 999 * time.Millisecond, deadlineRemaining: true},
		{name: "empty, caught up, idle over", b: heldPart("b", 7, 7), idle: time.Second, at: time.Second, ready: true, enforced: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &taskInput{parts: []*partInput{heldPart("a", 0, 10, 5), c.b}}
			// The first check starts the idle wait; the second is at.
			in.ready(now, c.idle)
			ready, enforced := in.ready(now.Add(c.at), c.idle)
			require.Equal(t, c.ready, ready, "ready")
			require.Equal(t, c.enforced, enforced, "enforced")
			require.Equal(t, c.deadlineRemaining, !c.b.idleUntil.IsZero() && now.Add(c.at).Before(c.b.idleUntil))
		})
	}
	empty := &taskInput{parts: []*partInput{heldPart("a", 0, 0), heldPart("b", 0, 0)}}
	ready, _ := empty.ready(now, 0)
	require.False(t, ready, "a task holding nothing")
}

// TestTaskInputRunTakesEarliestHead: runs follow timestampMerge's order
// across what partitions hold, ties to the earlier source.
func TestTaskInputRunTakesEarliestHead(t *testing.T) {
	in := &taskInput{parts: []*partInput{heldPart("a", 0, 10, 1, 2, 5, 5, 9), heldPart("b", 0, 10, 3, 5, 6)}}
	var got []string
	for {
		p, n := in.run()
		if p == nil {
			break
		}
		require.Positive(t, n)
		for _, r := range p.recs[p.head : p.head+n] {
			got = append(got, fmt.Sprintf("%s@%d", r.Topic, r.Offset))
		}
		p.take(n)
	}
	require.Equal(t, []string{"a@0", "a@1", "b@0", "a@2", "a@3", "b@1", "b@2", "a@4"}, got)
}

// TestPartInputAddDropsRewoundRecords: records at offsets already received
// mean the consumer went back; what the partition holds from there on is
// dropped rather than held twice.
func TestPartInputAddDropsRewoundRecords(t *testing.T) {
	p := heldPart("a", 10, 20, 1, 2, 3, 4)
	p.take(1)
	p.add([]*kgo.Record{{Topic: "a", Offset: 12}, {Topic: "a", Offset: 13}, {Topic: "a", Offset: 14}}, 20)
	var offs []int64
	for _, r := range p.recs[p.head:] {
		offs = append(offs, r.Offset)
	}
	require.Equal(t, []int64{11, 12, 13, 14}, offs)
	require.EqualValues(t, 15, p.next)
	lag, known := p.lag()
	require.True(t, known)
	require.EqualValues(t, 5, lag)
}
