package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
)

// appACLs is the set of ACLs docs/operations.md documents for an Eddy application
// under exactly-once, for an application ID, its source topics and its
// sink topics. Describe is implied by Read and Write on Kafka (and on the
// embedded broker); it is granted explicitly, as docs/operations.md lists it.
func appACLs(app string, sources, sinks []string) []broker.ACL {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	var out []broker.ACL
	add := func(rt kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) {
		for _, op := range ops {
			out = append(out, broker.ACL{Resource: rt, Name: name, Pattern: pat, Operation: op, Allow: true})
		}
	}
	add(kmsg.ACLResourceTypeGroup, app, lit, kmsg.ACLOperationRead)
	for _, s := range sources {
		add(kmsg.ACLResourceTypeTopic, s, lit, kmsg.ACLOperationRead, kmsg.ACLOperationDescribe)
	}
	for _, s := range sinks {
		add(kmsg.ACLResourceTypeTopic, s, lit, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)
	}
	add(kmsg.ACLResourceTypeTopic, app+"-", pre, kmsg.ACLOperationCreate, kmsg.ACLOperationRead,
		kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete)
	add(kmsg.ACLResourceTypeTransactionalId, app+"-", pre, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)
	return out
}

// without returns acls less every one on resource type rt with operation
// op (on the resource named name, if name is not empty).
func without(acls []broker.ACL, rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) []broker.ACL {
	return slices.DeleteFunc(slices.Clone(acls), func(a broker.ACL) bool {
		return a.Resource == rt && a.Operation == op && (name == "" || a.Name == name)
	})
}

