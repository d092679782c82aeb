package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
)

// tasksAnswer is the part of GET /v1/tasks the test reads.
type tasksAnswer struct {
	Instance string `json:"instance"`
	Tasks    []struct {
		Task   string `json:"task"`
		State  string `json:"state"`
		Thread *int   `json:"thread"`
		Stores []struct {
			Store     string `json:"store"`
			Partition int32  `json:"partition"`
			Role      string `json:"role"`
			Position  *int64 `json:"position"`
			Lag       *int64 `json:"lag"`
			Bytes     *int64 `json:"bytes"`
			Keys      *int64 `json:"keys"`
		} `json:"stores"`
	} `json:"tasks"`
}

// TestTasksEndpoint: GET /v1/tasks lists an instance's tasks, actives and
// standbys, each with its state and thread, and its stores with the role,
// position and lag /v1/lags gives them and their size.
func TestTasksEndpoint(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	cfg := Config{ApplicationID: "tk", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond,
		NumStandbys: 1, NumStreamThreads: 1, Endpoint: "a:1"}
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	defer app.Close(context.Background())
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 30*time.Second, "running", func() bool { return app.State() == StateRunning })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 20 {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}).FirstErr())
	}
	waitFor(t, 20*time.Second, "20 keys counted", func() bool { return count(app, "k19") == 1 && count(app, "k0") == 1 })

	tasks := func(srv *iq.Server) tasksAnswer {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/tasks", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var out tasksAnswer
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
		return out
	}
	got := tasks(iq.NewServer(app.Queries(), iq.ServerConfig{}))
	require.Equal(t, "a:1", got.Instance)
	require.Len(t, got.Tasks, 2)
	var keys int64
	for i, tk := range got.Tasks {
		require.Equal(t, fmt.Sprint("0_", i), tk.Task)
		require.Equal(t, "running", tk.State)
		require.NotNil(t, tk.Thread)
		require.Equal(t, 0, *tk.Thread)
		require.Len(t, tk.Stores, 1)
		st := tk.Stores[0]
		require.Equal(t, "counts", st.Store)
		require.Equal(t, int32(i), st.Partition)
		require.Equal(t, "active", st.Role)
		require.NotNil(t, st.Position)
		require.Positive(t, *st.Position)
		require.NotNil(t, st.Lag)
		require.Zero(t, *st.Lag)
		require.NotNil(t, st.Bytes)
		// In the shared layout only what a store holds alone counts,
		// none of it before its keys reach a table of their own.
		require.GreaterOrEqual(t, *st.Bytes, int64(0))
		require.NotNil(t, st.Keys)
		keys += *st.Keys
	}
	require.Equal(t, int64(20), keys)

	// A second instance takes one task and holds the other as a standby.
	cfg2 := cfg
	cfg2.StateDir, cfg2.Endpoint = t.TempDir(), "b:1"
	app2, err := New(countTopology(t), cfg2)
	require.NoError(t, err)
	defer app2.Close(context.Background())
	require.NoError(t, app2.Start(context.Background()))
	srv2 := iq.NewServer(app2.Queries(), iq.ServerConfig{})
	waitFor(t, 30*time.Second, "an active and a standby on the second instance", func() bool {
		got := tasks(srv2)
		roles := map[string]string{}
		for _, tk := range got.Tasks {
			if len(tk.Stores) == 1 && tk.Thread != nil {
				roles[tk.State] = tk.Stores[0].Role
			}
		}
		return len(got.Tasks) == 2 && roles["running"] == "active" && roles["standby"] == "standby"
	})
}
