package broker

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func start(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func newClient(t *testing.T, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(b.Addrs()...),
		kgo.AllowAutoTopicCreation(),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// consumeN reads topic from the start until it has n records or ctx ends.
func consumeN(ctx context.Context, t *testing.T, b *Broker, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d records", len(out), n)
		fs.EachError(func(topic string, p int32, err error) {
			require.NoError(t, err, "fetch %s/%d", topic, p)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

func TestProduceConsume(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{Partitions: 3})
	addrs := b.Addrs()
	require.Len(t, addrs, 1)
	_, port, err := net.SplitHostPort(addrs[0])
	require.NoError(t, err)
	require.NotEqual(t, "0", port)

	cl := newClient(t, b)
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("hello")})
	require.NoError(t, res.FirstErr())

	got := consumeN(ctx, t, b, "auto", 1)
	require.Equal(t, "hello", string(got[0].Value))

	details, err := kadm.NewClient(cl).ListTopics(ctx, "auto")
	require.NoError(t, err)
	require.Len(t, details["auto"].Partitions, 3, "auto-created topics take Config.Partitions")
}

func TestDefaultPartitions(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	adm := kadm.NewClient(newClient(t, b))
	_, err := adm.CreateTopic(ctx, -1, -1, nil, "dflt")
	require.NoError(t, err)
	details, err := adm.ListTopics(ctx, "dflt")
	require.NoError(t, err)
	require.Len(t, details["dflt"].Partitions, int(DefaultPartitions))
}

func TestPersistenceAcrossRestart(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()

	b, err := Start(Config{DataDir: dir, Partitions: 2})
	require.NoError(t, err)
	cl := newClient(t, b)
	res := cl.ProduceSync(ctx,
		&kgo.Record{Topic: "kept", Key: []byte("k"), Value: []byte("v1")},
		&kgo.Record{Topic: "kept", Key: []byte("k"), Value: []byte("v2")},
	)
	require.NoError(t, res.FirstErr())
	p := res[0].Record.Partition
	adm := kadm.NewClient(cl)
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: "kept", Partition: p, At: 1, LeaderEpoch: -1})
	_, err = adm.CommitOffsets(ctx, "g", offsets)
	require.NoError(t, err)
	cl.Close()
	b.Close()

	// A fresh port: the persisted state must not depend on the address.
	b = start(t, Config{DataDir: dir, Partitions: 2})
	got := consumeN(ctx, t, b, "kept", 2)
	require.Equal(t, []string{"v1", "v2"}, []string{string(got[0].Value), string(got[1].Value)})

	adm = kadm.NewClient(newClient(t, b))
	fetched, err := adm.FetchOffsets(ctx, "g")
	require.NoError(t, err)
	o, ok := fetched.Lookup("kept", p)
	require.True(t, ok, "committed offset survives a restart")
	require.Equal(t, int64(1), o.At)

	details, err := adm.ListTopics(ctx, "kept")
	require.NoError(t, err)
	require.Len(t, details["kept"].Partitions, 2)
}

// TestCloseLeavesNoGoroutines runs the whole life of a broker and its
// clients and checks the goroutine count returns to where it started.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	ctx := testCtx(t)
	for _, dataDir := range []string{"", t.TempDir()} {
		before := runtime.NumGoroutine()

		b, err := Start(Config{DataDir: dataDir})
		require.NoError(t, err)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation(),
			kgo.ConsumeTopics("leak"), kgo.ConsumerGroup("leak-group"))
		require.NoError(t, err)
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "leak", Value: []byte("x")}).FirstErr())
		for n := 0; n < 1; {
			fs := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			n += len(fs.Records())
		}
		cl.Close()
		b.Close()
		b.Close() // idempotent

		waitGoroutines(t, before)
	}
}

// waitGoroutines waits until at most want goroutines run, failing with a
// dump of the survivors if that does not happen soon.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines remain, want at most %d:\n%s", runtime.NumGoroutine(), want, buf)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling interval, not a wait for an event
	}
}

