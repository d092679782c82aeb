package runtime_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// The word count of the README's five-minute path, without its query
// server: a topology, an App, run until interrupted.
func Example_wordCount() {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "text", serde.Bytes, serde.String)
	words := topology.FlatMapValues(lines, func(_ []byte, l string) []string { return strings.Fields(strings.ToLower(l)) })
	topology.GroupBy(words, func(_ []byte, w string) string { return w }, "words", serde.String, serde.String).
		Count("counts").ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	app, err := runtime.New(topo, runtime.Config{ApplicationID: "wordcount", Brokers: []string{"localhost:9092"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	app.Close(context.Background())
}
