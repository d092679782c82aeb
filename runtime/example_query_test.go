package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A word count against the embedded broker, queried in-process with a
// Querier and over HTTP with the routing Client. Each answer names the
// replica that served it.
func Example_queries() {
	brk, err := broker.Start(broker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer brk.Close()

	b := topology.NewBuilder()
	lines := topology.Stream(b, "text", serde.Bytes, serde.String)
	words := topology.FlatMapValues(lines, func(_ []byte, l string) []string { return strings.Fields(strings.ToLower(l)) })
	topology.GroupBy(words, func(_ []byte, w string) string { return w }, "words", serde.String, serde.String).
		Count("counts")
	topo, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}

	// The query endpoint is bound first, so the App can advertise it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "eddy-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:       "wordcount",
		Brokers:             brk.Addrs(),
		StateDir:            dir,
		Endpoint:            ln.Addr().String(),
		CreateMissingTopics: true,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	srv := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("counts", serde.String, serde.Int64, nil)).HTTPServer("")
	go srv.Serve(ln)
	defer srv.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addrs()...), kgo.DefaultProduceTopic("text"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for _, l := range []string{"the cat sat", "on the mat"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(l)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	// In-process: the local replica of "the"'s partition. The first
	// assignment and a commit or two come after Start returns, so wait.
	q := iq.NewQuerier(app.Queries())
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := iq.Get(ctx, q, "counts", "the", serde.String, serde.Int64)
		if err == nil && res.Found && res.Value == 2 {
			fmt.Println("Querier: the =", res.Value, "from the", res.Provenance.Role)
			break
		}
		// Until its restoration ends, the partition's replica is a
		// restoring active, too stale for the default bound (active).
		if err != nil && !errors.Is(err, iq.ErrNotRunning) && !errors.Is(err, iq.ErrRebalancing) && !errors.Is(err, iq.ErrNotHostedHere) && !errors.Is(err, iq.ErrTooStale) {
			log.Fatal(err)
		}
		if time.Now().After(deadline) {
			log.Fatalf("not counted in time: %+v, %v", res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Over HTTP through any instance: the Client routes to the replica.
	qc, err := iq.NewClient([]string{ln.Addr().String()}, iq.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer qc.Close()
	res, err := iq.ClientGet[string, int64](ctx, qc, "counts", "mat", serde.String, iq.WithStaleness(iq.MaxLag(100)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Client: mat =", res.Value, "from the", res.Provenance.Role)
	// Output:
	// Querier: the = 2 from the active
	// Client: mat = 1 from the active
}
