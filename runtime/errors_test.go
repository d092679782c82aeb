package runtime

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// failingTopology counts values per key after a processor named "check"
// that returns an error for the value "fail" and panics for "panic";
// failOnce, when set, makes "flaky" fail the first time it is seen only.
func failingTopology(t *testing.T, failOnce *atomic.Bool) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	checked := topology.Process(s, "check", func() topology.Processor[string, string, string, string] {
		return &checkProc{failOnce: failOnce}
	})
	checked.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

type checkProc struct {
	ctx      topology.ProcessorContext[string, string]
	failOnce *atomic.Bool
}

func (p *checkProc) Init(ctx topology.ProcessorContext[string, string]) error {
	p.ctx = ctx
	return nil
}

func (p *checkProc) Process(rec topology.Record[string, string]) error {
	switch rec.Value {
	case "fail":
		return errors.New("boom: the value says fail")
	case "panic":
		var m map[string]int
		m[rec.Key]++ // a nil-map write: a bug, as user code has
	case "flaky":
		if p.failOnce != nil && p.failOnce.CompareAndSwap(false, true) {
			return errors.New("flaky failure")
		}
	}
	return p.ctx.Forward(rec)
}

func (p *checkProc) Close() error { return nil }

// produceValues writes one record per value under key, in order, and
// returns their offsets.
func produceValues(t *testing.T, cl *kgo.Client, key string, values ...string) []int64 {
	t.Helper()
	var offs []int64
	for _, v := range values {
		r, err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Key: []byte(key), Value: []byte(v)}).First()
		require.NoError(t, err)
		offs = append(offs, r.Offset)
	}
	return offs
}

func count(app *App, key string) int64 {
	v, found, _, err := activeGet(app, "counts", []byte(key))
	if err != nil || !found {
		return -1
	}
	n, _ := serde.Int64.Decode(v)
	return n
}

func TestProcessingLogAndContinueWithDeadLetterTopic(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			b, adm := startBroker(t, "in", "dead-letters")
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			require.NoError(t, err)
			defer cl.Close()
			app, err := New(failingTopology(t, nil), Config{
				ApplicationID: "dlq", Brokers: b.Addrs(), StateDir: t.TempDir(), ProcessingGuarantee: g,
				ProcessingErrors: ProcessingLogAndContinue, DeadLetterTopic: "dead-letters", SessionTimeout: 2 * time.Second,
			})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			defer app.Close(context.Background())

			offs := produceValues(t, cl, "k", "a", "fail", "b", "panic", "c")
			waitFor(t, 20*time.Second, "the good records counted", func() bool { return count(app, "k") == 3 })
			require.EqualValues(t, 2, app.Stats().ProcessingErrors)
			require.True(t, app.State().IsRunningOrRebalancing(), "skipping keeps the instance running")

			rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("dead-letters"),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			require.NoError(t, err)
			defer rd.Close()
			var dead []*kgo.Record
			deadline := time.Now().Add(20 * time.Second)
			for len(dead) < 2 && time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { dead = append(dead, r) })
				cancel()
			}
			require.Len(t, dead, 2, "each failed record reaches the dead-letter topic once")
			for i, want := range []struct {
				value, err string
				offset     int64
			}{{"fail", "boom: the value says fail", offs[1]}, {"panic", "panic: assignment to entry in nil map", offs[3]}} {
				r := dead[i]
				require.Equal(t, "k", string(r.Key))
				require.Equal(t, want.value, string(r.Value))
				h := map[string]string{}
				for _, kv := range r.Headers {
					h[kv.Key] = string(kv.Value)
				}
				require.Contains(t, h[DeadLetterHeaderError], want.err)
				require.Equal(t, "in", h[DeadLetterHeaderTopic])
				require.Equal(t, strconv.FormatInt(want.offset, 10), h[DeadLetterHeaderOffset])
				require.Equal(t, "check", h[DeadLetterHeaderNode])
				require.NotEmpty(t, h[DeadLetterHeaderPartition])
				require.Regexp(t, `^0_[01]$`, h[DeadLetterHeaderTask])
			}
			_ = adm
		})
	}
}