// secureCluster is a broker speaking only TLS and SASL/SCRAM with ACLs on,
// the word-count topics, and one SCRAM-SHA-512 user per application ID in
// users holding the ACLs given for it. The cluster's own client is a
// superuser.
func secureCluster(t *testing.T, partitions int32, users map[string][]broker.ACL) (*cluster, *tls.Config) {
	t.Helper()
	certs, err := broker.GenerateCerts()
	require.NoError(t, err)
	srv, err := certs.ServerTLS(false)
	require.NoError(t, err)
	us := []broker.User{{Mechanism: broker.MechanismSCRAMSHA512, Name: "admin", Password: "admin-pw", Superuser: true}}
	for name, acls := range users {
		us = append(us, broker.User{Mechanism: broker.MechanismSCRAMSHA512, Name: name, Password: name + "-pw", ACLs: acls})
	}
	b, err := broker.Start(broker.Config{
		Partitions:         partitions,
		CompactionInterval: time.Hour,
		TLS:                srv,
		Users:              us,
		EnableACLs:         true,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	clientTLS, err := certs.ClientTLS(false)
	require.NoError(t, err)
	m, err := broker.ClientMechanism(broker.MechanismSCRAMSHA512, "admin", "admin-pw")
	require.NoError(t, err)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.DialTLSConfig(clientTLS),
		kgo.SASL(m),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c := &cluster{b: b, cl: cl, adm: kadm.NewClient(cl), partitions: partitions, threads: streamThreads(t)}
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, inputTopic, outputTopic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	return c, clientTLS
}

// startSecure creates and starts an exactly-once word count as the user
// named like its application ID. The App is returned even when Start
// fails, with Start's error.
func startSecure(t *testing.T, c *cluster, clientTLS *tls.Config, app string) (*instance, error) {
	t.Helper()
	m, err := broker.ClientMechanism(broker.MechanismSCRAMSHA512, app, app+"-pw")
	require.NoError(t, err)
	logs := new(logBuffer)
	a, err := runtime.New(wordCount(t), runtime.Config{
		ApplicationID:       app,
		Brokers:             c.b.Addrs(),
		StateDir:            t.TempDir(),
		ProcessingGuarantee: runtime.ExactlyOnce,
		CommitInterval:      commitInterval,
		SessionTimeout:      6 * time.Second,
		NumStreamThreads:    streamThreads(t),
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", app),
		TLS:                 clientTLS,
		SASL:                m,
		// Short, so that the test sees purging work under the ACLs.
		RepartitionPurgeInterval: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	err = a.Start(sctx)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a.Close(cctx)
		if t.Failed() {
			t.Logf("logs of %s:\n%s", app, logs.String())
		}
	})
	return &instance{App: a, name: app}, err
}

// TestSecurityTLSSCRAMAndACLs runs an exactly-once word count (with a
// repartition topic and a changelog) over TLS and SASL/SCRAM as a user
// holding exactly the ACLs docs/operations.md documents, and requires exact counts;
// then, for each of two of those ACLs, a user holding all the others, and
// requires the instance to fail within a bounded time naming what is
// missing.
func TestSecurityTLSSCRAMAndACLs(t *testing.T) {
	sources, sinks := []string{inputTopic}, []string{outputTopic}
	const (
		ok      = "wcsec"
		noGroup = "wcsec-nogroup"
		noTxn   = "wcsec-notxn"
		noSink  = "wcsec-nosink"
		noBoth  = "wcsec-noboth"
	)
	c, clientTLS := secureCluster(t, 4, map[string][]broker.ACL{
		ok:      appACLs(ok, sources, sinks),
		noGroup: without(appACLs(noGroup, sources, sinks), kmsg.ACLResourceTypeGroup, "", kmsg.ACLOperationRead),
		noTxn:   without(appACLs(noTxn, sources, sinks), kmsg.ACLResourceTypeTransactionalId, "", kmsg.ACLOperationWrite),
		noSink:  without(appACLs(noSink, sources, sinks), kmsg.ACLResourceTypeTopic, outputTopic, kmsg.ACLOperationWrite),
		// Start checks the group's ACL and the topics' at the same time:
		// both missing must both be named.
		noBoth: without(without(appACLs(noBoth, sources, sinks), kmsg.ACLResourceTypeGroup, "", kmsg.ACLOperationRead),
			kmsg.ACLResourceTypeTopic, outputTopic, kmsg.ACLOperationWrite),
	})

	t.Run("documented ACLs suffice", func(t *testing.T) {
		want := make(map[string]int64)
		lines := newCorpus(12, 2000).Lines(20_000, want)
		in, err := startSecure(t, c, clientTLS, ok)
		require.NoError(t, err)
		in.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
		c.produceLines(t, lines)
		c.waitCaughtUp(t, ok)
		requireStore(t, want, in)
		// Delete on the prefix lets the repartition topic be purged.
		rp := repartitionTopic(ok)
		waitFor(t, settleTimeout, rp+" purged to the committed offsets", func() (bool, string) {
			com, err := c.committed(t, ok, rp)
			if err != nil {
				return false, err.Error()
			}
			starts := c.logStarts(t, rp)
			for p, start := range starts {
				if start == 0 || start != com[rp][p] {
					return false, fmt.Sprintf("log starts %v, committed %v", starts, com[rp])
				}
			}
			return true, ""
		})
		require.NoError(t, in.Err())
	})

	for _, tc := range []struct {
		app  string
		want []string // what the error must say
	}{
		{noGroup, []string{"GROUP_AUTHORIZATION_FAILED", `group "` + noGroup + `"`, "Read"}},
		{noTxn, []string{"TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "transactional ID", noTxn + "-", "Write"}},
		{noSink, []string{"TOPIC_AUTHORIZATION_FAILED", `topic "` + outputTopic + `"`, "Write"}},
		{noBoth, []string{"GROUP_AUTHORIZATION_FAILED", `group "` + noBoth + `"`, "TOPIC_AUTHORIZATION_FAILED", `topic "` + outputTopic + `"`}},
	} {
		t.Run("missing ACL/"+tc.app, func(t *testing.T) {
			in, err := startSecure(t, c, clientTLS, tc.app)
			if err == nil {
				select {
				case <-in.Done():
					err = in.Err()
				case <-time.After(settleTimeout):
					t.Fatalf("%s: still running after %s without its ACL (state %s)", tc.app, settleTimeout, in.State())
				}
			}
			var ae *runtime.AccessError
			require.ErrorAs(t, err, &ae)
			t.Logf("%s: %v", tc.app, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