func TestGroupSessionTimeoutBounds(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		session time.Duration
		invalid bool
	}{
		{"short timeout accepted by default", Config{}, time.Second, false},
		{"below default minimum", Config{}, 100 * time.Millisecond, true},
		{"custom minimum rejects short", Config{GroupMinSessionTimeout: 6 * time.Second}, time.Second, true},
		{"custom maximum rejects long", Config{GroupMaxSessionTimeout: 10 * time.Second}, time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := start(t, tt.cfg)
			cl := newClient(t, b)
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group = "sessions"
			req.SessionTimeoutMillis = int32(tt.session.Milliseconds())
			req.RebalanceTimeoutMillis = 5000
			req.ProtocolType = "consumer"
			proto := kmsg.NewJoinGroupRequestProtocol()
			proto.Name = "range"
			req.Protocols = append(req.Protocols, proto)
			resp, err := req.RequestWith(ctx, cl)
			require.NoError(t, err)
			err = kerr.ErrorForCode(resp.ErrorCode)
			if tt.invalid {
				require.ErrorIs(t, err, kerr.InvalidSessionTimeout)
			} else if err != nil {
				// A first join without a member ID is told to retry with
				// one; anything else means the timeout was refused.
				require.ErrorIs(t, err, kerr.MemberIDRequired)
			}
		})
	}
}

func TestGroupWithShortSessionTimeout(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	cl := newClient(t, b)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "short", Value: []byte("x")}).FirstErr())

	consumer := newClient(t, b, kgo.ConsumeTopics("short"), kgo.ConsumerGroup("short-group"),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := consumer.PollFetches(ctx)
	require.NoError(t, ctx.Err())
	require.NoError(t, fs.Err0())
	require.Len(t, fs.Records(), 1)
}

func TestCompactedTopic(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	cl := newClient(t, b)
	adm := kadm.NewClient(cl)
	compact := "compact"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "log")
	require.NoError(t, err)
	require.NoError(t, resp.Err)

	cfgs, err := adm.DescribeTopicConfigs(ctx, "log")
	require.NoError(t, err)
	rc, err := cfgs.On("log", nil)
	require.NoError(t, err)
	var policy string
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			policy = c.MaybeValue()
		}
	}
	require.Equal(t, "compact", policy)

	// One record per produce call, so each is its own batch: kfake never
	// compacts a partition's last batch.
	for _, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"a", "3"}, {"b", "2"}, {"c", "1"}} {
		r := &kgo.Record{Topic: "log", Key: []byte(kv[0]), Value: []byte(kv[1])}
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}
	b.Compact()

	got := consumeN(ctx, t, b, "log", 3)
	var kvs []string
	for _, r := range got {
		kvs = append(kvs, string(r.Key)+"="+string(r.Value))
	}
	require.Equal(t, []string{"a=3", "b=2", "c=1"}, kvs)
	require.Equal(t, int64(3), got[0].Offset, "compaction keeps offsets")
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()

	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad listen address", Config{Listen: "nonsense"}, "listen address"},
		{"port in use", Config{Listen: busy.Addr().String()}, "address already in use"},
		{"negative partitions", Config{Partitions: -1}, "partitions"},
		{"min above max", Config{GroupMinSessionTimeout: time.Minute, GroupMaxSessionTimeout: time.Second}, "exceeds max"},
		{"negative compaction interval", Config{CompactionInterval: -time.Second}, "compaction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Start(tt.cfg)
			if b != nil {
				b.Close()
			}
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tt.want), "error %q should mention %q", err, tt.want)
		})
	}
}

func TestCompactAfterCloseReturns(t *testing.T) {
	b, err := Start(Config{})
	require.NoError(t, err)
	b.Close()
	done := make(chan struct{})
	go func() { b.Compact(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal(errors.New("Compact after Close blocked"))
	}
}
