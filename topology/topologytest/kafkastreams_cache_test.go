package topologytest_test

import "testing"

// sessionGap is KStreamSessionWindowAggregateProcessorTest's GAP_MS.
const sessionGap = 5 * 60 * 1000

var ksCachedSessions = []ksScenario{
	{
		// The test's store is cached and flushed once, at the end: the
		// sessions d@[0,0] and a@[300001,300001], created and merged
		// away before the flush, go out neither as results nor as
		// tombstones (CachingSessionStore.putAndMaybeForward reads its
		// underlying store for a tombstone, which holds neither).
		name:    "KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging(ON_WINDOW_UPDATE)",
		build:   sessionAgg("count", sessionGap, 0, false),
		key:     sessionKey,
		value:   longValue,
		commits: true,
		steps: []ksStep{step(out(
			"a@[0,0] 1 @0", "b@[0,0] 1 @0", "c@[0,0] 1 @0", "d@[0,150000] 2 @150000",
			"b@[300001,300001] 1 @300001", "a@[300001,450001] 2 @450001", "c@[450001,450001] 1 @450001"),
			in("a", "1", 0), in("b", "1", 0), in("c", "1", 0), in("d", "1", 0), in("d", "2", sessionGap/2),
			in("a", "2", sessionGap+1), in("b", "2", sessionGap+1), in("a", "3", sessionGap+1+sessionGap/2),
			in("c", "3", sessionGap+1+sessionGap/2))},
	},
	{
		// A session the last flush forwarded is retracted when a later
		// interval merges it away; SessionCacheFlushListener stamps
		// what the cache flushes with the session's end.
		name:    "CachingSessionStore.putAndMaybeForward: a merged-away session that was flushed goes out as a tombstone",
		build:   sessionAgg("count", sessionGap, 0, false),
		key:     sessionKey,
		value:   longValue,
		commits: true,
		steps: []ksStep{
			step(out("a@[0,0] 1 @0"), in("a", "1", 0)),
			step(out("a@[0,0] null @0", "a@[0,1000] 2 @1000"), in("a", "2", 1000)),
			step(out("a@[0,1000] 3 @1000"), in("a", "3", 500)),
		},
	},
}

func TestKafkaStreamsCachedSessions(t *testing.T) {
	for _, sc := range ksCachedSessions {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}