// Under the defaults a failing processor stops the instance with an error
// naming the task, node and record, and the record's offset is not
// committed: the instance that takes over meets it again.
func TestProcessingFailShutsDownInstanceWithoutCommittingTheRecord(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"fail", "panic"} {
		t.Run(bad, func(t *testing.T) {
			b, adm := startBroker(t, "in")
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
			require.NoError(t, err)
			defer cl.Close()
			app, err := New(failingTopology(t, nil), Config{ApplicationID: "failing", Brokers: b.Addrs(), StateDir: t.TempDir(), SessionTimeout: 2 * time.Second})
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			offs := produceValues(t, cl, "k", "a", bad, "b")
			select {
			case <-app.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the instance did not stop on the failing record")
			}
			require.Equal(t, StateFailed, app.State())
			var pe *ProcessingError
			require.ErrorAs(t, app.Err(), &pe)
			require.Equal(t, "check", pe.Node)
			require.Equal(t, "in", pe.Topic)
			require.Equal(t, offs[1], pe.Offset)
			if bad == "panic" {
				var panicErr *topology.PanicError
				require.ErrorAs(t, app.Err(), &panicErr)
			}
			committed, err := adm.FetchOffsets(context.Background(), "failing")
			require.NoError(t, err)
			if o, ok := committed.Lookup("in", pe.Partition); ok {
				require.LessOrEqual(t, o.At, pe.Offset, "nothing at or past the failed record is committed")
			}
		})
	}
}

// ReplaceThread gets past a failure that does not come back, and gives up
// on one that does, after MaxThreadReplacements tries.
func TestReplaceThread(t *testing.T) {
	t.Parallel()
	t.Run("transient failure: replaced once, nothing lost", func(t *testing.T) {
		b, _ := startBroker(t, "in")
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
		require.NoError(t, err)
		defer cl.Close()
		var failed atomic.Bool
		app, err := New(failingTopology(t, &failed), Config{ApplicationID: "replace", Brokers: b.Addrs(), StateDir: t.TempDir(),
			SessionTimeout: 2 * time.Second, OnStreamThreadError: ReplaceThread, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		defer app.Close(context.Background())
		produceValues(t, cl, "k", "a", "flaky", "b")
		waitFor(t, 30*time.Second, "every record counted after the replacement", func() bool { return count(app, "k") == 3 })
		require.True(t, failed.Load())
		require.EqualValues(t, 1, app.Stats().ThreadsReplaced)
		require.True(t, app.State().IsRunningOrRebalancing())
	})
	t.Run("poison record: the instance gives up", func(t *testing.T) {
		b, _ := startBroker(t, "in")
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
		require.NoError(t, err)
		defer cl.Close()
		app, err := New(failingTopology(t, nil), Config{ApplicationID: "poison", Brokers: b.Addrs(), StateDir: t.TempDir(),
			SessionTimeout: 2 * time.Second, OnStreamThreadError: ReplaceThread, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		produceValues(t, cl, "k", "a", "panic")
		select {
		case <-app.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("the instance kept replacing its thread (%d replacements)", app.Stats().ThreadsReplaced)
		}
		require.EqualValues(t, MaxThreadReplacements, app.Stats().ThreadsReplaced)
		require.ErrorContains(t, app.Err(), "times in a row on the same record in/")
		var pe *ProcessingError
		require.ErrorAs(t, app.Err(), &pe)
	})
}

// ShutdownApplication stops every instance, not only the one that failed,
// and each says why.
func TestShutdownApplication(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	var apps []*App
	for range 2 {
		app, err := New(failingTopology(t, nil), Config{ApplicationID: "stopall", Brokers: b.Addrs(), StateDir: t.TempDir(),
			SessionTimeout: 2 * time.Second, OnStreamThreadError: ShutdownApplication})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		defer app.Close(context.Background())
		apps = append(apps, app)
	}
	waitFor(t, 20*time.Second, "both instances running tasks", func() bool {
		for _, a := range apps {
			if !a.Ready() || len(a.Tasks()) == 0 {
				return false
			}
		}
		return true
	})
	produceValues(t, cl, "k", "a", "fail")
	for i, app := range apps {
		select {
		case <-app.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("instance %d still runs after the application was asked to shut down", i)
		}
		var se *ApplicationShutdownError
		require.ErrorAs(t, app.Err(), &se, "instance %d", i)
		require.Contains(t, se.Reason, "boom: the value says fail")
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// An assignment the brokers could not store stops the leader's instance
// with the sizes and the limit, instead of a group that never settles.
func TestGroupMetadataTooLargeStopsWithTheSizes(t *testing.T) {
	t.Parallel()
	b, err := broker.Start(broker.Config{Partitions: 2, MessageMaxBytes: 400})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopics(context.Background(), 200, -1, nil, "in")
	require.NoError(t, err)
	app, err := New(countTopology(t), Config{ApplicationID: "big-group", Brokers: b.Addrs(), StateDir: t.TempDir(),
		SessionTimeout: 2 * time.Second, MaxGroupMetadataBytes: 400})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	select {
	case <-app.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the instance kept trying to settle a group whose metadata cannot fit")
	}
	var tooLarge *assignor.GroupMetadataTooLargeError
	require.ErrorAs(t, app.Err(), &tooLarge)
	require.Equal(t, 400, tooLarge.Limit)
	require.Greater(t, tooLarge.Bytes, 400)
	require.Equal(t, 200, tooLarge.Tasks)
	require.ErrorContains(t, app.Err(), "message.max.bytes")
}
