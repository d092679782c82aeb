// Package runtimetest holds black-box tests of package runtime: tests that
// drive instances through the exported API only (App, Config, topology and
// iq) and mostly wait on brokers and groups. They are a package of their
// own so that go test runs them beside runtime's white-box tests rather
// than after them.
package runtimetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// countTopology counts the records of topic "in" by key, in store "counts".
func countTopology(t testing.TB) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	s.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// startBroker starts a broker of the test's own with topics of two
// partitions.
func startBroker(t *testing.T, topics ...string) (*broker.Broker, *kadm.Client) {
	b, err := broker.Start(broker.Config{Partitions: 2})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), 2, -1, nil, topics...)
	require.NoError(t, err)
	return b, adm
}

// waitFor fails the test unless cond holds within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// activeGet reads a key through the query path under the default bound, as
// an application does: from the running active of its partition on a.
func activeGet(a *runtime.App, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(a.Queries()).GetBytes(context.Background(), store, key)
	return res.Value, res.Found, res.Provenance.Partition, err
}
