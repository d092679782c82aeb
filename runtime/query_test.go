package runtime

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A table's answers over HTTP carry the timestamp its store keeps beside
// each value: the time of the record that wrote it, as Kafka Streams'
// timestamped key-value store keeps it.
func TestKeyValueAnswersCarryTimestamps(t *testing.T) {
	brk, _ := startBroker(t, "in")
	b := topology.NewBuilder()
	topology.Table(b, "in", serde.String, serde.String, "tbl")
	topo, err := b.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "kvts", Brokers: brk.Addrs(), StateDir: t.TempDir()})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, app.Start(ctx))
	defer app.Close(ctx)
	srv := httptest.NewServer(iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("tbl", serde.String, serde.String, nil)))
	defer srv.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for _, r := range []*kgo.Record{
		{Key: []byte("k"), Value: []byte("v1"), Timestamp: time.UnixMilli(1_700_000_000_100)},
		{Key: []byte("k"), Value: []byte("v2"), Timestamp: time.UnixMilli(1_700_000_000_123)},
	} {
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}

	var answer struct {
		Value       string `json:"value"`
		TimestampMs int64  `json:"timestamp_ms"`
	}
	waitFor(t, 60*time.Second, "the table's latest value answered over HTTP", func() bool {
		resp, err := http.Get(srv.URL + "/v1/stores/tbl/keys/k")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(body, &answer) == nil && answer.Value == "v2"
	})
	require.EqualValues(t, 1_700_000_000_123, answer.TimestampMs)

	res, err := iq.Get(ctx, iq.NewQuerier(app.Queries()), "tbl", "k", serde.String, serde.String)
	require.NoError(t, err)
	require.Equal(t, "v2", res.Value)
	require.EqualValues(t, 1_700_000_000_123, res.Timestamp)
}
